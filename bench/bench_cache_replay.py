"""Prompt-cache replay: a 300-call tool-heavy agent trace through `Conversations`.

The trace (`_cache_trace.agent_trace`, seeded) is a coding agent's session: tasks,
one or two tool calls per step (file reads, test runs, searches, listings, logs;
a quarter in Chinese; some results large enough to be compressed and offloaded),
answers. Each model call is one build, rendered for Anthropic and compared with the
request before it, block by block (`_cache_trace.replay`). Each budget runs twice:
the earlier policy (``clear_at_least_tokens=0``: the window slides and a routine
summary follows every 10 messages or 3,000 tokens outside it) and the default
cache-aware one (a summary only when the history outgrows the window, clearing at
least half of it).

Columns: compactions (builds whose summary changed), non-compacting builds whose
request kept the previous cacheable prefix byte for byte, cache-write tokens, the
minimum (new messages, plus one full write per compaction), their ratio, cache-read
tokens, the input cost in base-price tokens at Anthropic's multipliers (read 0.1,
write 1.25, uncached 1) and the mean request size. Goals (issue 23): writes within
1.25x of the minimum and >= 95 % of non-compacting builds keeping the prefix, for
the default policy. Tokens: o200k_base (tiktoken) if installed, else the heuristic.

    .venv/bin/python bench/bench_cache_replay.py             # about a minute
    .venv/bin/python bench/bench_cache_replay.py --calls 120
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from _cache_trace import ReplayStats, replay
from contextwright import (
    ContextEngine,
    Conversations,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
)
from contextwright.history import CompactionConfig

SYSTEM = (
    "You are a careful coding agent. Read the code before changing it, run the tests "
    "after every change, and explain what you did in a few sentences. "
) * 6
GOAL_RATIO = 1.25
GOAL_SHARE = 0.95


def counter() -> TokenCounter:
    try:
        return TiktokenCounter("o200k_base")
    except Exception:  # no tiktoken or no offline encoding: the heuristic
        return HeuristicCounter()


def run(
    tokens: TokenCounter, budget: int, preset: str, clear: int | None, calls: int
) -> tuple[ReplayStats, float]:
    engine = ContextEngine(system_prompt=SYSTEM, counter=tokens, budget=budget)
    config = CompactionConfig.preset(preset).with_(clear_at_least_tokens=clear)
    convs = Conversations(engine, None, compaction=config, inline_jobs=True)
    t0 = time.perf_counter()
    try:
        return replay(convs, tokens, calls), time.perf_counter() - t0
    finally:
        convs.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--budgets", default="16000:production,8000:development")
    args = ap.parse_args()
    tokens = counter()
    table = Table(title=f"prompt-cache replay: {args.calls} model calls, counter {tokens.name}")
    for col in (
        "budget", "policy", "compactions", "prefix kept", "cache writes", "minimum", "ratio",
        "cache reads", "input cost", "mean request", "goals",
    ):  # fmt: skip
        table.add_column(col, justify="left" if col in ("policy", "goals") else "right")
    missed = False
    for spec in args.budgets.split(","):
        budget_s, preset = spec.split(":")
        budget = int(budget_s)
        for label, clear in (("earlier (clear_at_least 0)", 0), ("cache-aware (default)", None)):
            s, secs = run(tokens, budget, preset, clear, args.calls)
            goals = s.ratio <= GOAL_RATIO and s.share >= GOAL_SHARE
            verdict = "" if clear == 0 else ("PASS" if goals else "MISS")
            missed |= verdict == "MISS"
            table.add_row(
                f"{budget:,} {preset}", label, str(s.compacting),
                f"{s.kept_prefix}/{s.non_compacting} ({s.share:.1%})", f"{s.written:,}",
                f"{s.minimum:,}", f"{s.ratio:.3f}", f"{s.cached:,}", f"{s.cost:,.0f}",
                f"{s.sent / max(1, s.builds):,.0f}", verdict,
            )  # fmt: skip
            print(f"  ran {label} at {budget}: {secs:.1f}s", flush=True)
    Console(width=200).print(table)
    print(f"goals: writes <= {GOAL_RATIO}x the minimum, >= {GOAL_SHARE:.0%} prefix kept")
    raise SystemExit(1 if missed else 0)


if __name__ == "__main__":
    main()
