"""Asking the provider to compact: `ProviderCompactor` over `ResponsesCompactClient`.

A loopback server speaks OpenAI's ``POST /v1/responses/compact`` (the window's user
messages verbatim, then one ``compaction`` item); the official SDK talks to it over a
socket. A compaction keeps the rule summary and the provider's item with the summary;
a build for Responses sends the item in place of the covered turns, a build for
Anthropic or Chat the rule summary (with a receipt line), and a failing provider
leaves the rules alone. The stored messages are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextwright import ConfigError, ContextEngine, Conversations, Message
from contextwright.adapters import validate_responses
from contextwright.history import CompactionConfig, ProviderCompactor
from contextwright.llm import ResponsesCompactClient
from contextwright.tokens._count import HeuristicCounter
from tests.test_adapters import RESPONSES_TYPE, sdk_check

from .loopback import CHAT_ERROR, LoopbackServer, serving

pytest.importorskip("openai")


def _user_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user messages of a Responses input, as ``/responses/compact`` returns them."""
    out = []
    for item in items:
        if item.get("role") != "user":
            continue
        content = item["content"]
        if isinstance(content, str):
            content = [{"type": "input_text", "text": content}]
        out.append({"type": "message", "role": "user", "content": content})
    return out


def respond(server: LoopbackServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if server.status != 200:
        return server.status, CHAT_ERROR
    assert path == "/v1/responses/compact", path
    n = sum(1 for r in server.requests if r["path"] == path)
    item = {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"gAAAA-compacted-{n}=="}
    items = [item] if server.answer != "no item" else []  # a malformed answer, when asked
    return 200, {
        "id": f"resp_cmp_{n}", "object": "response.compaction", "created_at": 1_780_000_000,
        "output": [*_user_items(body["input"]), *items],
        "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 120, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 1020},
    }  # fmt: skip


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with serving(LoopbackServer(respond, base_path="/v1")) as srv:
        yield srv


def conversations(server: LoopbackServer, tmp_path: Path, deadline: float = 10.0) -> Conversations:
    counter = HeuristicCounter()
    client = ResponsesCompactClient("gpt-5.4", base_url=server.url, timeout=deadline)
    return Conversations(
        ContextEngine(budget=4000, counter=counter),
        str(tmp_path / "s.db"),
        compaction=CompactionConfig(keep_recent_messages=4),
        summarizer=ProviderCompactor(client, counter, deadline=deadline),
        inline_jobs=True,
    )


def turns(start: int, count: int) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + count):
        out.append(Message.user(f"question {i}: where is the file config-{i}.toml?"))
        out.append(Message.assistant(f"covered answer {i}: it lives in /etc/app-{i}"))
    return out


def wire(built: Any) -> str:
    return json.dumps(built.rendered, ensure_ascii=False)


def starts(built: Any, text: str) -> bool:
    """Whether a message of the built context begins with ``text``."""
    return any(m.text.startswith(text) for m in built.messages)


async def test_the_provider_compacts_and_responses_gets_its_item(
    server: LoopbackServer, tmp_path: Path
) -> None:
    convs = conversations(server, tmp_path)
    try:
        await convs.append("c", turns(0, 8), user="u")
        result = await convs.compact("c", user="u")
        assert result.applied
        assert result.method.startswith("provider:responses-compact:gpt-5.4")
        sent = [r for r in server.requests if r["path"] == "/v1/responses/compact"]
        assert len(sent) == 1
        assert sent[0]["body"]["model"] == "gpt-5.4"
        assert "covered answer 0" in json.dumps(sent[0]["body"]["input"])  # the covered turns
        assert "covered answer 7" not in json.dumps(sent[0]["body"]["input"])  # kept ones: not

        built = await convs.build("c", "and the next one?", user="u", provider="responses")
        validate_responses(built.rendered)
        sdk_check(RESPONSES_TYPE, built.rendered)
        items = built.rendered
        compaction = [i for i in items if i.get("type") == "compaction"]
        assert compaction == [
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-compacted-1=="}
        ]
        text = wire(built)
        assert "covered answer 0" not in text  # the item stands in for the covered turns
        assert "question 0:" in text  # the user messages it returned go with it
        assert "[Summary of the earlier conversation]" not in text  # not the rules as well
        assert "covered answer 7" in text  # the kept turns follow it
        assert built.report.block("provider_compaction").status == "included"
        assert built.report.block("summary").status == "skipped"

        # the same conversation for Anthropic and Chat: the rule summary, said so
        for provider in ("anthropic", "openai"):
            other = await convs.build(
                "c", "and then?", user="u", provider=provider, store_message=False
            )
            text = wire(other)
            assert "gAAAA-compacted" not in text
            assert "compaction" not in text
            assert "[Summary of the earlier conversation]" in text
            assert not starts(other, "covered answer 0")  # as a turn: only in the summary
            line = other.report.block("provider_compaction")
            assert line.status == "skipped"
            assert f"built for {provider}" in line.reason

        stored = [m async for m in convs.messages("c", user="u")]
        assert len(stored) == 17  # every original, and the message built for
        assert stored[1].text.startswith("covered answer 0")
    finally:
        convs.close()


async def test_the_next_compaction_folds_the_previous_item_in(
    server: LoopbackServer, tmp_path: Path
) -> None:
    convs = conversations(server, tmp_path)
    try:
        await convs.append("c", turns(0, 6), user="u")
        await convs.compact("c", user="u")
        await convs.append("c", turns(6, 6), user="u")
        await convs.compact("c", user="u")
        sent = [r["body"]["input"] for r in server.requests]
        assert len(sent) == 2
        assert {
            "type": "compaction",
            "id": "cmp_1",
            "encrypted_content": "gAAAA-compacted-1==",
        } in sent[1]
        assert "covered answer 0" not in json.dumps(sent[1])  # covered by the first item
        built = await convs.build("c", "next", user="u", provider="responses")
        ids = [i["id"] for i in built.rendered if i.get("type") == "compaction"]
        assert ids == ["cmp_2"]
    finally:
        convs.close()


async def test_a_provider_error_falls_back_to_the_rules(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.status = 500
    convs = conversations(server, tmp_path)
    try:
        await convs.append("c", turns(0, 8), user="u")
        result = await convs.compact("c", user="u")
        assert result.applied
        assert result.method.startswith("rules (fallback: LLMError")
        assert "HTTP 500" in result.method
        assert len(server.requests) == 1  # tried once: no SDK retries
        built = await convs.build("c", "next", user="u", provider="responses")
        text = wire(built)
        assert "compaction" not in text
        assert "[Summary of the earlier conversation]" in text
        assert not starts(built, "covered answer 0")
    finally:
        convs.close()


async def test_a_late_provider_falls_back_to_the_rules(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.delay = 5.0  # released at teardown
    convs = conversations(server, tmp_path, deadline=0.3)
    try:
        await convs.append("c", turns(0, 8), user="u")
        result = await convs.compact("c", user="u")
        assert result.applied
        assert "fallback: " in result.method
        built = await convs.build("c", "next", user="u", provider="responses")
        assert "[Summary of the earlier conversation]" in wire(built)
    finally:
        convs.close()


async def test_an_answer_without_a_compaction_item_falls_back(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.answer = "no item"
    convs = conversations(server, tmp_path)
    try:
        await convs.append("c", turns(0, 8), user="u")
        result = await convs.compact("c", user="u")
        assert "expected one compaction item" in result.method
        built = await convs.build("c", "next", user="u", provider="responses")
        assert "[Summary of the earlier conversation]" in wire(built)
        assert not [b for b in built.report.blocks if b.name == "provider_compaction"]
    finally:
        convs.close()


def test_only_a_responses_client_is_taken() -> None:
    class Elsewhere:
        name, provider = "elsewhere", "anthropic"

        async def compact(self, items: Any) -> list[dict[str, Any]]:
            return []

    with pytest.raises(ConfigError, match="responses/compact"):
        ProviderCompactor(Elsewhere(), HeuristicCounter())
    with pytest.raises(ConfigError, match="deadline"):
        ProviderCompactor(
            ResponsesCompactClient("m", base_url="http://127.0.0.1:9"), HeuristicCounter(),
            deadline=0,
        )  # fmt: skip


async def test_after_a_fallback_the_next_compaction_carries_the_rule_summary(
    server: LoopbackServer, tmp_path: Path
) -> None:
    server.status = 500
    convs = conversations(server, tmp_path)
    try:
        await convs.append("c", turns(0, 6), user="u")
        first = await convs.compact("c", user="u")
        assert "fallback" in first.method
        server.status = 200
        await convs.append("c", turns(6, 6), user="u")
        second = await convs.compact("c", user="u")
        assert second.method.startswith("provider:")
        sent = server.requests[-1]["body"]["input"]
        assert sent[0]["role"] == "system"  # the first summary, folded into the new item
        assert sent[0]["content"].startswith("[Summary of the earlier conversation]")
        assert "covered answer 0" not in json.dumps(sent[1:])
    finally:
        convs.close()
