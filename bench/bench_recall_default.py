"""What the stateful default's recall keeps on LoCoMo, per search setting, and what it costs.

`Conversations` recalls old turns by default with a sparing `RecallSource`: at most
six turns, ``search_limit`` full-text hits, only the rarest query terms up to
``match_budget`` postings in all, no feedback search. Those two knobs bound the
per-turn cost (BM25 scores every matching turn of the in-process index; the ranker
spreads every hit to its neighbours); this script shows what lowering or raising
them does to quality (``None``: every term is searched).

For each LoCoMo conversation in ``../shared/data/locomo`` (CC BY-NC 4.0, evaluation
only, read in place): every turn is appended through `Conversations` (cl100k,
budget ``--budget``), background summaries are waited for, and each question with
evidence is built as a new user message (``store_message=False``). The builder sees
the question text only. Scored per question:

* **context recall**: evidence turns whose text is in the rendered context (window,
  summary, recalled block), as in ``contextwright eval locomo``;
* **old-evidence recall**: the same for evidence turns older than the in-process
  tail, which only recall (or, rarely verbatim, the summary) can bring back;
* **fetch ms**: the recall source's own time (``BlockReport.fetch_ms``), median.

Run: ``python bench/bench_recall_default.py [--budget 8000] [--json out.json]``
(about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from contextwright import ContextEngine, Conversations, TiktokenCounter
from contextwright.history import RecallSource
from contextwright.interfaces.eval._locomo import _content, _norm
from contextwright.interfaces.eval._locomo_data import load_locomo
from contextwright.model._blocks import unescape_content
from contextwright.stores import SQLiteStore

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
TENANT, USER = "bench", "bench"
SETTINGS = ((32, 200), (32, 100), (32, 300), (32, None), (16, 200))  # (search_limit, match_budget)


def run_setting(
    files: Sequence[Path], budget: int, search_limit: int, match_budget: int
) -> dict[str, Any]:
    hits = total = old_hits = old_total = 0
    fetch_ms: list[float] = []
    for path in files:
        for conv in load_locomo(path):
            engine = ContextEngine(
                system_prompt="You answer questions about this conversation.",
                counter=TiktokenCounter("cl100k_base"),
                budget=budget,
            )
            convs = Conversations(engine, SQLiteStore(":memory:"))
            recall = next(s for s in convs._extra if isinstance(s, RecallSource))
            recall.search_limit, recall.match_budget = search_limit, match_budget
            stored = convs.append_sync(conv.name, conv.messages, tenant=TENANT, user=USER)
            convs.wait_idle_sync(120)
            seq_of = {m.metadata["dia_id"]: m.seq for m in stored}
            tail_start = convs._keeper.cache[(TENANT, conv.name)].messages[0].seq or 0
            for item in conv.items:
                built = convs.build_sync(
                    conv.name, item.question.text, tenant=TENANT, user=USER, store_message=False
                )
                request = built.render("openai")
                text = _norm(unescape_content("\n".join(_content(m) for m in request)))
                for b in built.report.blocks:
                    if b.name == recall.name and b.fetch_ms is not None:
                        fetch_ms.append(b.fetch_ms)
                for e in item.evidence:
                    found = _norm(conv.texts[e]) in text
                    total += 1
                    hits += found
                    if seq_of[e] < tail_start:  # only recall (or, rarely, the summary) shows it
                        old_total += 1
                        old_hits += found
            convs.close()
    return {
        "search_limit": search_limit,
        "match_budget": match_budget,
        "context_recall": hits / max(1, total),
        "old_evidence_recall": old_hits / max(1, old_total),
        "old_evidence": old_total,
        "evidence": total,
        "fetch_ms_p50": statistics.median(fetch_ms) if fetch_ms else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=8000)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    files = sorted(args.data.glob("*.json"))
    if not files:
        raise SystemExit(f"no LoCoMo files in {args.data}")
    console = Console()
    started = time.perf_counter()
    rows = [run_setting(files, args.budget, s, m) for s, m in SETTINGS]
    table = Table(
        title=f"Stateful default recall on LoCoMo ({len(files)} files, budget {args.budget:,})"
    )
    for col in (
        "search_limit",
        "match_budget",
        "context recall",
        "old-evidence recall",
        "fetch p50 ms",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["search_limit"]), str(r["match_budget"]), f"{r['context_recall']:.3f}",
            f"{r['old_evidence_recall']:.3f} ({r['old_evidence']})", f"{r['fetch_ms_p50']:.2f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
