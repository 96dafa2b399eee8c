"""Compaction planning: thresholds, presets, the summary boundary, the strategy order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import ConfigError, Message, group_units
from contextwright.history import (
    PRESETS,
    CompactionConfig,
    check,
    plan_compaction,
    summary_boundary,
)
from contextwright.model._units import iter_units_backwards
from contextwright.stores import SQLiteStore

from .conftest import conversations


def test_presets_are_seed_004s():
    dev, prod, large = PRESETS["development"], PRESETS["production"], PRESETS["large_context"]
    assert (
        dev.soft_threshold_tokens,
        dev.hard_threshold_tokens,
        dev.keep_recent_messages,
        dev.summary_max_tokens,
    ) == (5000, 8000, 4, 400)
    assert (
        prod.soft_threshold_tokens,
        prod.hard_threshold_tokens,
        prod.reserve_tokens,
        prod.keep_recent_messages,
    ) == (15000, 20000, 4000, 6)
    assert large.use_llm
    assert large.llm_fallback_to_rules
    assert CompactionConfig() == prod
    with pytest.raises(ConfigError):
        CompactionConfig.preset("huge")


@pytest.mark.parametrize(
    ("tokens", "urgency"),
    [(100, "none"), (15_000, "soft"), (19_999, "soft"), (20_000, "hard"), (95_000, "emergency")],
)
def test_check_urgency(tokens, urgency):
    c = check(
        CompactionConfig(),
        live_tokens=tokens,
        unsummarized_messages=0,
        unsummarized_tokens=0,
        budget=100_000,
    )
    assert c.urgency == urgency
    assert c.should_compact == (urgency != "none")


def test_summary_trigger_by_count_or_tokens():
    cfg = CompactionConfig()
    assert check(cfg, live_tokens=0, unsummarized_messages=10, unsummarized_tokens=0).summary_due
    assert check(cfg, live_tokens=0, unsummarized_messages=1, unsummarized_tokens=3000).summary_due
    assert not check(
        cfg, live_tokens=0, unsummarized_messages=9, unsummarized_tokens=2999
    ).summary_due


@pytest.mark.parametrize(
    "bad",
    [
        {"soft_threshold_tokens": 0},
        {"hard_threshold_tokens": 10, "soft_threshold_tokens": 20},
        {"summary_max_tokens": 5},
        {"keep_recent_messages": -1},
    ],
)
def test_bad_configs(bad):
    with pytest.raises(ConfigError):
        CompactionConfig(**bad)


@given(conversations(max_units=25), st.integers(0, 12))
def test_boundary_never_splits_a_unit(msgs, keep):
    cut = summary_boundary(msgs, keep)
    assert 0 <= cut <= max(0, len(msgs) - keep)
    if cut:
        assert all(u.ok for u in group_units(msgs[:cut]))
        assert all(u.ok for u in group_units(msgs[cut:]))


def _boundary_by_units(msgs: list[Message], keep: int) -> int:
    """The boundary as it was first written: walk the units back from the newest."""
    if len(msgs) <= keep:
        return 0
    cut = len(msgs) - keep
    for unit in iter_units_backwards(msgs):
        if unit.start <= cut < unit.end and unit.start != cut:
            return unit.start
        if unit.end <= cut:
            break
    return cut


@given(conversations(max_units=25, broken=True), st.integers(0, 12))
def test_boundary_reads_only_the_tool_run_at_the_cut(msgs, keep):
    """Same cut as walking every unit, orphans and unanswered calls included, and from outlines."""
    assert summary_boundary(msgs, keep) == _boundary_by_units(msgs, keep)
    if msgs:
        with SQLiteStore(":memory:") as store:
            store.append("c", msgs, tenant="t", user="u")
            outlines = store.read_outline("c", tenant="t")
        assert summary_boundary(outlines, keep) == _boundary_by_units(msgs, keep)


def test_plan_orders_strategies_and_stops_when_under():
    cfg = CompactionConfig(
        soft_threshold_tokens=1000,
        hard_threshold_tokens=2000,
        keep_recent_messages=2,
        summary_max_tokens=100,
    )
    from contextwright import Message

    msgs = [Message.user("q"), Message.assistant("a")] * 10
    plan = plan_compaction(cfg, msgs, [100] * 20, summary_tokens=0, compressed_tool_results=2)
    assert plan.strategies == ("compress_tool_results", "summarize_early_turns")
    assert plan.summarize_count == 18
    assert plan.tokens_after_estimate == 300
    small = plan_compaction(cfg, msgs[:4], [10] * 4, summary_tokens=0)
    assert small.strategies == ()
    emergency = plan_compaction(cfg, msgs, [300] * 20, summary_tokens=0, urgency="emergency")
    assert emergency.strategies[-2:] == ("drop_p2_blocks", "compress_p1_blocks")
