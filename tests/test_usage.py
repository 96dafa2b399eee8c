"""Real usage fed back: providers' usage read in every shape, the correction learnt from
it, builds fitted by it, shared by workers through the store, converging on real
tokenizers.

The "providers" of the convergence tests are real tokenizers counting the request as
the provider's format sends it (`bench/_usage_traces.py`): OpenAI Chat counted as
OpenAI's cookbook does with o200k_base, and the Anthropic request counted block by
block with cl100k_base (Anthropic's own tokenizer does not ship offline), on
generated English and Chinese conversations.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import (
    ContextEngine,
    Conversations,
    HeuristicCounter,
    InvalidMessageError,
    Message,
)
from contextwright.llm._usage import read_usage
from contextwright.service._usage import USAGE_PREFIX
from contextwright.tokens._correction import RECENT, Correction, UsageSample, learn_line

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from _usage_traces import (  # noqa: E402
    AnthropicLike,
    OpenAIChat,
    Turn,
    chinese_trace,
    english_trace,
    run_trace,
)

SYSTEM = "You are a helpful office assistant. Answer briefly."


def tiktoken(encoding: str) -> Any:
    pytest.importorskip("tiktoken")
    from contextwright import TiktokenCounter

    try:
        return TiktokenCounter(encoding)
    except Exception as exc:  # no bundled file: the tiktoken extra is incomplete
        pytest.skip(f"{encoding}: {exc}")


# -- reading usage ------------------------------------------------------------------------


def test_openai_usage_objects_dicts_and_responses() -> None:
    openai = pytest.importorskip("openai")
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion
    from openai.types.responses import ResponseUsage

    chat = CompletionUsage(
        prompt_tokens=1200, completion_tokens=40, total_tokens=1240,
        prompt_tokens_details={"cached_tokens": 1024, "cache_write_tokens": 100},
    )  # fmt: skip
    got = read_usage(chat)
    assert (got.input_tokens, got.cached_tokens, got.cache_write_tokens) == (1200, 1024, 100)
    assert (got.output_tokens, got.shape) == (40, "openai")
    assert read_usage(chat.model_dump()) == got  # the JSON form
    completion = ChatCompletion.model_validate(
        {
            "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [], "usage": chat.model_dump(),
        }
    )  # fmt: skip
    assert read_usage(completion) == got  # the whole response
    responses = ResponseUsage(
        input_tokens=900, output_tokens=10,
        input_tokens_details={"cached_tokens": 512, "cache_write_tokens": 0},
        output_tokens_details={"reasoning_tokens": 0}, total_tokens=910,
    )  # fmt: skip
    got = read_usage(responses)
    assert (got.input_tokens, got.cached_tokens, got.shape) == (900, 512, "responses")
    assert read_usage(responses.model_dump()) == got
    assert openai  # the SDK objects, not look-alikes


def test_anthropic_usage_counts_cache_reads_and_writes() -> None:
    pytest.importorskip("anthropic")
    from anthropic.types import Usage

    usage = Usage(
        input_tokens=50, output_tokens=20, cache_creation_input_tokens=300,
        cache_read_input_tokens=2000,
    )  # fmt: skip
    got = read_usage(usage)
    # input_tokens is only what followed the last cache breakpoint
    assert (got.input_tokens, got.cached_tokens, got.cache_write_tokens, got.shape) == (
        2350, 2000, 300, "anthropic",
    )  # fmt: skip
    assert read_usage(usage.model_dump()) == got
    assert read_usage({"usage": usage.model_dump(), "id": "msg"}) == got
    # cache fields the SDK leaves None
    assert read_usage(Usage(input_tokens=70, output_tokens=1)).input_tokens == 70


def test_langchain_usage_metadata_and_bad_input() -> None:
    meta = {
        "input_tokens": 400, "output_tokens": 9, "total_tokens": 409,
        "input_token_details": {"cache_read": 100, "cache_creation": 20},
    }  # fmt: skip
    got = read_usage({"usage_metadata": meta})
    assert (got.input_tokens, got.cached_tokens, got.cache_write_tokens) == (400, 100, 20)
    for bad, where in [
        ({"completion_tokens": 3}, "usage"),
        ({"prompt_tokens": "many"}, "usage.prompt_tokens"),
        ({"input_tokens": -1}, "usage.input_tokens"),
        (17, "usage"),
        (None, "usage"),
    ]:
        with pytest.raises(InvalidMessageError) as info:
            read_usage(bad)
        assert info.value.where == where


# -- the correction -----------------------------------------------------------------------

samples_st = st.lists(
    st.builds(
        lambda e, r: UsageSample(e, max(1, round(e * r))),
        st.integers(20, 200_000),
        st.floats(0.55, 3.5),
    ),
    min_size=1,
    max_size=24,
)


@settings(max_examples=200, deadline=None)
@given(samples_st, st.booleans(), st.integers(1, 400_000))
def test_correction_covers_the_newest_samples_and_fits(
    samples: list[UsageSample], exact: bool, limit: int
) -> None:
    corr = Correction.of(samples, key="k", exact=exact)
    # never undercounting what the provider reported lately
    for s in samples[:RECENT]:
        assert corr.apply(s.estimated) >= s.reported
    # never below an exact counter's own count
    if exact:
        assert corr.apply(limit) >= limit
    # what the budget is fitted to corrects to within the budget
    fitted = corr.fit(limit)
    if fitted > 1:
        assert corr.apply(fitted) <= limit
    assert 0.5 <= corr.factor <= 4.0 * 1.01


@settings(max_examples=100, deadline=None)
@given(samples_st, st.integers(50, 100_000), st.integers(100, 400_000))
def test_builds_keep_under_a_reported_limit(
    samples: list[UsageSample], limit: int, budget: int
) -> None:
    from contextwright import Budget
    from contextwright.pipeline._usage import corrected_budget, provider_budget

    marked = [dataclasses.replace(samples[-1], kind="overflow", limit=limit), *samples[:-1]]
    back = [UsageSample.from_dict(s.to_dict()) for s in marked]
    assert back == marked  # what the store keeps reads back the same
    corr = Correction.of(marked, key="k", exact=False)
    assert corr.limit == limit
    assert provider_budget(Budget(budget), corr) == min(budget, limit)
    fitted = corrected_budget(Budget(budget), corr).input_tokens
    if fitted > 1:
        assert corr.apply(fitted) <= min(budget, limit)


def test_hf_counter_ignores_a_tokenizer_files_truncation_and_padding(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from contextwright import HFTokenizerCounter

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "[PAD]": 1}, "[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.enable_truncation(max_length=8)
    tok.enable_padding(length=8, pad_id=1, pad_token="[PAD]")
    path = tmp_path / "truncating.json"
    tok.save(str(path))
    counter = HFTokenizerCounter.from_file(path)
    assert counter.count("one two three four five six seven eight nine ten eleven") == 11
    assert counter.count("one") == 1
    given = HFTokenizerCounter(tok, "given")  # a tokenizer object: counted on a copy
    assert given.count("a b c d e f g h i j") == 10
    assert tok.truncation is not None  # the caller's is left as it was


def test_too_few_samples_never_lower_the_count() -> None:
    over = [UsageSample(1000, 800), UsageSample(500, 390)]  # the estimate over-counts
    assert Correction.of(over, key="k", exact=False).apply(1000) >= 1000
    slope, offset = learn_line([*over, UsageSample(2000, 1610)])
    assert slope < 1.0  # three of different sizes: the line goes below
    assert slope * 2000 + offset >= 1610


# -- the stateless engine -----------------------------------------------------------------


def test_engine_learns_and_fits_by_the_corrected_count() -> None:
    engine = ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=1200)
    history = []
    for ask, answer in english_trace(40):
        history += [Message.user(ask), Message.assistant(answer)]
    first = engine.build_sync("what is next?", history=history)
    assert first.report.usage is None  # nothing learnt: no correction shown
    for built in (first, 1100, first.report):
        corr = engine.record_usage(built, {"prompt_tokens": round(first.report.used * 1.25)})
    assert corr.samples == 3
    assert corr.factor > 1.2
    again = engine.build_sync("what is next?", history=history)
    usage = again.report.usage
    assert usage is not None
    assert usage["budget"] == 1200
    assert usage["raw"] == again.report.used <= again.report.budget < 1200
    assert usage["corrected"] <= 1200
    assert usage["corrected"] >= round(usage["raw"] * 1.25)
    # the receipt says it in both forms
    assert again.report.to_dict()["usage"]["factor"] == usage["factor"]
    assert "usage correction" in str(_table(again.report))
    # a correction given for one build wins over the learnt one
    given = engine.build_sync("what is next?", history=history, correction=1.0)
    assert given.report.usage is None
    assert given.report.budget == 1200


def _table(report: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(report.to_table())
    return console.export_text()


# -- convergence on real tokenizers -------------------------------------------------------


def _check_converges(rows: list[Turn]) -> None:
    late = [r.error for r in rows[5:]]
    within = sum(abs(e) <= 0.03 for e in late) / len(late)
    assert within >= 0.9, [round(e, 3) for e in late]
    assert max(abs(e) for e in late) <= 0.05
    assert statistics.mean(late) >= 0  # conservative: over rather than under
    # the provider's count stays within the budget (a hair over, at most, once)
    over = [r for r in rows[1:] if r.reported > r.budget]
    assert len(over) <= 1
    assert all(r.reported <= r.budget * 1.01 for r in over)
    # and the budget is used: by the fullest of the last ten turns (cache-aware clearing
    # summarises half a window at once, so a turn just after a summary uses less)
    assert max(r.reported / r.budget for r in rows[-10:]) >= 0.85


@pytest.mark.parametrize("language", ["english", "chinese"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_heuristic_converges_on_real_tokenizers(language: str, provider: str) -> None:
    counter = tiktoken("o200k_base" if provider == "openai" else "cl100k_base")
    target = (
        OpenAIChat("o200k_base", counter.count)
        if provider == "openai"
        else AnthropicLike("cl100k_base", counter.count)
    )
    trace = english_trace(36) if language == "english" else chinese_trace(36)
    engine = ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=1500)
    async with Conversations(engine, inline_jobs=True) as conversations:
        rows = await run_trace(conversations, "c", trace, target)
    _check_converges(rows)


async def test_an_exact_counter_is_corrected_close_to_one_and_never_below_its_count() -> None:
    o200k = tiktoken("o200k_base")
    engine = ContextEngine(system_prompt=SYSTEM, counter=o200k, budget=1500, overhead="openai")
    async with Conversations(engine, inline_jobs=True) as conversations:
        rows = await run_trace(conversations, "c", chinese_trace(30), OpenAIChat("o", o200k.count))
        corr = await conversations._usage.correction("default")
    assert all(r.corrected >= r.raw for r in rows)
    assert all(r.reported <= r.budget for r in rows)
    # the same tokenizer: only the per-message framing differs
    assert 0.97 <= corr.ratio(1400) <= 1.03
    assert all(abs(r.error) <= 0.03 for r in rows[3:])


# -- the stateful mode --------------------------------------------------------------------


def _engine() -> ContextEngine:
    return ContextEngine(system_prompt=SYSTEM, counter=HeuristicCounter(), budget=1500)


async def _fill(conversations: Conversations, conversation: str, turns: int = 30) -> None:
    for ask, answer in english_trace(turns, seed=5):
        await conversations.append(
            conversation, [Message.user(ask), Message.assistant(answer)], tenant="t", user="u"
        )


async def _shared_by_workers(store: str) -> None:
    one = Conversations(_engine(), store, inline_jobs=True)
    two = Conversations(_engine(), store, inline_jobs=True)
    try:
        await _fill(one, "a")
        await _fill(one, "b")
        built = await one.build("a", "and now?", tenant="t", user="u")
        assert built.report.usage is None
        for k in range(4):  # the provider counts 30 % more than the estimate
            await one.append(
                "a", [Message.assistant(f"ok {k}")], tenant="t", user="u",
                usage={"input_tokens": round(built.report.used * 1.3), "output_tokens": 5},
            )  # fmt: skip
            if k < 3:
                built = await one.build("a", f"and then {k}?", tenant="t", user="u")
        # another worker, another conversation of the tenant: fitted by what the first learnt
        other = await two.build("b", "hello", tenant="t", user="u")
        usage = other.report.usage
        assert usage is not None
        assert usage["source"] == "store"
        assert usage["samples"] == 4
        assert usage["corrected"] <= 1500
        assert other.report.budget < 1500 / 1.25
        # another tenant learnt nothing
        await _fill(two, "c")
        assert (await two.build("c", "hi", tenant="t2", user="u")).report.usage is None
        # the samples are receipts of the tenant, not a conversation's write
        rows = await two.backend.receipts.receipts(  # type: ignore[union-attr]
            USAGE_PREFIX + two._usage.key, tenant="t"
        )
        assert len(rows) == 4
        assert rows[0].receipt["reported"] == round(built.report.used * 1.3)
    finally:
        await one.aclose()
        await two.aclose()


async def test_the_correction_is_shared_by_workers_on_one_sqlite_file(tmp_path: Path) -> None:
    await _shared_by_workers(str(tmp_path / "cw.db"))


async def test_the_correction_is_shared_by_workers_on_postgres(pg_url: str) -> None:
    pytest.importorskip("psycopg")
    await _shared_by_workers(pg_url)


async def test_usage_is_paired_with_the_last_build_of_the_conversation() -> None:
    async with Conversations(_engine(), inline_jobs=True) as conversations:
        await _fill(conversations, "a", 3)
        with pytest.raises(InvalidMessageError, match="pass built="):
            await conversations.record_usage("a", {"prompt_tokens": 90}, tenant="t", user="u")
        built = await conversations.build("a", "next?", tenant="t", user="u")
        with pytest.raises(InvalidMessageError) as info:  # another user's conversation
            await conversations.record_usage("a", {"prompt_tokens": 90}, tenant="t", user="v")
        assert info.value.where == "user"
        # ``built=`` pairs explicitly
        corr = await conversations.record_usage(
            "a", {"prompt_tokens": built.report.used}, tenant="t", user="u", built=built
        )
        assert corr.samples == 1
        # a factor given for one build (the stored correction aside)
        given = await conversations.build("a", "next?", tenant="t", user="u", correction=1.5)
        assert given.report.usage is not None
        assert given.report.usage["source"] == "given"
        assert given.report.budget == 1000  # 1,500 / 1.5
        assert corr.apply(built.report.used) >= built.report.used


def test_without_a_receipts_role_the_engine_keeps_the_samples() -> None:
    from contextwright.testing import MemoryBackend

    backend = dataclasses.replace(MemoryBackend().backend(), receipts=None)
    engine = _engine()
    with Conversations(engine, backend, inline_jobs=True) as conversations:
        conversations.append_sync("a", [Message.user("hello"), Message.assistant("hi")])
        built = conversations.build_sync("a", "how are you?")
        conversations.append_sync(
            "a", [Message.assistant("fine")], usage={"prompt_tokens": built.report.used * 2}
        )
        assert len(engine.usage.samples(conversations._usage.key)) == 1
        again = conversations.build_sync("a", "and you?")
        assert again.report.usage is not None
        assert again.report.usage["source"] == "in process"
