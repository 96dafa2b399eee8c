"""The command line as a newcomer meets it: default paths, re-imports, models, request bodies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import contextwright
from contextwright.interfaces.cli._main import main
from contextwright.stores import SQLiteStore

SRC = str(Path(contextwright.__file__).resolve().parents[1])  # the code under test


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def cli(args: list[str], home: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess, with ``home`` as $HOME and no XDG or store variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("XDG_") and k not in ("CONTEXTWRIGHT_DB", "HOME")
    }
    env.update(HOME=str(home), PYTHONPATH=SRC + os.pathsep + env.get("PYTHONPATH", ""))
    env.update(extra_env)
    return subprocess.run(
        [sys.executable, "-m", "contextwright", *args],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip


CHAT = [
    {"role": "user", "content": "What is the capital of Portugal?"},
    {"role": "assistant", "content": "Lisbon."},
    {"role": "user", "content": "ok"},
    {"role": "assistant", "content": "ok"},
]


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False))
    return path


# -- the default database location ----------------------------------------------------------


def test_import_on_a_fresh_home_creates_the_default_store(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    conv = write(tmp_path / "c.json", CHAT)
    proc = cli(["import", str(conv), "--conversation", "X", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["imported"] == 4
    db = home / ".local" / "share" / "contextwright" / "contextwright.db"
    assert db.is_file()
    proc = cli(["inspect", "X", "--json"], home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["conversation"]["messages"] == 4


def test_the_default_store_follows_xdg_data_home(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    conv = write(tmp_path / "c.json", CHAT)
    proc = cli(["import", str(conv), "--conversation", "X"], home, XDG_DATA_HOME=str(data))
    assert proc.returncode == 0, proc.stderr
    assert (data / "contextwright" / "contextwright.db").is_file()
    assert not (home / ".local").exists()


# -- import is idempotent ---------------------------------------------------------------------


def test_importing_the_same_file_again_stores_nothing_twice(tmp_path, capsys):
    db, conv = str(tmp_path / "s.db"), write(tmp_path / "c.json", CHAT)
    argv = ["import", str(conv), "--conversation", "X", "--db", db, "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert json.loads(out) | {"tokens": 0} == {
        "conversation": "X", "imported": 4, "skipped": 0, "last_seq": 4, "messages": 4, "tokens": 0,
    }  # fmt: skip
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert (json.loads(out)["imported"], json.loads(out)["skipped"]) == (0, 4)
    assert json.loads(out)["messages"] == 4
    # the file grew: only the new messages are stored, after the others
    more = [
        *CHAT,
        {"role": "user", "content": "And of Spain?"},
        {"role": "assistant", "content": "Madrid."},
    ]
    write(conv, more)
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert (json.loads(out)["imported"], json.loads(out)["skipped"]) == (2, 4)
    store = SQLiteStore(db)
    assert [m.text for m in store.read("X", tenant="default")] == [m["content"] for m in more]
    store.close()


def test_a_changed_file_is_refused_and_nothing_is_written(tmp_path, capsys):
    db, conv = str(tmp_path / "s.db"), write(tmp_path / "c.json", CHAT)
    argv = ["import", str(conv), "--conversation", "X", "--db", db]
    assert run(argv, capsys)[0] == 0
    write(conv, [CHAT[0], {"role": "assistant", "content": "Porto."}, *CHAT[2:]])
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "message 1 of" in err
    assert "new --conversation" in err
    store = SQLiteStore(db)
    assert [m.text for m in store.read("X", tenant="default")] == [m["content"] for m in CHAT]
    store.close()
    # the same file into another conversation is a new import
    code, out, err = run([*argv[:3], "Y", "--db", db, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["imported"] == 4


# -- --version, --model ---------------------------------------------------------------------------


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"contextwright {metadata.version('contextwright')}"


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "FILE", "--budget", "500", "--model", "gtp-4o"],
        ["demo", "--model", "gtp-4o"],
        ["import", "FILE", "--conversation", "X", "--db", "DB", "--model", "gtp-4o"],
        ["inspect", "X", "--db", "DB", "--model", "gtp-4o"],
    ],
)
def test_an_unknown_model_exits_2_with_one_line(tmp_path, capsys, argv):
    conv = write(tmp_path / "c.json", [{"role": "user", "content": "hi"}])
    db = tmp_path / "s.db"
    run(["import", str(conv), "--conversation", "X", "--db", str(db)], capsys)
    argv = [str(conv) if a == "FILE" else str(db) if a == "DB" else a for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("contextwright: error: --model: unknown model 'gtp-4o'")


def test_a_known_model_counts_with_its_exact_tokenizer(tmp_path, capsys):
    pytest.importorskip("tiktoken")
    conv = write(tmp_path / "c.json", [{"role": "user", "content": "hi"}])
    code, out, err = run(["build", str(conv), "--budget", "500", "--model", "gpt-4o", "--json"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["report"]["counter"] == "tiktoken:o200k_base"
    # a saved request body's model picks the tokenizer for import too
    body = write(tmp_path / "req.json", {"model": "gpt-4", "messages": CHAT, "temperature": 0})
    db = str(tmp_path / "s.db")
    assert run(["import", str(body), "--conversation", "X", "--db", db], capsys)[0] == 0
    store = SQLiteStore(db)
    # stored counts are labelled with the counter (and the overhead profile after a "+")
    counters = {o.counter.split("+")[0] for o in store.read_outline("X", tenant="default")}
    assert counters == {"tiktoken:cl100k_base"}
    store.close()


# -- request bodies ---------------------------------------------------------------------------------


def _build(path: Path, capsys) -> dict:
    code, out, err = run(["build", str(path), "--budget", "2000", "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_saved_request_bodies_are_read(tmp_path, capsys):
    openai = {
        "model": "gpt-4o-mini", "temperature": 0.2, "max_tokens": 300, "stream": False,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto", "metadata": {"app": "x"}, "response_format": {"type": "text"},
        "messages": [{"role": "system", "content": "Be brief."}, *CHAT[:3]],
    }  # fmt: skip
    got = _build(write(tmp_path / "openai.json", openai), capsys)
    assert got["messages"][0] == {"role": "system", "content": "Be brief."}
    assert {"role": "user", "content": "ok"} in got["messages"]
    assert got["report"]["counter"].startswith(("tiktoken", "heuristic"))

    anthropic = {
        "model": "claude-sonnet-4-20250514", "max_tokens": 1024, "temperature": 1, "top_k": 5,
        "stop_sequences": ["\n\nHuman:"], "metadata": {"user_id": "u-1"}, "stream": True,
        "system": [{"type": "text", "text": "Answer in French.", "cache_control": {"type": "ephemeral"}}],
        "messages": CHAT[:3], "tools": [], "thinking": {"type": "disabled"},
    }  # fmt: skip
    got = _build(write(tmp_path / "anthropic.json", anthropic), capsys)
    assert got["messages"][0]["content"].startswith("Answer in French.")

    responses = {
        "model": "gpt-4.1", "instructions": "Answer in Spanish.", "input": "Hola?",
        "max_output_tokens": 100, "reasoning": {"effort": "low"}, "store": False,
        "text": {"format": {"type": "text"}}, "truncation": "auto", "include": [],
        "conversation": {"id": "conv_123"},
    }  # fmt: skip
    got = _build(write(tmp_path / "responses.json", responses), capsys)
    assert got["messages"][0]["content"].startswith("Answer in Spanish.")
    assert {"role": "user", "content": "Hola?"} in got["messages"]

    items = {**responses, "input": [{"role": "user", "content": "¿Qué tal?"}]}
    got = _build(write(tmp_path / "items.json", items), capsys)
    assert {"role": "user", "content": "¿Qué tal?"} in got["messages"]


def test_a_key_that_is_neither_ours_nor_a_request_parameter_is_still_refused(tmp_path, capsys):
    path = write(tmp_path / "c.json", {"messages": CHAT[:1], "temprature": 0})
    code, _, err = run(["build", str(path), "--budget", "500"], capsys)
    assert code == 2
    assert "temprature: unknown key" in err


# -- error lines ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [None, "[1, 2", '{"messages": 3}', '[{"role": "wizard", "content": "hi"}]', '{"oops": 1}'],
)
@pytest.mark.parametrize("command", ["build", "import"])
def test_errors_name_the_file_once(tmp_path, capsys, content, command):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    extra = ["--budget", "500"] if command == "build" else ["--conversation", "X", "--db", str(tmp_path / "s.db")]  # fmt: skip
    code, _, err = run([command, str(path), *extra], capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"contextwright: error: {path}")
    assert err.count(str(path)) == 1, err


def test_the_budget_error_is_an_error_line(tmp_path, capsys):
    path = write(tmp_path / "c.json", [{"role": "user", "content": "hi"}])
    code, _, err = run(["build", str(path), "--budget", "3"], capsys)
    assert code == 2
    assert err.startswith("contextwright: error: budget: protected zone")
    assert err.count("\n") == 1
