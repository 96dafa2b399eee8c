"""README.md works as written: its python snippets run, in order, and so do its CLI lines.

The python blocks are one session: each runs in the namespace the ones before it
left, in an empty folder; a block with a top-level ``await`` runs on an event
loop (the README says those lines belong in an async function). Every
``contextwright …`` line of the bash blocks runs through the real entry point
twice: with every ``[optional]`` part (the first of ``a|b`` alternatives) and with
none, its placeholders (``conversation.json``, ``ID``, ``PATH``, ``DIR``…) filled
with small files made here.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import re
import shlex
from pathlib import Path

import pytest

from contextwright.interfaces.cli._main import main

from .test_eval import SYNTHETIC

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def test_the_readme_has_snippets():
    assert len(blocks("python")) >= 3
    assert any("contextwright eval" in b for b in blocks("bash"))


def test_python_snippets_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTEXTWRIGHT_DB", str(tmp_path / "cli.db"))  # never the user's own
    ns: dict[str, object] = {"__name__": "readme"}
    loop = asyncio.new_event_loop()
    try:
        for i, source in enumerate(blocks("python"), 1):
            code = compile(
                source, f"README.md python block {i}", "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True,
            )  # fmt: skip
            if code.co_flags & inspect.CO_COROUTINE:
                loop.run_until_complete(eval(code, ns))
            else:
                exec(code, ns)
        if "hits" in ns:  # the memory snippet's search finds what the writer extracted
            assert any("35" in h.memory.content for h in ns["hits"]), ns["hits"]
        if "found" in ns:
            assert any("120" in h.passage.content for h in ns["found"]), ns["found"]
    finally:
        for value in reversed(list(ns.values())):  # writers before the stores they write to
            close = getattr(value, "close", None)
            if callable(close) and not isinstance(value, type) and not inspect.ismodule(value):
                with contextlib.suppress(Exception):
                    result = close()
                    if inspect.isawaitable(result):
                        loop.run_until_complete(result)
        loop.close()


def cli_lines() -> list[str]:
    lines = []
    for block in blocks("bash"):
        for line in block.splitlines():
            if line.strip().startswith("contextwright "):
                lines.append(line.strip())
    return lines


def _argv(line: str, optional: bool, fill: dict[str, str]) -> list[str]:
    if optional:
        line = re.sub(r"\[([^\[\]]*)\]", r"\1", line)
    else:
        line = re.sub(r"\s*\[[^\[\]]*\]", "", line)
    line = re.sub(r"([\w.-]+)(?:\|[\w.-]+)+", r"\1", line)  # a|b|c: the first
    words = shlex.split(line, comments=True)[1:]
    return [fill.get(w, w) for w in words]


@pytest.mark.parametrize("optional", [True, False], ids=["with-options", "bare"])
def test_cli_lines_run(tmp_path, monkeypatch, capsys, optional):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTEXTWRIGHT_DB", str(tmp_path / "default.db"))
    conversation = tmp_path / "conversation.json"
    conversation.write_text(
        json.dumps([
            {"role": "user", "content": "Let's plan the launch party. We have 4,000 euros."},
            {"role": "assistant", "content": "Noted: a budget of 4,000 euros."},
            {"role": "user", "content": "What did we decide about the budget?"},
        ]),
        encoding="utf-8",
    )  # fmt: skip
    locomo = tmp_path / "locomo"
    locomo.mkdir()
    (locomo / "synthetic.json").write_text(json.dumps(SYNTHETIC), encoding="utf-8")
    fill = {
        "conversation.json": str(conversation), "ID": "conv-1", "U": "u1",
        "PATH": str(tmp_path / "store.db"), "N": "4000", "DIR": str(locomo),
        "…": "What did we decide about the budget?",
    }  # fmt: skip
    lines = cli_lines()
    assert {ln.split()[1] for ln in lines} >= {
        "demo",
        "build",
        "import",
        "inspect",
        "compact",
        "export",
        "eval",
    }
    for line in lines:
        argv = _argv(line, optional, fill)
        if argv[0] in ("inspect", "compact", "export") and "--db" not in argv and optional:
            argv += ["--db", fill["PATH"]]  # where the import line above stored it
        try:
            code = main(argv)
        except SystemExit as exc:  # --version, --help
            code = exc.code
        out, err = capsys.readouterr()
        assert code == 0, f"{line!r} → {argv}: {err}"
        assert out.strip(), line
