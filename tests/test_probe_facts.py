"""Facts survive compaction: the probe of `bench/bench_probe_facts.py`, small.

One English, one Chinese and one tool-heavy conversation (and one LoCoMo dev
conversation when ``../shared/data/locomo`` is there), compacted 1 and 5 times by
force: at least 95 % of the facts seeded early are in the built context outside the
window (summary, recall or memory), and every fact's exact turn is recoverable —
stored verbatim, and the fact hidden in a large tool result read back whole
(`_facts_probe.probe` raises otherwise).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from contextwright import ContextEngine, Conversations, HeuristicCounter
from contextwright.history import CompactionConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _facts_probe import LOCOMO, corpus, probe

H = HeuristicCounter()
EXPLICIT_ONLY = CompactionConfig(
    soft_threshold_tokens=10**9, hard_threshold_tokens=10**9, summary_message_threshold=10**9,
    summary_token_threshold=10**9, clear_at_least_tokens=0,
)  # fmt: skip


def _convs() -> Conversations:
    engine = ContextEngine(system_prompt="You are a helpful assistant.", counter=H, budget=4000)
    return Conversations(engine, None, compaction=EXPLICIT_ONLY, inline_jobs=True)


@pytest.mark.parametrize("rounds", [1, 5])
def test_facts_seeded_early_are_in_the_context_after_compactions(rounds):
    scripts = corpus(rounds=5, per_kind=1, filler=30, locomo=1)
    kinds = {s.kind for s in scripts}
    assert {"en", "zh", "tools"} <= kinds
    assert ("locomo" in kinds) == LOCOMO.is_dir()
    offloaded = [f for s in scripts for f in s.facts if f.message.role == "tool"]
    assert offloaded  # one fact lives in a large tool result: read back whole below
    facts = present = 0
    for script in scripts:
        convs = _convs()
        try:
            result = probe(convs, script, rounds)
        finally:
            convs.close()
        assert result.summaries == rounds  # compacted exactly that often
        facts += len(result.found)
        present += result.present
        # the facts left the window: what finds them is the summary, recall or memory
        assert all(where != "window" for _, where in result.found), script.name
    assert facts >= 30
    assert present >= 0.95 * facts, (present, facts)


def test_without_recall_the_rule_summary_alone_keeps_few_early_facts():
    """What the probe measures is real: with recall off the facts are mostly gone (the
    rule summary keeps the newest topics and conclusions), so recall finds them above."""
    script = corpus(rounds=3, per_kind=1, filler=30, locomo=0)[0]
    engine = ContextEngine(system_prompt="You are a helpful assistant.", counter=H, budget=4000)
    convs = Conversations(engine, None, compaction=EXPLICIT_ONLY, inline_jobs=True, recall=False)
    try:
        result = probe(convs, script, 3)
    finally:
        convs.close()
    assert result.present < len(result.found) // 2
