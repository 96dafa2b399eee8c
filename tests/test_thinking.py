"""Thinking under a budget: the tool loop in progress keeps its thinking, older thinking goes
first (before any turn does), and the request stays one the provider accepts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import ContextEngine, Message
from contextwright.adapters import from_responses, render_responses, validate_anthropic
from contextwright.model._native import ProviderPart, ThinkingPart
from contextwright.model._parts import TextPart, ToolCallPart
from contextwright.model._thinking import drop_thinking, loop_start
from contextwright.tokens._count import HeuristicCounter
from contextwright.tokens._frame import count_message
from tests.test_adapters import RESPONSES_TYPE, sdk_check
from tests.test_fidelity import sdk_check_anthropic


def agent_history(turns: int, steps: int, loop_steps: int) -> list[Message]:
    """``turns`` finished turns of ``steps`` tool steps each (thinking in every assistant
    message), then a turn in progress: a user message and ``loop_steps`` tool steps."""
    out: list[Message] = []
    n = 0
    for turn in range(turns):
        out.append(Message.user(f"question {turn}: check the logs of service {turn}"))
        for step in range(steps):
            n += 1
            thought = ThinkingPart(f"step {step} of turn {turn}: grep next. " * 30, f"sig-old-{n}")
            call = ToolCallPart(f"call_{n}", "grep", json.dumps({"service": turn}))
            out.append(Message("assistant", (thought, TextPart("Checking."), call)))
            out.append(Message.tool(f"call_{n}", f"result {n}: " + "ok " * 40))
        final = ThinkingPart("All clear. " * 30, f"sig-final-{turn}")
        out.append(Message("assistant", (final, TextPart(f"Turn {turn}: all good."))))
    out.append(Message.user("now fix service 9"))
    for step in range(loop_steps):
        n += 1
        thought = ThinkingPart(f"loop step {step}: look closer. " * 30, f"sig-loop-{step}")
        out.append(Message("assistant", (thought, ToolCallPart(f"call_{n}", "grep", "{}"))))
        out.append(Message.tool(f"call_{n}", "loop result " * 30))
    return out


def signatures(request: dict[str, Any]) -> list[str]:
    return [
        b["signature"]
        for m in request["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]


def build(history: list[Message], budget: int) -> Any:
    engine = ContextEngine(budget=budget, counter=HeuristicCounter(), max_message_tokens=None)
    built = engine.build_sync(None, history=history, provider="anthropic")
    validate_anthropic(built.rendered)
    sdk_check_anthropic(built.rendered)
    return built


def test_a_long_tool_loop_keeps_its_thinking_and_older_thinking_goes_first() -> None:
    history = agent_history(turns=8, steps=3, loop_steps=4)
    built = build(history, budget=6000)
    sigs = signatures(built.rendered)
    # the loop in progress: every one of its assistant turns comes back with its thinking
    assert [s for s in sigs if s.startswith("sig-loop")] == [f"sig-loop-{i}" for i in range(4)]
    # older turns lost their thinking, not their turns: the window holds all of them
    assert not [s for s in sigs if not s.startswith("sig-loop")]
    report = built.report
    assert report.history_messages == len(history) - 2  # all but the step itself
    line = report.block("thinking")
    assert line.status == "dropped"
    assert (line.original_tokens or 0) > 5000
    assert "older thinking goes first" in line.reason
    assert report.used <= report.budget
    # the receipt line says how many parts: one per older assistant message
    assert line.reason.startswith(f"{8 * 4} thinking part(s)")


def test_thinking_is_kept_whole_while_everything_fits() -> None:
    history = agent_history(turns=2, steps=2, loop_steps=2)
    built = build(history, budget=100_000)
    assert len(signatures(built.rendered)) == 2 * 3 + 2  # nothing left out: the prefix is stable
    with pytest.raises(KeyError):
        built.report.block("thinking")


@settings(max_examples=25, deadline=None)
@given(st.integers(1500, 12_000), st.integers(1, 6), st.integers(1, 3))
def test_no_turn_goes_while_older_thinking_stays(budget: int, turns: int, loop: int) -> None:
    history = agent_history(turns=turns, steps=2, loop_steps=loop)
    built = build(history, budget=budget)
    sigs = signatures(built.rendered)
    older = [s for s in sigs if not s.startswith("sig-loop")]
    if older:  # older thinking was sent: then no message of the history was left out
        assert built.report.history_messages == len(history) - 2
    # the newest step's thinking is always there (it is protected with the step)
    assert f"sig-loop-{loop - 1}" in sigs


def test_a_new_user_message_ends_the_loop_all_thinking_is_older() -> None:
    history = agent_history(turns=6, steps=3, loop_steps=2)
    engine = ContextEngine(budget=4000, counter=HeuristicCounter(), max_message_tokens=None)
    built = engine.build_sync("and now?", history=history, provider="anthropic")
    validate_anthropic(built.rendered)
    assert signatures(built.rendered) == []
    assert built.report.block("thinking").status == "dropped"


def test_loop_start_and_drop_thinking() -> None:
    history = agent_history(turns=1, steps=1, loop_steps=2)
    assert loop_start(history) == 5  # after "now fix service 9"
    thinned = drop_thinking(history[1])
    assert thinned is not None
    assert [type(p).__name__ for p in thinned.parts] == ["TextPart", "ToolCallPart"]
    assert thinned.metadata["thinking_dropped"] == 1
    assert drop_thinking(history[0]) is None  # a user message has none
    assert drop_thinking(thinned) is None


def test_counts_never_undercount_thinking() -> None:
    counter = HeuristicCounter()
    thought = ThinkingPart("a long chain of thought " * 20, "c2lnbmF0dXJl" * 20)
    m = Message("assistant", (thought,))
    assert count_message(counter, m) >= counter.count(thought.text) + counter.count(
        thought.signature or ""
    )
    redacted = Message("assistant", (ThinkingPart(redacted=True, data="ZW5j" * 100),))
    assert count_message(counter, redacted) >= counter.count("ZW5j" * 100)


# -- OpenAI Responses: reasoning goes with the ids that tie items to it ---------------------


def _reasoning(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [],
            "encrypted_content": "gAAAAAB" + "x" * 40}  # fmt: skip


def test_dropping_responses_reasoning_takes_the_ids_it_binds() -> None:
    items = [
        {"role": "user", "content": "q"},
        _reasoning(1),
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
        _reasoning(2),
        {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "done", "annotations": []}]},
    ]  # fmt: skip
    messages = from_responses(items)
    thinned = [drop_thinking(m) or m for m in messages]
    out = render_responses(thinned)  # validates: no reasoning left without its item, and back
    sdk_check(RESPONSES_TYPE, out)
    assert "rs_1" not in json.dumps(out)
    assert out[1] == {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    assert out[3] == {"role": "assistant", "content": "done"}


def test_responses_reasoning_before_an_item_that_needs_its_id_is_kept() -> None:
    computer = {"type": "computer_call", "id": "cu_1", "call_id": "c1",
                "action": {"type": "screenshot"}, "pending_safety_checks": [],
                "status": "completed"}  # fmt: skip
    messages = from_responses([{"role": "user", "content": "q"}, _reasoning(1), computer])
    assert drop_thinking(messages[1]) is None
    reasoning = ProviderPart.of("responses", "reasoning", _reasoning(3))
    alone = Message("assistant", (reasoning, TextPart("answer")))
    assert drop_thinking(alone) is not None
