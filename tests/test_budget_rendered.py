"""The budget holds for the request as each provider receives it.

The requests built here are rendered (`BuiltContext.render`) and counted with
tiktoken directly, by the provider's accounting, not by the engine's counter:

* OpenAI Chat Completions — the published formula (OpenAI cookbook, "How to count
  tokens with tiktoken"): 3 tokens per message plus every string value of it
  encoded (its role included), 1 more for a ``name``, 3 to prime the reply. A tool
  call is counted as a message of its own holding its strings (id, type, name,
  arguments); the parts of a list content count by their text.
* OpenAI Responses — the same formula applied to every ``input`` item, every
  string value of it encoded (``type`` included).
* Anthropic — no published tokenizer or framing; the proxy counts the ``system``
  field and each turn as a message (3 + role), and each content block 3 more beside
  its strings (a tool use's ``input`` as the JSON text it came from).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import (
    BudgetError,
    ContextEngine,
    HeuristicCounter,
    Message,
    MessageOverhead,
    TiktokenCounter,
)
from contextwright.model._parts import TextPart, ToolCallPart, ToolResultPart

pytest.importorskip("tiktoken")

ENCODINGS = {name: TiktokenCounter(name).encoding for name in ("o200k_base", "cl100k_base")}
Enc = Callable[[str], int]


def _encoder(encoding: str) -> Enc:
    enc = ENCODINGS[encoding]
    return lambda text: len(enc.encode_ordinary(text))


def _texts(content: Any, n: Enc) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return n(content)
    return sum(n(p["text"]) for p in content if "text" in p)


def openai_chat_tokens(request: list[dict[str, Any]], n: Enc) -> int:
    total = 3  # <|start|>assistant<|message|>
    for m in request:
        total += 3
        for key, value in m.items():
            if key == "content":
                total += _texts(value, n)
            elif key == "tool_calls":
                for call in value:
                    fn = call["function"]
                    total += 3 + n(m["role"]) + n(call["id"]) + n(call["type"])
                    total += n(fn["name"]) + n(fn["arguments"])
            else:
                total += n(value)
                if key == "name":
                    total += 1
    return total


def responses_tokens(request: list[dict[str, Any]], n: Enc) -> int:
    total = 3
    for item in request:
        total += 3
        for key, value in item.items():
            total += _texts(value, n) if key in ("content", "output") else n(value)
    return total


def anthropic_tokens(request: dict[str, Any], n: Enc) -> int:
    def block(b: dict[str, Any]) -> int:
        if b["type"] == "text":
            return 3 + n(b["text"])
        if b["type"] == "tool_use":
            arguments = json.dumps(b["input"], ensure_ascii=False)
            return 3 + n(b["id"]) + n(b["name"]) + n(arguments)
        assert b["type"] == "tool_result", b
        content = b.get("content")
        inner = n(content) if isinstance(content, str) else sum(map(block, content or []))
        return 3 + n(b["tool_use_id"]) + inner

    total = 3
    if "system" in request:
        total += 3 + n("system") + sum(map(block, request["system"]))
    for turn in request["messages"]:
        total += 3 + n(turn["role"]) + sum(map(block, turn["content"]))
    return total


def rendered_tokens(built: Any, provider: str, encoding: str) -> int:
    n = _encoder(encoding)
    if provider == "openai":
        return openai_chat_tokens(built.render("openai"), n)
    if provider == "responses":
        return responses_tokens(built.render("responses"), n)
    return anthropic_tokens(built.render("anthropic"), n)


PROVIDERS = ("openai", "responses", "anthropic")

# -- the regression: many short messages ----------------------------------------------


def _short_history(n: int) -> list[Message]:
    return [Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(n)]


@pytest.mark.parametrize(("messages", "budget"), [(731, 3000), (20_000, 8000)])
def test_many_short_messages_stay_under_budget_as_rendered(messages: int, budget: int) -> None:
    engine = ContextEngine(counter=TiktokenCounter("o200k_base"), restate_goal=False)
    built = engine.build_sync("next?", history=_short_history(messages), budget=budget)
    assert built.report.history_messages > 0
    for provider in PROVIDERS:
        rendered = rendered_tokens(built, provider, "o200k_base")
        assert rendered <= budget, provider
        # the receipt's count bounds what every provider receives
        assert built.report.used >= rendered, provider
    assert built.report.used <= budget


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_provider_profile_fits_its_own_provider(provider: str) -> None:
    engine = ContextEngine(counter=TiktokenCounter("o200k_base"), overhead=provider)
    built = engine.build_sync("next?", history=_short_history(731), budget=3000)
    rendered = rendered_tokens(built, provider, "o200k_base")
    assert rendered <= built.report.used <= 3000
    # a profile of one provider leaves more room for history than the default
    default = ContextEngine(counter=TiktokenCounter("o200k_base"))
    wider = default.build_sync("next?", history=_short_history(731), budget=3000)
    assert built.report.history_messages >= wider.report.history_messages


# -- the property: varied conversations -------------------------------------------------

WORDS = st.sampled_from(
    ["ok", "yes", "no", "hi", "thanks", "用户", "登录失败", "你好", "😀", "42", "x", "the end",
     "it's", "  ", "\n", ".", "GET /api", "naïve", "🇫🇷", "   indent", "\t", "a\n\nb"]
)  # fmt: skip
TEXT = st.lists(WORDS, min_size=0, max_size=6).map("".join)
NAMES = st.none() | st.sampled_from(["ann", "bob_2", "tool-user"])
ARGS = st.dictionaries(
    st.sampled_from(["q", "path", "查询", "n"]), st.one_of(TEXT, st.integers(-5, 10**6)), max_size=3
).map(lambda d: json.dumps(d, ensure_ascii=False) if d else "")


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    call_no = 0
    for _ in range(draw(st.integers(0, 120))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
            out.append(Message.user(draw(TEXT), name=draw(NAMES)))
        elif kind == "assistant":
            out.append(Message.assistant(draw(TEXT) or "ok", name=draw(NAMES)))
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_no += 1
                name = draw(st.sampled_from(["search", "read_file", "查"]))
                calls.append(ToolCallPart(f"call_{call_no}", name, draw(ARGS)))
            out.append(Message.assistant(draw(TEXT), tool_calls=calls))
            if draw(st.booleans()):  # one tool message holding every result
                results = tuple(ToolResultPart(c.id, draw(TEXT)) for c in calls)
                out.append(Message("tool", results))
            else:
                for c in calls:
                    content: str | tuple[TextPart, ...] = draw(TEXT)
                    if draw(st.booleans()):
                        content = (TextPart(draw(TEXT)), TextPart(draw(TEXT)))
                    out.append(Message("tool", (ToolResultPart(c.id, content),)))
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(
    history=conversations(),
    budget=st.integers(60, 1500),
    encoding=st.sampled_from(sorted(ENCODINGS)),
    heuristic=st.booleans(),
    system=st.sampled_from(["", "Be brief.", "你是助手。"]),
    summary=st.none() | TEXT,
    current=TEXT.filter(lambda s: s.strip() != ""),
    name=NAMES,
)
def test_rendered_requests_never_exceed_the_budget(
    history: list[Message], budget: int, encoding: str, heuristic: bool, system: str,
    summary: str | None, current: str, name: str | None,
) -> None:  # fmt: skip
    """Whatever provider a default build is rendered for, its request fits the budget.

    The engine counts with tiktoken or with the heuristic (which never counts fewer
    tokens than either encoding); the request is counted with tiktoken.
    """
    counter = HeuristicCounter() if heuristic else TiktokenCounter(encoding)
    engine = ContextEngine(system_prompt=system, counter=counter, pinned=["Answer in English."])
    try:
        built = engine.build_sync(
            Message.user(current, name=name), history=history, budget=budget, summary=summary
        )
    except BudgetError:
        return  # the protected zone alone does not fit: nothing is sent
    assert built.report.used <= budget
    for provider in PROVIDERS:
        rendered = rendered_tokens(built, provider, encoding)
        assert rendered <= budget, (provider, rendered, budget)
        assert rendered <= built.report.used, provider


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=conversations(),
    budget=st.integers(60, 1500),
    provider=st.sampled_from(PROVIDERS),
)
def test_provider_profiles_never_exceed_the_budget_of_their_provider(
    history: list[Message], budget: int, provider: str
) -> None:
    engine = ContextEngine(
        system_prompt="Be brief.",
        counter=TiktokenCounter("o200k_base"),
        overhead=MessageOverhead.for_provider(provider),
    )
    try:
        built = engine.build_sync("and now?", history=history, budget=budget)
    except BudgetError:
        return
    rendered = rendered_tokens(built, provider, "o200k_base")
    assert rendered <= built.report.used <= budget


def test_rendering_for_a_provider_the_profile_does_not_cover_is_reported() -> None:
    engine = ContextEngine(counter=TiktokenCounter("o200k_base"), overhead="openai")
    fits = engine.build_sync("hi", budget=500, provider="openai")
    assert not fits.report.warnings
    other = engine.build_sync("hi", budget=500, provider="anthropic")
    assert any("another provider's" in w for w in other.report.warnings)
    default = ContextEngine(counter=TiktokenCounter("o200k_base"))
    for provider in PROVIDERS:
        assert not default.build_sync("hi", budget=500, provider=provider).report.warnings
