"""Where the evidence turns that `memory_qa_engine` misses on LoCoMo sit in its ranking.

A diagnostic, not a benchmark: before building a ranking method, see which kind
of miss it could reach. For each budget it builds every question as
``contextwright eval locomo`` does (same engine, same scoring) and, for each
evidence turn *not* in the context, reads the ranking recall packed from
(`RecallSource` is watched, nothing in it changes) and reports per category
(all, and each of LoCoMo's five):

* **rank** of the missed turn (10th / 25th / 50th / 75th / 90th percentile) and
  the tokens of the turns ranked before it (``cum``): a miss just past the
  budget needs a nudge, one at rank 300 a new signal;
* the evidence it has: a full-text **hit** (holds a question word), a hit of the
  **feedback** search, only **neighbour** evidence, or **none**;
* whether it lies in a **session** of the eight best-ranked turns, and whether it
  shares a **rare word** (held by at most eight turns, not a speaker name) or a
  **capitalised** word with them — what session spreading or entity links
  could use;
* for questions with several evidence turns, whether it shares a rare word with
  an evidence turn of the same question that *was* recalled.

A turn counts as recalled here when the recall block holds it (the eval looks
for its text in the rendered context: a few tenths of a point apart, when the
engine trims the block). The same flags for the recalled turns are printed next to them: a signal helps
only if it separates the two. The evidence is read for this report only; the
builder sees the question text, as in the eval.

Run: ``python bench/locomo_misses.py [--budget 1000,2000] [--knob link_weight=0.1 …]``
(about 12 s per budget on 2 cores). On the LoCoMo development split, defaults, at
2,000 tokens: 201 of 1,349 evidence turns missed; of those 16% hold a question
word (of the recalled: 85%), 37% a feedback word, 27% have only neighbour
evidence and 43% none at all; the median missed turn is ranked 152nd, 5,700
tokens in; 24% lie in a session of the eight best turns (recalled: 90%); of the
missed turns whose question had another evidence turn recalled, 25% share a
rare word with one (recalled: 48%).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from contextwright.history import _recall
from contextwright.history._query import STOP_WORDS
from contextwright.history._turns import FEEDBACK_WORD, TurnIndex
from contextwright.interfaces.eval._locomo import CATEGORIES, evaluate_locomo
from contextwright.interfaces.eval._locomo_cv import parse_grid
from contextwright.interfaces.eval._locomo_data import load_locomo
from contextwright.tokens._exact import TiktokenCounter

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
CAPITAL = re.compile(r"\b[A-Z][a-z]{2,}\b")
TOP, RARE = 8, 8  # best-ranked turns compared with; a rare word's most turns
FLAGS = ("hit", "feedback", "neighbour", "none", "session", "rare", "capital", "rare_found")


def _watch() -> dict[str, Any]:
    """What the last build's recall ranked and packed (the source is wrapped, not changed)."""
    seen: dict[str, Any] = {}
    inner = _recall.RecallSource._ranked_block

    def ranked_block(self: Any, index: TurnIndex, turn: Any, analysis: Any, scores: Any,
                     n: int, *rest: Any) -> Any:  # fmt: skip
        block = inner(self, index, turn, analysis, scores, n, *rest)
        feedback, ranked = rest[1], rest[2]
        seen.update(index=index, scores=scores, feedback=feedback or {}, ranked=ranked, n=n,
                    block=block, ranker=self.ranker)  # fmt: skip
        return block

    _recall.RecallSource._ranked_block = ranked_block  # type: ignore[method-assign,assignment]
    return seen


def _words(index: TurnIndex, p: int) -> tuple[set[str], set[str]]:
    """A turn's rare words and capitalised words (speaker names and stop words left out)."""
    names = index.speakers
    text = index.turn(p).text
    rare = {
        w for w in set(FEEDBACK_WORD.findall(text.lower()))
        if w not in STOP_WORDS and w not in names and index.df[w] <= RARE
    }  # fmt: skip
    caps = {w.lower() for w in CAPITAL.findall(text)} - set(names) - STOP_WORDS
    return rare, caps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--budget", default="1000,2000")
    ap.add_argument("--knob", action="append", default=[], metavar="KNOB=V")
    args = ap.parse_args()
    weights = list(parse_grid(args.knob).values())[-1]
    paths = sorted(args.data.glob("*.json")) if args.data.is_dir() else [args.data]
    convs = [c for p in paths for c in load_locomo(p)]
    seen = _watch()
    counter = TiktokenCounter("cl100k_base")
    rows: list[dict[str, Any]] = []
    where = {}
    for conv in convs:
        position = {m.metadata["dia_id"]: i for i, m in enumerate(conv.messages)}
        for item in conv.items:
            where[id(item.question)] = (item, position)
    budget: int = 0

    def observe(question: Any, request: Any) -> None:
        item, position = where[id(question)]
        index, ranked = seen["index"], seen["ranked"]
        block = seen["block"]
        taken = {t.seq for t in block.turns} if block is not None else set()
        rank_of = {p: r for r, (p, _) in enumerate(ranked)}
        before, total = {}, 0
        for i, (p, _) in enumerate(ranked):
            before[i] = total
            total += counter.count(f"{index.turn(p).speaker}: {index.turn(p).text}\n")
        hit = {index.position(s) for s in seen["scores"]}
        feedback = {index.position(s) for s in seen["feedback"]}
        lexical = seen["ranker"]._lexical(index, seen["scores"], seen["n"])
        top = [p for p, _ in ranked[:TOP]]
        top_rare = set().union(*(_words(index, p)[0] for p in top))
        top_caps = set().union(*(_words(index, p)[1] for p in top))
        top_sessions = {index.sessions[p] for p in top}
        evidence = [position[e] for e in item.evidence]
        found = [p for p in evidence if index.seqs[p] in taken]
        for p in evidence:
            rare, caps = _words(index, p)
            others = [q for q in found if q != p]
            r = rank_of.get(p)
            rows.append({
                "budget": budget, "category": item.category, "got": index.seqs[p] in taken,
                "rank": r, "before": total if r is None else before[r], "hit": p in hit,
                "feedback": p in feedback, "neighbour": p in lexical and p not in hit,
                "none": p not in lexical and p not in feedback,
                "session": index.sessions[p] in top_sessions, "rare": bool(rare & top_rare),
                "capital": bool(caps & top_caps),
                "rare_found": bool(others) and bool(rare & set().union(
                    *(_words(index, q)[0] for q in others))),
                "multi": bool(others),
            })  # fmt: skip

    budgets = [int(b) for b in args.budget.split(",")]
    for budget in budgets:
        evaluate_locomo(paths, [budget], observe=observe, weights=weights, conversations=convs)
    _report(rows, budgets)


def _share(rows: list[dict[str, Any]], flag: str) -> str:
    if flag == "rare_found":
        rows = [r for r in rows if r["multi"]]
    return f"{sum(r[flag] for r in rows) / len(rows):.2f}" if rows else "-"


def _pct(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0


def _report(rows: list[dict[str, Any]], budgets: list[int]) -> None:
    console = Console()
    for budget in budgets:
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["budget"] == budget:
                by["all"].append(r)
                by[f"{r['category']} {CATEGORIES.get(r['category'], '?')}"].append(r)
        table = Table(title=f"missed evidence at {budget:,} tokens (missed / recalled)")
        for col in ("category", "evidence", "recall", "missed rank p10-p90", "cum tokens p50",
                    *FLAGS):  # fmt: skip
            table.add_column(col, justify="right")
        for name in ["all", *sorted(k for k in by if k != "all")]:
            group = by[name]
            miss = [r for r in group if not r["got"]]
            got = [r for r in group if r["got"]]
            ranks = [r["rank"] for r in miss if r["rank"] is not None]
            table.add_row(
                name, str(len(group)), f"{len(got) / len(group):.3f}",
                " ".join(str(_pct(ranks, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)),
                str(_pct([r["before"] for r in miss], 0.5)),
                *(f"{_share(miss, f)} / {_share(got, f)}" for f in FLAGS),
            )  # fmt: skip
        console.print(table)


if __name__ == "__main__":
    main()
