"""The command line: demo, build, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contextwright import Message, TiktokenCounter, ToolCallPart, count_messages
from contextwright.adapters import (
    from_anthropic,
    from_openai_chat,
    from_responses,
    render_anthropic,
    render_openai_chat,
    render_responses,
    validate_anthropic,
    validate_openai_chat,
    validate_responses,
)
from contextwright.interfaces.cli._main import main


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def long_conversation(n_units: int = 300) -> list[Message]:
    msgs: list[Message] = [Message.system("You are a data assistant.")]
    for i in range(n_units):
        msgs.append(Message.user(f"Question {i}: how many rows in table_{i}? 请说明原因。"))
        if i % 3 == 0:
            calls = [
                ToolCallPart(
                    f"call_{i}_{k}", "sql", json.dumps({"q": f"select count(*) from t{i}"})
                )
                for k in range(1 + i % 2)
            ]
            msgs.append(Message.assistant("Checking.", tool_calls=calls))
            for c in calls:
                msgs.append(
                    Message.tool(
                        c.id,
                        json.dumps(
                            [{"row": r, "value": "x" * (r % 7)} for r in range(40 + i % 50)]
                        ),
                    )
                )
        msgs.append(Message.assistant(f"Table {i} has {i * 7} rows. 共有{i * 7}行。"))
    return msgs


def test_demo_prints_receipt_and_messages(capsys):
    code, out, err = run(["demo"], capsys)
    assert code == 0, err
    assert "context receipt" in out
    assert "current_message" in out
    assert "那我应该申请高才通B类还是优才" in out
    assert "policy_search" in out


def test_demo_says_it_uses_the_consultation_preset(capsys):
    code, out, err = run(["demo"], capsys)
    assert code == 0, err
    assert "consultation preset" in out
    assert "collected_info" in out  # a block of the preset
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "consultation preset" in capsys.readouterr().out


@pytest.mark.parametrize("preset", [None, "consultation"])
def test_build_adds_consultation_blocks_only_with_the_preset(tmp_path, capsys, preset):
    """The demo file built with `build`: the general sources add its memories and
    knowledge, never the statistics, device or agent blocks unless asked for."""
    from importlib import resources

    ref = resources.files("contextwright.data").joinpath("demo_conversation.json")
    path = tmp_path / "demo.json"
    path.write_text(ref.read_text(encoding="utf-8"), encoding="utf-8")
    argv = ["build", str(path), "--budget", "4000", "--json"]
    code, out, err = run([*argv, "--preset", preset] if preset else argv, capsys)
    assert code == 0, err
    report = json.loads(out)["report"]
    shown = {b["name"] for b in report["blocks"] if b["status"] in ("included", "truncated")}
    preset_only = {"collected_info", "conversation_stats", "assessment_result"}
    if preset:
        assert preset_only <= shown
    else:
        listed = {b["name"] for b in report["blocks"]}
        assert not (preset_only | {"device_context", "active_agents_history"}) & listed
        assert "user_memory" in shown  # the file's memories are asked for
    request = json.dumps(json.loads(out)["messages"], ensure_ascii=False)
    assert ("指引" in request) is bool(preset)


def test_demo_json_is_within_budget_and_valid(capsys):
    code, out, _ = run(["demo", "--json", "--format", "anthropic", "--budget", "1200"], capsys)
    assert code == 0
    payload = json.loads(out)
    validate_anthropic(payload["messages"])
    assert payload["report"]["used"] <= 1200


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("budget", [700, 1500, 4000, 16000])
def test_build_long_conversation_respects_budget_and_rules(tmp_path, capsys, fmt, budget):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(render_openai_chat(long_conversation())))
    code, out, err = run(
        [
            "build",
            str(path),
            "--budget",
            str(budget),
            "--model",
            "gpt-4",
            "--format",
            fmt,
            "--json",
            "--query",
            "What was the largest table?",
        ],
        capsys,
    )
    assert code == 0, err
    payload = json.loads(out)
    request = payload["messages"]
    counter = TiktokenCounter("cl100k_base")
    if fmt == "openai":
        validate_openai_chat(request)
        back = from_openai_chat(request)
    elif fmt == "anthropic":
        validate_anthropic(request)
        back = from_anthropic(request["messages"], system=request.get("system"))
    else:
        validate_responses(request)
        back = from_responses(request)
    assert payload["report"]["used"] <= budget
    assert payload["report"]["exact"] is True
    if fmt == "openai":  # the same messages, recounted from the wire form by the real tokenizer
        assert count_messages(counter, back) <= budget
    assert "What was the largest table?" in json.dumps(request, ensure_ascii=False)


def test_build_reads_jsonl_and_anthropic_shapes(tmp_path, capsys):
    msgs = [*long_conversation(5)[1:], Message.user("最后一个问题?")]
    jsonl = tmp_path / "conv.jsonl"
    jsonl.write_text("\n".join(json.dumps(m, ensure_ascii=False) for m in render_openai_chat(msgs)))
    code, out, err = run(["build", str(jsonl), "--budget", "2000", "--json"], capsys)
    assert code == 0, err
    assert "最后一个问题" in json.loads(out)["messages"][-2]["content"]
    anth = tmp_path / "anth.json"
    anth.write_text(json.dumps(render_anthropic(msgs)["messages"], ensure_ascii=False))
    code, out, err = run(
        ["build", str(anth), "--budget", "2000", "--format", "anthropic", "--json"], capsys
    )
    assert code == 0, err
    resp = tmp_path / "resp.json"
    resp.write_text(json.dumps(render_responses(msgs), ensure_ascii=False))
    code, out, err = run(["build", str(resp), "--budget", "2000", "--json"], capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    ("content", "argv_extra", "needle"),
    [
        (None, [], "cannot read"),
        ("[1, 2", [], "invalid JSON"),
        ('{"role": "user"', [], "invalid JSON"),
        ("42", [], "must be an object"),
        ('"just a string"', [], "must be an object"),
        ('{"messages": [], "oops": 1}', [], "unknown key"),
        (
            '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]',
            [],
            "last message must be a user message",
        ),
        ('[{"role": "wizard", "content": "hi"}]', [], "messages[0]"),
        (
            '[{"role": "user", "content": "hi"}]',
            ["--budget", "0"],
            "--budget must be a positive integer",
        ),
        ('[{"role": "user", "content": "hi"}]', ["--budget", "5"], "protected zone"),
        ('[{"role": "user", "content": "hi"}]', ["--query", " "], "--query"),
        (
            '[{"role": "user", "content": "hi"}]',
            ["--model", "nonexistent-model"],
            "--model: unknown model",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, content, argv_extra, needle):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    argv = ["build", str(path), *argv_extra]
    if "--budget" not in argv_extra and "--model" not in argv_extra:
        argv += ["--budget", "500"]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]


def test_console_script_runs(tmp_path):
    path = tmp_path / "in.json"
    path.write_text('[{"role": "user", "content": "hello"}]')
    proc = subprocess.run(
        [sys.executable, "-m", "contextwright", "build", str(path), "--budget", "300", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["report"]["budget"] == 300
