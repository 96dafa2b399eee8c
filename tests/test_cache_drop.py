"""Dropping every in-process cache, at any moment, never changes a build.

Two `Conversations` run the same random sequence of appends, bulk appends,
imports, compactions and builds over several conversations, each on its own
store (an SQLite file, or in memory: every test runs on both): one keeps its caches (tails, recall's turn indexes, the engine's
window walks) for the whole sequence; the other drops them right before every
build, and at random moments besides — between operations and in the middle of
one (a build, an append, an import, a compaction, while it waits for the
store). Every build's rendered request and the receipt's totals must match byte
for byte, and so must every compaction's result and, at the end, what is stored.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from contextwright import (
    ConfigError,
    ContextEngine,
    Conversations,
    HeuristicCounter,
    Message,
    ToolCallPart,
)
from contextwright.history import CompactionConfig

from .conftest import OpenBackend, sync

H = HeuristicCounter()
T0 = 1_700_000_000.0
TOPICS = ["budget", "harbour", "lantern", "orchid", "granite", "上海", "方案", "violin"]


def exchange(step: int, n: int) -> list[Message]:
    """``n`` user/assistant exchanges (every third with a large tool result), timestamped
    from ``step`` so that both sides store the very same messages."""
    out: list[Message] = []
    at = T0 + step * 600.0
    for i in range(n):
        topic = TOPICS[(step + i) % len(TOPICS)]
        ids = {"id": f"m{step}.{i}", "created_at": at}
        out.append(Message.user(f"Step {step}.{i}: what about the {topic} plan?", **ids))
        if (step + i) % 3 == 0:
            call = ToolCallPart(f"call_{step}_{i}", "lookup", json.dumps({"q": topic}))
            out.append(
                Message.assistant(
                    "Checking.", tool_calls=[call], id=f"c{step}.{i}", created_at=at + 1
                )
            )
            rows = [{"row": r, "topic": topic, "note": "detail " * 6} for r in range(90)]
            out.append(
                Message.tool(
                    call.id,
                    json.dumps(rows),
                    tool_name="lookup",
                    id=f"t{step}.{i}",
                    created_at=at + 2,
                )
            )
        out.append(
            Message.assistant(
                f"The {topic} plan costs {step * 10 + i} dollars.",
                id=f"a{step}.{i}",
                created_at=at + 3,
            )
        )
        at += 5.0
    return out


def make(backend: OpenBackend, path: Path, **kw: Any) -> Conversations:
    engine = ContextEngine(system_prompt="You are helpful.", counter=H, budget=2500)
    return Conversations(
        engine,
        backend(path),
        compaction=CompactionConfig.preset("development"),
        clock=lambda: T0,
        **kw,
    )


def rendered(built: Any) -> str:
    r = built.report
    totals = {
        "budget": r.budget, "used": r.used, "history_messages": r.history_messages,
        "history_units": r.history_units, "history_total": r.history_total,
        "history_shortened": r.history_shortened, "last_seq": r.last_seq,
        "compaction": r.compaction,
        "blocks": [(b.name, b.status, b.tokens) for b in r.blocks],
    }  # fmt: skip
    return json.dumps([built.render("openai"), totals], sort_keys=True, ensure_ascii=False)


def compacted(result: Any) -> str:
    return json.dumps(
        [result.applied, result.summary_version, result.upto_seq, result.tokens_before_compaction,
         result.tokens_after_compaction, result.summary, list(result.strategies)],
        ensure_ascii=False,
    )  # fmt: skip


async def run(convs: Conversations, op: str, cid: str, step: int, n: int) -> str:
    kw = {"tenant": "t", "user": "u"}
    if op == "append":
        stored = await convs.append(cid, exchange(step, n), **kw)
        return json.dumps([m.seq for m in stored])
    if op == "import":
        stored = await convs.import_messages(cid, exchange(step, 6 * n), batch_size=7, **kw)
        return json.dumps([m.seq for m in stored])
    if op == "compact":
        await convs.append(cid, exchange(step, n), **kw)
        # a background summary the append scheduled either lands first or gives way:
        # timing, not caching, would decide which; let it land on both
        await convs.wait_idle()
        return compacted(await convs.compact(cid, **kw))
    # A build does not wait for a background summary an append started (by design),
    # so what it shows depends on that summary's timing: let it land first, on both.
    await convs.wait_idle()
    question = Message.user(
        f"step {step}: and the {TOPICS[n % len(TOPICS)]} plan?",
        id=f"q{step}",
        created_at=T0 + step * 600.0,
    )
    built = await convs.build(cid, question, **kw)
    return rendered(built)


async def with_drop(convs: Conversations, op: str, cid: str, step: int, n: int, at: int) -> str:
    """`run`, with every cache dropped after ``at`` turns of the event loop (if it is still going)."""
    task = asyncio.ensure_future(run(convs, op, cid, step, n))
    for _ in range(at):
        if task.done():
            break
        await asyncio.sleep(0)  # let the operation run up to its next suspension
    convs.drop_caches()
    return await task


OPS = st.lists(
    st.tuples(
        st.integers(0, 2),  # conversation
        st.sampled_from(["append", "append", "build", "build", "build", "import", "compact"]),
        st.integers(1, 4),  # size
        st.one_of(st.none(), st.integers(0, 12)),  # drop mid-operation, after so many loop turns
        st.booleans(),  # drop between operations too
    ),
    min_size=1,
    max_size=16,
)


@given(ops=OPS)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_dropping_caches_never_changes_a_build(tmp_path_factory, backend, ops):
    base = tmp_path_factory.mktemp("drop")
    kept, dropped = make(backend, base / "kept.db"), make(backend, base / "dropped.db")

    async def scenario() -> None:
        builds = 0
        for step, (i, op, n, mid, between) in enumerate(ops):
            cid = f"c{i}"
            want = await run(kept, op, cid, step, n)
            if op == "build":
                dropped.drop_caches()  # a cold start for every build
                builds += 1
            got = (
                await run(dropped, op, cid, step, n)
                if mid is None
                else await with_drop(dropped, op, cid, step, n, mid)
            )
            assert got == want, f"step {step}: {op} on {cid}"
            if between:
                dropped.drop_caches()
            await kept.wait_idle()
            await dropped.wait_idle()
        for i in range(3):  # what is stored is the same too
            a = [m.to_dict() for m in await kept.backend.conversations.read(f"c{i}", tenant="t")]
            b = [m.to_dict() for m in await dropped.backend.conversations.read(f"c{i}", tenant="t")]
            assert a == b
            sa = [
                (s.version, s.upto_seq, s.content)
                for s in await kept.backend.summaries.summaries(f"c{i}", tenant="t")
            ]
            sb = [
                (s.version, s.upto_seq, s.content)
                for s in await dropped.backend.summaries.summaries(f"c{i}", tenant="t")
            ]
            assert sa == sb
        assert kept.cache_sizes()["tails"] >= 1 or builds == 0

    try:
        asyncio.run(scenario())
    finally:
        kept.close()
        dropped.close()


def test_drop_caches_empties_them_and_the_next_build_reads_afresh(tmp_path, backend):
    convs = make(backend, tmp_path / "c.db")
    try:
        convs.append_sync("c", exchange(0, 30), tenant="t", user="u")
        first = convs.build_sync("c", "the budget plan?", tenant="t", user="u", store_message=False)
        convs.wait_idle_sync()
        sizes = convs.cache_sizes()
        assert (sizes["tails"], sizes["window_memos"]) == (1, 1)
        convs.drop_caches()
        sizes = convs.cache_sizes()
        assert (sizes["tails"], sizes["recall_indexes"], sizes["window_memos"]) == (0, 0, 0)
        assert sizes["tail_bytes"] == 0
        again = convs.build_sync("c", "the budget plan?", tenant="t", user="u", store_message=False)
        assert rendered(again) == rendered(first)
        last = sync(convs.backend.conversations).get_conversation("c", tenant="t").last_seq
        assert again.report.last_seq == first.report.last_seq == last
        assert json.loads(again.report.to_json())["last_seq"] == last
        console = Console(record=True, width=200)
        console.print(again.report.to_table())
        assert f"read up to seq {last}" in console.export_text()
    finally:
        convs.close()


def test_tails_are_bounded_by_bytes_and_an_evicted_one_builds_the_same(tmp_path, backend):
    """With room for about one tail, the cache holds the one in use (and what a summary
    of this process holds), reports their bytes, and a conversation read afresh after
    eviction builds what a cache with room for all builds."""
    small = make(backend, tmp_path / "small.db", cache_bytes=40_000)
    roomy = make(backend, tmp_path / "roomy.db")
    try:
        for convs in (small, roomy):
            for i in range(4):
                convs.append_sync(f"c{i}", exchange(i, 6), tenant="t", user="u")
                convs.build_sync(
                    f"c{i}", "the budget plan?", tenant="t", user="u", store_message=False
                )
            convs.wait_idle_sync()
        sizes = small.cache_sizes()
        assert 0 < sizes["tail_bytes"] <= 40_000
        assert sizes["tails"] < roomy.cache_sizes()["tails"] == 4
        assert roomy.cache_sizes()["tail_bytes"] > 40_000
        for i in range(4):
            q = Message.user("the orchid plan?", id=f"q{i}", created_at=T0)
            a = small.build_sync(f"c{i}", q, tenant="t", user="u", store_message=False)
            b = roomy.build_sync(f"c{i}", q, tenant="t", user="u", store_message=False)
            assert rendered(a) == rendered(b)
    finally:
        small.close()
        roomy.close()
    for bad in (0, -1, 1.5, True, "64"):
        with pytest.raises(ConfigError, match="cache_bytes"):
            Conversations(ContextEngine(counter=H), cache_bytes=bad)
