"""The stored-conversation commands: import, inspect, compact — nothing lost."""

from __future__ import annotations

import json

import pytest

from contextwright import Message, ToolCallPart
from contextwright.adapters import render_openai_chat
from contextwright.interfaces.cli._main import main
from contextwright.stores import SQLiteStore


def big_thread(n_messages: int) -> list[Message]:
    """About ``n_messages`` messages: user steps, log searches with 150-line results, answers."""
    out: list[Message] = []
    i = 0
    while len(out) < n_messages:
        out.append(Message.user(f"Step {i}: check the logs for service {i % 13}. 第{i}步。"))
        if i % 4 == 0:
            call = ToolCallPart(f"c{i}", "grep_logs", json.dumps({"service": i % 13}))
            out.append(Message.assistant("", tool_calls=[call]))
            out.append(
                Message.tool(
                    call.id,
                    "\n".join(f"2026-11-2{i % 9} ERROR {k} timeout" for k in range(150)),
                    tool_name="grep_logs",
                )
            )
        out.append(Message.assistant(f"Service {i % 13} shows timeouts; restart it."))
        i += 1
    return out  # at least n_messages, ending on a whole exchange


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def conv_file(tmp_path):
    msgs = big_thread(10_000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(render_openai_chat(msgs), ensure_ascii=False))
    return path, msgs


def test_import_build_compact_inspect_10k(tmp_path, capsys, conv_file, monkeypatch):
    path, msgs = conv_file
    db = tmp_path / "store.db"
    code, out, err = run(
        ["import", str(path), "--conversation", "big", "--db", str(db), "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["imported"] == len(msgs)
    store = SQLiteStore(db)
    summaries = store.summaries("big", tenant="default")  # made in the background while importing
    store.close()

    code, out, err = run(["compact", "big", "--db", str(db), "--preview", "--json"], capsys)
    assert code == 0, err
    preview = json.loads(out)
    assert preview["applied"] is False
    store = SQLiteStore(db)
    assert store.summaries("big", tenant="default") == summaries  # a preview writes nothing
    store.close()

    code, out, err = run(["compact", "big", "--db", str(db), "--json"], capsys)
    assert code == 0, err
    done = json.loads(out)
    assert done["applied"] is True
    assert done["tokens_after"] < done["tokens_before"]

    # the environment variable picks the store too
    monkeypatch.setenv("CONTEXTWRIGHT_DB", str(db))
    code, out, err = run(["inspect", "big", "--json", "--budget", "4000"], capsys)
    assert code == 0, err
    info = json.loads(out)
    assert info["conversation"]["messages"] == len(msgs)
    assert info["summary"]["version"] == len(summaries) + 1
    assert info["compactions"][-1]["applied"] is True
    assert info["report"]["used"] <= 4000

    store = SQLiteStore(db)
    stored = store.read("big", tenant="default")
    assert [m.text for m in stored] == [m.text for m in msgs]  # nothing lost, verbatim
    # the import left what it summarised at once uncounted, and inspect says so
    outline = store.read_outline("big", tenant="default")
    uncounted = [o.seq for o in outline if o.tokens is None]
    assert info["conversation"]["uncounted_messages"] == len(uncounted) > 0
    assert max(uncounted) <= info["summary"]["upto_seq"]
    assert info["conversation"]["tokens"] == sum(o.tokens or 0 for o in outline)
    store.close()


def test_inspect_human_output_and_errors(tmp_path, capsys):
    db = tmp_path / "s.db"
    path = tmp_path / "small.json"
    path.write_text(json.dumps(render_openai_chat(big_thread(30))))
    assert run(["import", str(path), "--conversation", "s", "--db", str(db)], capsys)[0] == 0
    code, out, _ = run(["inspect", "s", "--db", str(db)], capsys)
    assert code == 0
    assert "compaction log" in out
    assert "context receipt" in out
    code, _, err = run(["inspect", "missing", "--db", str(db)], capsys)
    assert code == 2
    assert "no conversation 'missing'" in err
    code, _, err = run(["compact", "missing", "--db", str(db)], capsys)
    assert code == 2
    code, _, err = run(
        ["import", str(tmp_path / "nope.json"), "--conversation", "x", "--db", str(db)], capsys
    )
    assert code == 2
    assert "cannot read" in err
    assert len(err.strip().splitlines()) == 1


def test_inspect_and_compact_refuse_another_user(tmp_path, capsys):
    db = tmp_path / "s.db"
    path = tmp_path / "small.json"
    path.write_text(json.dumps(render_openai_chat(big_thread(30))))
    imp = ["import", str(path), "--conversation", "s", "--db", str(db), "--user", "ann"]
    assert run(imp, capsys)[0] == 0
    for argv in (
        ["inspect", "s", "--json"],
        ["compact", "s", "--preview", "--json"],
        ["compact", "s"],
    ):
        code, out, err = run([*argv, "--db", str(db), "--user", "bob"], capsys)
        assert code == 2, (argv, out, err)
        assert out == ""
        assert "another user, not 'bob'" in err
        assert len(err.strip().splitlines()) == 1
    assert SQLiteStore(db).summaries("s", tenant="default") == []  # bob's compact wrote nothing
    code, out, _ = run(["inspect", "s", "--json", "--db", str(db), "--user", "ann"], capsys)
    assert code == 0
    assert json.loads(out)["conversation"]["user"] == "ann"
