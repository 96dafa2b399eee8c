"""The stored-conversation commands on PostgreSQL: ``--db postgresql://…`` and
``$CONTEXTWRIGHT_DB`` import, export, inspect and compact as they do on SQLite."""

from __future__ import annotations

import json

from contextwright.adapters import render_openai_chat
from tests.test_cli_history import big_thread, run


def test_import_export_inspect_compact_on_postgresql(tmp_path, capsys, pg_url, monkeypatch):
    msgs = big_thread(300)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(render_openai_chat(msgs), ensure_ascii=False), encoding="utf-8")
    base = ["--db", pg_url, "--json"]
    code, out, err = run(["import", str(path), "--conversation", "pg", *base], capsys)
    assert code == 0, err
    assert json.loads(out)["imported"] == len(msgs)
    # importing again stores nothing twice
    code, out, err = run(["import", str(path), "--conversation", "pg", *base], capsys)
    assert (code, json.loads(out)["imported"], json.loads(out)["skipped"]) == (0, 0, len(msgs))
    code, out, err = run(["export", "pg", "--db", pg_url], capsys)
    assert code == 0, err
    exported = [json.loads(line) for line in out.splitlines()]
    assert [m["seq"] for m in exported] == list(range(1, len(msgs) + 1))
    assert [m["parts"] for m in exported] == [m.to_dict()["parts"] for m in msgs]
    code, out, err = run(["compact", "pg", *base], capsys)
    assert code == 0, err
    # the environment names the database just as well
    monkeypatch.setenv("CONTEXTWRIGHT_DB", pg_url)
    code, out, err = run(["inspect", "pg", "--json"], capsys)
    assert code == 0, err
    assert "pg" in out
    code, out, err = run(["inspect", "nope"], capsys)
    assert code == 2
    assert "no conversation 'nope'" in err
    assert "postgresql://" in err  # names where it looked (without a password: there is none)
