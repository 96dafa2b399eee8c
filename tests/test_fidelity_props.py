"""Properties over generated conversations holding every kind of provider content:
each provider's payload comes back as it came (render -> parse -> render is the identity),
and a conversation mixing all three providers' content renders, for each, into a request
that our rules and the SDK's request types accept."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright.adapters import (
    from_anthropic,
    from_openai_chat,
    from_responses,
    render_openai_chat,
    render_responses,
)
from contextwright.model._messages import Message
from contextwright.model._thinking import drop_thinking
from tests.test_adapters import CHAT_TYPE, RESPONSES_TYPE, sdk_check
from tests.test_fidelity import anthropic_conversations, check_everywhere, input_form

TEXT = st.text(st.characters(categories=("L", "N", "P")), min_size=1, max_size=12).map(
    lambda s: s.strip() or "x"
)
ENC = st.binary(min_size=8, max_size=24).map(lambda b: base64.b64encode(b).decode())


@st.composite
def responses_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A Responses input: user turns, then the model's items (reasoning before the item it
    led to, with ids), client-run calls with their outputs, server-run calls."""
    items: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXT)}]
    for n in range(1, draw(st.integers(1, 4)) + 1):
        kind = draw(st.sampled_from(["fc", "msg", "custom", "computer", "search", "ref"]))
        if draw(st.booleans()) and kind != "ref":
            items.append({"type": "reasoning", "id": f"rs_{n}", "summary": [
                {"type": "summary_text", "text": draw(TEXT)}], "encrypted_content": draw(ENC)})  # fmt: skip
        if kind == "fc":
            items.append({"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                          "name": "lookup", "arguments": json.dumps({"q": draw(TEXT)}),
                          "status": "completed"})  # fmt: skip
            items.append({"type": "function_call_output", "call_id": f"call_{n}",
                          "output": draw(TEXT)})  # fmt: skip
        elif kind == "msg":
            items.append({"type": "message", "id": f"msg_{n}", "role": "assistant",
                          "status": "completed", "content": [
                              {"type": "output_text", "text": draw(TEXT), "annotations": []}]})  # fmt: skip
            items.append({"role": "user", "content": draw(TEXT)})
        elif kind == "custom":
            items.append({"type": "custom_tool_call", "id": f"ctc_{n}", "call_id": f"call_{n}",
                          "name": "sql", "input": draw(TEXT)})  # fmt: skip
            items.append({"type": "custom_tool_call_output", "call_id": f"call_{n}",
                          "output": draw(TEXT)})  # fmt: skip
        elif kind == "computer":
            items.append({"type": "computer_call", "id": f"cu_{n}", "call_id": f"call_{n}",
                          "action": {"type": "screenshot"}, "pending_safety_checks": [],
                          "status": "completed"})  # fmt: skip
            items.append({"type": "computer_call_output", "call_id": f"call_{n}", "output": {
                "type": "computer_screenshot", "image_url": "https://shots.example/1.png"}})  # fmt: skip
        elif kind == "search":
            items.append({"type": "web_search_call", "id": f"ws_{n}", "status": "completed",
                          "action": {"type": "search", "query": draw(TEXT)}})  # fmt: skip
            items.append({"type": "message", "id": f"msg_{n}", "role": "assistant",
                          "status": "completed", "content": [
                              {"type": "output_text", "text": draw(TEXT), "annotations": []}]})  # fmt: skip
            items.append({"role": "user", "content": draw(TEXT)})
        else:  # a stored call, referenced, and its output
            items.append({"type": "item_reference", "id": f"fc_stored_{n}"})
            items.append({"type": "function_call_output", "call_id": f"call_{n}",
                          "output": draw(TEXT)})  # fmt: skip
    return items


@settings(max_examples=40, deadline=None)
@given(responses_items())
def test_responses_round_trip_property(items: list[dict[str, Any]]) -> None:
    messages = from_responses(copy.deepcopy(items))
    out = render_responses(messages)
    sdk_check(RESPONSES_TYPE, out)
    assert out == input_form(items)
    assert render_responses(from_responses(out)) == out
    check_everywhere(messages)
    # older reasoning left out: still a request the API takes
    render_responses([drop_thinking(m) or m for m in messages])


@st.composite
def chat_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    wav = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    pdf = {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=",
                                    "filename": "a.pdf"}}  # fmt: skip
    out: list[dict[str, Any]] = []
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        extra = draw(st.lists(st.sampled_from([wav, pdf]), max_size=2))
        text = draw(TEXT)  # a lone text part is written as a string (the same request)
        content = [{"type": "text", "text": text}, *extra] if extra else text
        out.append({"role": "user", "content": content})
        kind = draw(st.sampled_from(["text", "refusal", "refusal_part", "audio", "calls"]))
        if kind == "text":
            out.append({"role": "assistant", "content": draw(TEXT)})
        elif kind == "refusal":
            out.append({"role": "assistant", "content": None, "refusal": draw(TEXT)})
        elif kind == "refusal_part":
            out.append({"role": "assistant", "content": [{"type": "text", "text": draw(TEXT)},
                        {"type": "refusal", "refusal": draw(TEXT)}]})  # fmt: skip
        elif kind == "audio":
            out.append({"role": "assistant", "content": None, "audio": {"id": f"audio_{n}"}})
        else:
            n += 2
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{n}", "type": "custom", "custom": {"name": "sql", "input": draw(TEXT)}},
                {"id": f"c{n + 1}", "type": "function", "function": {
                    "name": "f", "arguments": json.dumps({"q": draw(TEXT)})}}]})  # fmt: skip
            out.append({"role": "tool", "tool_call_id": f"c{n}", "content": draw(TEXT)})
            out.append({"role": "tool", "tool_call_id": f"c{n + 1}", "content": draw(TEXT)})
    return out


@settings(max_examples=40, deadline=None)
@given(chat_messages())
def test_openai_chat_round_trip_property(wire: list[dict[str, Any]]) -> None:
    messages = from_openai_chat(copy.deepcopy(wire))
    out = render_openai_chat(messages)
    sdk_check(CHAT_TYPE, out)
    assert out == wire
    assert render_openai_chat(from_openai_chat(out)) == out
    check_everywhere(messages)


@settings(max_examples=15, deadline=None)
@given(anthropic_conversations(), responses_items(), chat_messages(), st.permutations(range(3)))
def test_mixed_provider_content_renders_for_every_provider(
    anthropic: list[dict[str, Any]], responses: list[dict[str, Any]],
    chat: list[dict[str, Any]], order: list[int],
) -> None:  # fmt: skip
    # the generators' call ids never collide: toolu_N / srvtoolu_N, call_N, cN
    parts = [from_anthropic(anthropic), from_responses(responses), from_openai_chat(chat)]
    conversation = [Message.system("s")] + [m for i in order for m in parts[i]]
    out = check_everywhere(conversation)  # every renderer validates by default
    for provider, notes in out["notes"].items():  # its own content goes home as it came
        own = {n.part for n in notes if n.part.split()[0] == provider}
        assert own <= {"anthropic cache_control"}  # (beyond the 4 Anthropic takes)


def test_a_changed_result_answers_a_client_run_call_with_its_own_output_type() -> None:
    from contextwright.history._shorten import shorten_message
    from contextwright.tokens._count import HeuristicCounter

    items = [
        {"role": "user", "content": "q"},
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c1", "name": "sql", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "row " * 400},
        {"type": "shell_call", "id": "sh_1", "call_id": "c2", "status": "completed",
         "action": {"commands": ["ls"]}},
        {"type": "shell_call_output", "call_id": "c2", "output": [
            {"stdout": "file " * 400, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
    ]  # fmt: skip
    messages = from_responses(items)
    counter = HeuristicCounter()
    short = [shorten_message(m, 60, counter) for m in messages]  # what a window sends
    out = render_responses(short)
    sdk_check(RESPONSES_TYPE, out)
    assert [i.get("type") for i in out[2::2]] == ["custom_tool_call_output", "shell_call_output"]
    assert len(out[2]["output"]) < len(items[2]["output"])
