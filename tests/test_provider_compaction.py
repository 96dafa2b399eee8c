"""A provider's compaction in the history stands in for the turns before it, as a summary:
sent first to its own provider (the turns before it stay stored), left out for another
(the whole history and the engine's own summary instead), and never in a place the
provider rejects. Also: such conversations import through the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextwright import ContextEngine, Conversations, Message, ProviderRuleError
from contextwright.adapters import (
    from_anthropic,
    from_responses,
    render_anthropic,
    render_responses,
    validate_anthropic,
    validate_responses,
)
from contextwright.interfaces.cli._main import main
from contextwright.tokens._count import HeuristicCounter
from tests.test_adapters import RESPONSES_TYPE, sdk_check
from tests.test_fidelity import GOLDEN, sdk_check_anthropic

COMPACTION = {
    "type": "compaction",
    "content": "Summary: the user planned a trip to Lyon; budget 900 EUR; train booked.",
    "encrypted_content": "Eu8BCkYICxgCKkBmeta==",
}


def anthropic_turns(before: int, after: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i in range(before):
        turns.append({"role": "user", "content": f"early question {i}: " + "plan " * 30})
        turns.append({"role": "assistant", "content": f"early answer {i}: " + "ok " * 30})
    turns.append({"role": "user", "content": "keep going"})
    turns.append({"role": "assistant", "content": [COMPACTION]})
    for i in range(after):
        turns.append({"role": "user", "content": f"late question {i}"})
        turns.append({"role": "assistant", "content": f"late answer {i}"})
    return turns


def engine(budget: int = 3000) -> ContextEngine:
    return ContextEngine(budget=budget, counter=HeuristicCounter())


def test_anthropic_compaction_stands_in_for_the_turns_before_it() -> None:
    history = from_anthropic(anthropic_turns(before=20, after=3))
    built = engine().build_sync("and the hotel?", history=history, summary="our summary",
                                provider="anthropic")  # fmt: skip
    request = built.rendered
    validate_anthropic(request)
    sdk_check_anthropic(request, beta=True)
    first = request["messages"][0]
    assert first["role"] == "assistant"
    assert first["content"][0]["type"] == "compaction"  # the first block of the conversation
    assert first["content"][0]["content"] == COMPACTION["content"]
    assert "early question" not in json.dumps(request)
    assert "our summary" not in json.dumps(request)
    report = built.report
    assert report.block("provider_compaction").status == "included"
    assert report.block("summary").status == "skipped"
    assert report.history_total == 6  # the messages after the compaction


def test_another_provider_gets_the_whole_history_and_our_summary() -> None:
    history = from_anthropic(anthropic_turns(before=3, after=2))
    built = engine(20_000).build_sync("and the hotel?", history=history, summary="our summary",
                                      provider="openai")  # fmt: skip
    wire = json.dumps(built.rendered)
    assert "our summary" in wire
    assert "early question 0" in wire
    assert "Eu8BCkYICxgCKkBmeta" not in wire
    line = built.report.block("render:openai:anthropic compaction")
    assert line.status == "dropped"
    assert "only the provider that wrote a compaction can read it" in line.reason


def test_rendering_a_history_with_a_compaction_in_the_middle_starts_at_it() -> None:
    history = from_anthropic(anthropic_turns(before=4, after=2))
    notes: list[Any] = []
    request = render_anthropic([Message.system("s"), *history], notes=notes)
    assert request["messages"][0]["content"][0]["type"] == "compaction"
    assert request["system"] == [{"type": "text", "text": "s"}]
    assert [(n.part, n.action) for n in notes] == [("history", "dropped")]
    assert notes[0].reason.startswith("9 message(s) before an Anthropic compaction block")


def test_a_compaction_block_anywhere_else_is_rejected() -> None:
    request = {"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": [COMPACTION]},
    ]}  # fmt: skip
    with pytest.raises(ProviderRuleError, match="compaction_block_misplaced"):
        validate_anthropic(request)


def test_responses_compaction_keeps_the_user_messages_it_returned() -> None:
    # /responses/compact returns the window's user messages verbatim, then the item
    items = [
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "kept question 1"},
        {"role": "user", "content": "kept question 2"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABcompacted=="},
        {"role": "user", "content": "new question"},
        {"role": "assistant", "content": "new answer"},
    ]
    history = from_responses(items)
    built = engine().build_sync("next", history=history, provider="responses")
    out = built.rendered
    validate_responses(out)
    sdk_check(RESPONSES_TYPE, out)
    wire = json.dumps(out)
    assert "old question" not in wire
    assert "old answer" not in wire
    texts = [i.get("content") for i in out]
    start = texts.index("kept question 1")
    assert texts[start + 1] == "kept question 2"
    assert out[start + 2] == items[4]
    assert texts[start + 3] == "new question"


async def test_stored_conversation_keeps_the_originals(tmp_path: Path) -> None:
    convs = Conversations(engine(), str(tmp_path / "s.db"))
    try:
        history = from_anthropic(anthropic_turns(before=10, after=2))
        await convs.import_messages("c", history, user="u")
        built = await convs.build("c", "and the hotel?", user="u", provider="anthropic")
        assert built.rendered["messages"][0]["content"][0]["type"] == "compaction"
        stored = [m async for m in convs.messages("c", user="u")]
        assert len(stored) == len(history) + 1  # every original, and the new message
        assert stored[0].text.startswith("early question 0")
    finally:
        convs.close()


@pytest.mark.parametrize(
    ("name", "expected"),
    [("anthropic_thinking_tools.json", 6), ("responses_reasoning_tools.json", 13),
     ("openai_chat_audio_refusal.json", 11)],
)  # fmt: skip
def test_cli_imports_and_exports_provider_conversations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, expected: int
) -> None:
    db = str(tmp_path / "s.db")
    code = main(["import", str(GOLDEN / name), "--conversation", "c", "--db", db, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["imported"] == expected
    fmt = name.split("_")[0]  # anthropic, responses, openai
    exported = tmp_path / "out.json"
    code = main(["export", "c", "--db", db, "--format", fmt, "--output", str(exported)])
    assert code == 0, capsys.readouterr().err
    # the export is the same provider content: it imports again as the same messages
    code = main(["import", str(exported), "--conversation", "copy", "--db", db, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["imported"] == expected
    convs = Conversations(engine(), db)
    try:
        a = [m.to_dict()["parts"] for m in convs.messages_sync("c")]
        b = [m.to_dict()["parts"] for m in convs.messages_sync("copy")]
        assert a == b
    finally:
        convs.close()


async def test_every_backend_stores_provider_content_as_it_came(
    tmp_path: Path, backend: Any
) -> None:
    """Thinking, documents, reasoning items and native forms read back from each store
    (SQLite, memory, PostgreSQL) render as the golden payloads did."""
    anthropic = json.loads((GOLDEN / "anthropic_thinking_tools.json").read_text())
    responses = json.loads((GOLDEN / "responses_reasoning_tools.json").read_text())
    convs = Conversations(engine(), backend(tmp_path / "s.db"))
    try:
        a = from_anthropic(anthropic["messages"])
        r = from_responses(responses["input"])
        await convs.import_messages("a", a, user="u")
        await convs.import_messages("r", r, user="u")
        back_a = [m async for m in convs.messages("a", user="u")]
        back_r = [m async for m in convs.messages("r", user="u")]
        assert render_anthropic(back_a) == render_anthropic(a)
        assert render_responses(back_r) == render_responses(r)
        assert [m.parts for m in back_r] == [m.parts for m in r]
    finally:
        convs.close()
