"""The LLM clients over real sockets, and the LLM summarizer's deadline and fallback.

Two fake providers run on loopback in a thread (stdlib ``ThreadingHTTPServer``): one
speaks OpenAI Chat Completions (``POST /v1/chat/completions``), the other Anthropic
Messages (``POST /v1/messages``). The official SDKs talk to them over HTTP; nothing in
the SDKs is patched, so these tests also catch a change in what the SDKs send.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from contextwright import HeuristicCounter, Message, MissingDependencyError
from contextwright.history import LLMSummarizer, RuleSummarizer
from contextwright.llm import LLM, AnthropicLLM, LLMError, OpenAICompatibleLLM

from .loopback import CHAT_ERROR, LoopbackServer, chat_completion, serving

FakeProvider = LoopbackServer  # answers both Chat Completions and Anthropic Messages

ANSWER = "- The user is building an async HTTP server in Rust.\n- Decision: use tokio and axum."


def respond(server: FakeProvider, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Chat Completions or Anthropic Messages, by path."""
    anthropic = path.rstrip("/").endswith("/v1/messages")
    if not anthropic and not path.rstrip("/").endswith("/chat/completions"):
        return 404, {"error": {"message": f"no route {path}"}}
    if server.status != 200:
        if anthropic:
            return server.status, {
                "type": "error", "error": {"type": "api_error", "message": "the model crashed"}
            }  # fmt: skip
        return server.status, CHAT_ERROR
    model = body.get("model", "")
    if anthropic:
        return 200, {
            "id": "msg_01", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": server.answer}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": 20},
        }  # fmt: skip
    return 200, chat_completion(model, server.answer)


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with serving(LoopbackServer(respond, answer=ANSWER)) as srv:
        yield srv


def make_llm(kind: str, server: FakeProvider, **kw: Any) -> OpenAICompatibleLLM | AnthropicLLM:
    if kind == "openai":
        return OpenAICompatibleLLM("test-model", base_url=f"{server.url}/v1", **kw)
    return AnthropicLLM("test-model", base_url=server.url, api_key="test-key", **kw)


CONVERSATION = [
    Message.user("How do I build an async HTTP server in Rust?"),
    Message.assistant("You should use tokio with axum. Add both to Cargo.toml."),
    Message.user("Which version of tokio?"),
    Message.assistant("The current version is tokio 1.44."),
]


# -- the clients -----------------------------------------------------------------------


async def test_openai_client_speaks_chat_completions(server: FakeProvider) -> None:
    llm = make_llm("openai", server)
    assert isinstance(llm, LLM)
    try:
        text = await llm.complete("Summarise this.", system="Be brief.", max_tokens=64)
    finally:
        await llm.aclose()
    assert text == ANSWER
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Summarise this."},
    ]
    # A compatible server gets the classic parameter; no key given → a placeholder.
    assert req["body"]["max_tokens"] == 64
    assert req["body"]["temperature"] == 0
    assert req["headers"]["authorization"] == "Bearer not-needed"


async def test_anthropic_client_speaks_messages(server: FakeProvider) -> None:
    llm = make_llm("anthropic", server)
    assert isinstance(llm, LLM)
    try:
        text = await llm.complete("Summarise this.", system="Be brief.", max_tokens=64)
    finally:
        await llm.aclose()
    assert text == ANSWER
    (req,) = server.requests
    assert req["path"] == "/v1/messages"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["system"] == "Be brief."
    assert req["body"]["messages"] == [{"role": "user", "content": "Summarise this."}]
    assert req["body"]["max_tokens"] == 64
    # SDK 2.x sends the key as a bearer token (1.x used x-api-key): accept either.
    headers = req["headers"]
    assert "test-key" in headers.get("x-api-key", headers.get("authorization", ""))
    assert "anthropic-version" in headers


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_http_error_is_an_llm_error_without_retries(server: FakeProvider, kind: str) -> None:
    server.status = 500
    llm = make_llm(kind, server)
    with pytest.raises(LLMError, match="500") as info:
        await llm.complete("Summarise this.")
    await llm.aclose()
    assert type(info.value.__cause__).__name__ == "InternalServerError"  # the SDK's, chained
    assert len(server.requests) == 1  # max_retries=0: the caller's deadline rules


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_sdk_timeout_is_an_llm_error(server: FakeProvider, kind: str) -> None:
    server.delay = 120.0  # released at teardown: only the SDK's timeout can end the call
    llm = make_llm(kind, server, timeout=0.3)
    with pytest.raises(LLMError, match="Timeout"):
        await llm.complete("Summarise this.")
    await llm.aclose()
    assert server.answered == 0
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("module", "cls"), [("openai", OpenAICompatibleLLM), ("anthropic", AnthropicLLM)]
)
def test_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, cls: type[Any]
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    with pytest.raises(MissingDependencyError, match=r"contextwright\[sdk\]") as info:
        cls("test-model", base_url="http://127.0.0.1:9")
    assert isinstance(info.value, ImportError)
    assert info.value.package == module


# -- the summarizer over HTTP ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_llm_summarizer_uses_the_answer(server: FakeProvider, kind: str) -> None:
    llm = make_llm(kind, server)
    counter = HeuristicCounter()
    previous = RuleSummarizer(counter).summarize_sync(
        [Message.user("I am Ana, a backend developer at a bank.")]
    )
    summarizer = LLMSummarizer(llm, counter, deadline=5.0)
    draft = await summarizer.summarize(CONVERSATION, previous=previous.content, max_tokens=300)
    await llm.aclose()
    assert draft.method == f"llm:{kind}:test-model"
    assert ANSWER in draft.content
    assert draft.tokens == counter.count(draft.content) <= 300
    assert (draft.messages, draft.user_messages, draft.assistant_messages) == (5, 3, 2)
    sent = json.dumps(server.requests[0]["body"], ensure_ascii=False)
    assert "I am Ana, a backend developer at a bank" in sent  # the previous summary
    assert "Which version of tokio?" in sent  # the new messages
    assert "Merge the previous summary and the new messages" in sent


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_slow_server_falls_back_to_rules_within_the_deadline(
    server: FakeProvider, kind: str
) -> None:
    server.delay = 120.0  # released at teardown
    llm = make_llm(kind, server)  # the SDK's own timeout (10 s) is not what stops it
    summarizer = LLMSummarizer(llm, HeuristicCounter(), deadline=0.5)
    draft = await summarizer.summarize(CONVERSATION, max_tokens=300)
    await llm.aclose()
    assert server.answered == 0  # the deadline ended it, not an answer
    assert draft.method.startswith("rules (fallback: timeout")
    assert "How do I build an async HTTP server in Rust?" in draft.content
    assert draft.messages == 4


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_server_error_falls_back_naming_the_error(server: FakeProvider, kind: str) -> None:
    server.status = 500
    llm = make_llm(kind, server)
    summarizer = LLMSummarizer(llm, HeuristicCounter(), deadline=5.0)
    draft = await summarizer.summarize(CONVERSATION, max_tokens=300)
    await llm.aclose()
    assert len(server.requests) == 1  # no retries with backoff: the error falls back at once
    assert draft.method.startswith("rules (fallback: LLMError")
    assert "InternalServerError (HTTP 500)" in draft.method
    assert "Which version of tokio?" in draft.content
