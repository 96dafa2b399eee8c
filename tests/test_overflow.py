"""Overflow recovery: a provider's context-length error, read and recovered from.

The providers are loopback HTTP servers speaking OpenAI Chat Completions, OpenAI
Responses and Anthropic Messages, with a context window of their own: each counts
the request it receives with a real tokenizer (`bench/_usage_traces.py`) and answers
with the provider's context-length error when it is over the window, else with an
answer and its usage. The engine's budget is larger than the window (the wrong model
table, a model swapped behind an alias), so the first request fails; the official
SDK clients raise their own exception types, which go back to
``build(retry_after_overflow=...)``; the rebuilt request fits, the receipt says what
happened, and the next turn fits without an error, by what was learnt.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextwright import (
    BudgetError,
    ContextEngine,
    Conversations,
    HeuristicCounter,
    InvalidMessageError,
    LLMError,
    Message,
    ToolCallPart,
)
from contextwright.history import CompactionConfig
from contextwright.llm._overflow import read_overflow

from .loopback import LoopbackServer, chat_completion, serving

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from _usage_traces import AnthropicLike, OpenAIChat, english_trace  # noqa: E402

WINDOW = 1400
SYSTEM = "You are a helpful office assistant. Answer briefly."


# -- reading errors -----------------------------------------------------------------------

OPENAI_RESULTED = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 9,120 tokens. Please reduce the length of the messages."
)
OPENAI_REQUESTED = (
    "This model's maximum context length is 128000 tokens. However, you requested 131000 "
    "tokens (127000 in the messages, 4000 in the completion). Please reduce the length of "
    "the messages or completion."
)
OPENAI_OLD = (
    "This model's maximum context length is 4097 tokens, however you requested 4200 tokens "
    "(3200 in your prompt; 1000 for the completion). Please reduce your prompt; or completion length."
)


def test_context_length_errors_in_every_form() -> None:
    got = read_overflow(OPENAI_RESULTED)
    assert got is not None
    assert (got.provider, got.limit, got.reported, got.input_limit) == ("openai", 8192, 9120, 8192)
    got = read_overflow({"error": {"message": OPENAI_REQUESTED, "code": "context_length_exceeded"}})
    assert got is not None
    assert (got.limit, got.reported, got.output, got.input_limit) == (128000, 127000, 4000, 124000)
    got = read_overflow(OPENAI_OLD)
    assert got is not None
    assert (got.reported, got.output, got.input_limit) == (3200, 1000, 3097)
    # the Responses API says no numbers; the code alone is enough
    got = read_overflow(
        '{"error": {"message": "Your input exceeds the context window of this model. '
        'Please adjust your input and try again.", "code": "context_length_exceeded"}}'
    )
    assert got is not None
    assert (got.provider, got.limit, got.reported) == ("openai", None, None)
    anthropic_body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208310 tokens > 200000 maximum",
        },
    }
    got = read_overflow(anthropic_body)
    assert got is not None
    assert (got.provider, got.limit, got.reported) == ("anthropic", 200000, 208310)
    got = read_overflow(
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )
    assert got is not None
    assert (got.reported, got.output, got.input_limit) == (188240, 21333, 178667)
    # wrapped: an LLMError raised from the SDK's error
    try:
        try:
            raise RuntimeError(OPENAI_RESULTED)
        except RuntimeError as exc:
            raise LLMError("the call failed") from exc
    except LLMError as wrapped:
        assert read_overflow(wrapped) is not None
    # not context-length errors
    for other in (
        {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
        "the model crashed",
        ValueError("maximum recursion"),
        None,
        42,
    ):
        assert read_overflow(other) is None


def test_other_errors_are_raised_again_unchanged() -> None:
    engine = ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=2000)
    error = TimeoutError("the provider took too long")
    with pytest.raises(TimeoutError) as info:
        engine.build_sync("hello", retry_after_overflow=error)
    assert info.value is error
    with pytest.raises(InvalidMessageError) as bad:
        engine.build_sync("hello", retry_after_overflow={"error": {"message": "bad key"}})
    assert bad.value.where == "retry_after_overflow"


def test_a_protected_zone_over_the_reported_limit_is_a_budget_error() -> None:
    engine = ContextEngine(system_prompt=SYSTEM * 40, counter=HeuristicCounter(), budget=4000)
    with pytest.raises(BudgetError):
        engine.build_sync(
            "hello", retry_after_overflow="prompt is too long: 9000 tokens > 300 maximum"
        )


# -- loopback providers with a window -----------------------------------------------------


class Provider(LoopbackServer):
    """Counts each request with ``count`` (`OpenAIChat` or `AnthropicLike`) against ``window``."""

    counter: Any
    counted: list[int]


def _respond(server: Provider, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    model = body.get("model", "")
    if path.endswith("/v1/messages"):
        n = server.counter.tokens_of({"system": body.get("system"), "messages": body["messages"]})
        server.counted.append(n)
        if n > WINDOW:
            message = f"prompt is too long: {n} tokens > {WINDOW} maximum"
            return 400, {
                "type": "error", "error": {"type": "invalid_request_error", "message": message}
            }  # fmt: skip
        return 200, {
            "id": "msg_01", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": server.answer}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": n - n // 2, "output_tokens": 9,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": n // 2},
        }  # fmt: skip
    responses = path.endswith("/responses")
    n = server.counter.tokens_of(body["input"] if responses else body["messages"])
    server.counted.append(n)
    if n > WINDOW:
        message = (
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again."
            if responses
            else f"This model's maximum context length is {WINDOW} tokens. However, your "
            f"messages resulted in {n} tokens. Please reduce the length of the messages."
        )
        error = {"message": message, "type": "invalid_request_error", "param": "input",
                 "code": "context_length_exceeded"}  # fmt: skip
        return 400, {"error": error}
    if not responses:
        answer = chat_completion(model, server.answer)
        answer["usage"] = {"prompt_tokens": n, "completion_tokens": 9, "total_tokens": n + 9}
        return 200, answer
    return 200, {
        "id": "resp_01", "object": "response", "created_at": 1_700_000_000, "model": model,
        "status": "completed", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "output": [{"type": "message", "id": "msg_01", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": server.answer, "annotations": []}]}],
        "usage": {"input_tokens": n, "output_tokens": 9, "total_tokens": n + 9,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


@pytest.fixture
def provider() -> Iterator[Provider]:
    pytest.importorskip("tiktoken")
    from contextwright import TiktokenCounter

    try:
        o200k = TiktokenCounter("o200k_base")
    except Exception as exc:
        pytest.skip(f"o200k_base: {exc}")
    server = Provider(_respond, answer="Noted; the finance team has it.")
    server.counted = []
    server.counter = OpenAIChat("o200k_base", o200k.count)
    with serving(server) as srv:
        yield srv


async def _conversation(budget: int = 2600) -> Conversations:
    engine = ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=budget)
    # The earlier triggers (clear_at_least_tokens=0): the default, cache-aware clearing,
    # summarises half a window at once, and the first request then fits the provider's
    # window: these tests need one that does not.
    compaction = CompactionConfig(clear_at_least_tokens=0)
    conversations = Conversations(engine, inline_jobs=True, compaction=compaction)
    for ask, answer in english_trace(45, seed=3):
        await conversations.append("c", [Message.user(ask), Message.assistant(answer)])
    return conversations


async def _stored_once(conversations: Conversations, text: str) -> bool:
    stored = [m async for m in conversations.messages("c")]
    return [m.text for m in stored if m.role == "user"].count(text) == 1


def _check_receipt(built: Any, provider: Provider, first_used: int) -> None:
    report = built.report
    assert report.overflow is not None
    assert report.overflow["limit"] in (WINDOW, None)
    assert report.used < first_used
    assert report.usage is not None
    assert report.usage["corrected"] <= WINDOW or report.overflow["limit"] is None
    assert any("rebuilt after a context-length error" in w for w in report.warnings)
    assert provider.counted[-1] <= WINDOW  # the rebuilt request fitted


async def test_openai_chat_overflow_is_recovered_with_the_sdk(provider: Provider) -> None:
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="k", max_retries=0)
    conversations = await _conversation()
    try:
        ask = "Who has the projector now?"
        built = await conversations.build("c", ask)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="gpt-4o", messages=built.render("openai"))
        assert provider.counted[-1] > WINDOW
        again = await conversations.build("c", ask, retry_after_overflow=info.value)
        reply = await client.chat.completions.create(
            model="gpt-4o", messages=again.render("openai")
        )
        _check_receipt(again, provider, built.report.used)
        assert again.report.overflow["reported"] == provider.counted[0]
        assert await _stored_once(conversations, ask)  # the message was not stored twice
        await conversations.append(
            "c", [Message.assistant(reply.choices[0].message.content or "")], usage=reply.usage
        )
        # the next turn fits at once: the error and the usage were learnt
        nxt = await conversations.build("c", "And the contract?")
        await client.chat.completions.create(model="gpt-4o", messages=nxt.render("openai"))
        assert provider.counted[-1] <= WINDOW
        assert nxt.report.usage is not None
        assert nxt.report.usage["source"] == "store"
        assert len(provider.counted) == 3
    finally:
        await client.close()
        await conversations.aclose()


async def test_anthropic_overflow_is_recovered_with_the_sdk(provider: Provider) -> None:
    anthropic = pytest.importorskip("anthropic")
    provider.counter = AnthropicLike("o200k_base", provider.counter.count)
    client = anthropic.AsyncAnthropic(base_url=provider.url, api_key="k", max_retries=0)
    conversations = await _conversation()
    try:
        ask = "Who has the projector now?"
        built = await conversations.build("c", ask)
        request = {"model": "claude-sonnet-4", "max_tokens": 64}
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(**request, **built.render("anthropic"))
        again = await conversations.build("c", None, retry_after_overflow=info.value)
        reply = await client.messages.create(**request, **again.render("anthropic"))
        _check_receipt(again, provider, built.report.used)
        assert [m.text for m in again.messages].count(ask) == 1  # rebuilt, not repeated
        assert await _stored_once(conversations, ask)
        await conversations.append("c", [Message.assistant(reply.content[0].text)], usage=reply)
        nxt = await conversations.build("c", "And the contract?")
        await client.messages.create(**request, **nxt.render("anthropic"))
        assert provider.counted[-1] <= WINDOW
        assert len(provider.counted) == 3
    finally:
        await client.close()
        await conversations.aclose()


async def test_responses_overflow_without_numbers_is_recovered(provider: Provider) -> None:
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="k", max_retries=0)
    conversations = await _conversation(budget=2000)
    try:
        ask = "Who has the projector now?"
        built = await conversations.build("c", ask)
        reply = None
        for _ in range(4):  # no numbers: each error cuts a fifth more
            try:
                reply = await client.responses.create(
                    model="gpt-5", input=built.render("responses")
                )
                break
            except openai.BadRequestError as exc:
                built = await conversations.build("c", ask, retry_after_overflow=exc)
                assert built.report.overflow is not None
                assert built.report.overflow["limit"] is None
        assert reply is not None
        assert reply.output_text
        assert 2 <= len(provider.counted) <= 4
        assert provider.counted[-1] <= WINDOW
        assert await _stored_once(conversations, ask)
        await conversations.append("c", [Message.assistant(reply.output_text)], usage=reply.usage)
    finally:
        await client.close()
        await conversations.aclose()


async def test_the_stateless_engine_recovers_too(provider: Provider) -> None:
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=f"{provider.url}/v1", api_key="k", max_retries=0)
    engine = ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=2600)
    history = []
    for ask, answer in english_trace(45, seed=3):
        history += [Message.user(ask), Message.assistant(answer)]
    try:
        built = await engine.build("Who has it?", history=history)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="gpt-4o", messages=built.render("openai"))
        again = await engine.build("Who has it?", history=history, retry_after_overflow=info.value)
        reply = await client.chat.completions.create(
            model="gpt-4o", messages=again.render("openai")
        )
        _check_receipt(again, provider, built.report.used)
        engine.record_usage(again, reply)  # the whole response
        nxt = await engine.build("And then?", history=history)
        await client.chat.completions.create(model="gpt-4o", messages=nxt.render("openai"))
        assert provider.counted[-1] <= WINDOW
    finally:
        await client.close()


async def test_an_agent_step_is_rebuilt_without_storing_anything_again() -> None:
    conversations = await _conversation()
    try:
        call = ToolCallPart("call_1", "search", '{"q": "projector"}')
        await conversations.append("c", [Message.user("Find the projector.")])
        await conversations.append("c", [Message.assistant(tool_calls=[call])])
        result = Message.tool("call_1", "Room 358, booked by Priya until Friday. " * 20)
        built = await conversations.build("c", result)  # the agent's next step, stored
        error = f"prompt is too long: {built.report.used * 2} tokens > 900 maximum"
        again = await conversations.build("c", result, retry_after_overflow=error)
        assert again.report.overflow is not None
        assert again.report.used < built.report.used
        assert any(m.role == "tool" for m in again.messages)  # the step is still there
        stored = [m async for m in conversations.messages("c")]
        assert [m.role for m in stored].count("tool") == 1
    finally:
        await conversations.aclose()
