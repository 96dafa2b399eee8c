"""Scale on PostgreSQL: build and memory search at full size vs at 1/100 of it (issue #20).

Two databases are made by ``make_scale_pg.py`` (COPY): the *full* one with
``--conversations`` (10,000) x ``--messages`` (100) messages and ``--memories``
(200,000) memories in scopes of 100, and the *small* one with 1/100 of the
conversations and of the memories. The conversations and scopes that are
measured are the same in both (the generator is prefix-stable: conversation
``c{k}`` and user ``u{k}`` hold the same rows whatever the size), so only the
rest of the database differs. ``--quick`` uses 1/10 of the sizes.

Every round measures, on both databases in alternating order:

(a) **history build**, history-only engine (cl100k, budget 8,000, no sources, no
    recall): the *cold* first build of a conversation this process never built
    (its tail, counts and summary read from the database) and *warm* turns after
    it (build of a new user message, which stores it, then the reply appended);
(b) **default build**, the same turns with recall on (the conversation's own
    full-text search);
(c) **memory search**: ``search_sync(limit=5)`` of a scope of 100 memories
    (`PostgresMemoryStore`, exact vector search below 8,192 rows), the query a
    question from ``bench_memory.queries`` plus a word only that scope holds,
    embedded by the generator's `ScaleEmbedder`.

Each round gives a p50 and a p95 per side; the table prints the per-round ratios
full / small (median, IQR; goal <= 1.5x: the cost follows the conversation and
the scope, not the database). Memory search p95 at full size is printed beside
the published retrieval latencies of Zep (p95 155 ms, LoCoMo) and mem0 (about
1 s p50), which are not run here.

PostgreSQL: ``--dsn`` (a server whose user may create databases, with pgvector),
else the ``pgserver`` package as in the tests; its settings are printed. The two
databases are dropped at the end unless ``--keep``.

    python bench/bench_scale_pg.py            # about 10-15 minutes, most of it generation
    python bench/bench_scale_pg.py --quick    # about 2 minutes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import pg

import make_scale_pg as gen
from _paired import Goal, goal_table, paired
from _scale_embed import ScaleEmbedder
from bench_history import LoadSampler, machine, pct
from bench_memory import queries
from contextwright.memory import PostgresMemoryStore

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=ResourceWarning)

SIDES = ("full", "small")
GOAL = 1.5
ZEP_P95_MS = 155.0  # Zep's paper (arXiv 2501.13956), LoCoMo, retrieval p95
MEM0_P50_MS = 1000.0  # mem0's paper (arXiv 2504.19413): search about 1 s p50 (rounded)

Timed = dict[str, dict[str, list[float]]]  # metric -> side -> this round's samples (ms)


def _ms(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


# -- the two databases -------------------------------------------------------------------------


def make_databases(args: argparse.Namespace, console: Console) -> dict[str, str]:
    urls: dict[str, str] = {}
    for side, div in (("full", 1), ("small", 100)):
        url = pg.create_database(f"cwscale_{side}")
        urls[side] = url
        convs, mems = args.conversations // div, args.memories // div
        console.print(
            f"[bold]{side}[/]: {convs:,} conversations x {args.messages} messages, "
            f"{mems:,} memories"
        )
        t = time.perf_counter()
        gen.make(url, conversations=convs, messages=args.messages, memories=mems,
                 per_scope=args.per_scope, log=console.print)  # fmt: skip
        console.print(f"  {side} made in {time.perf_counter() - t:.1f} s")
        for rel, n in gen.sizes(url).items():
            console.print(f"  size of {rel}: {n / 2**20:,.1f} MB")
    return urls


def server_settings(url: str) -> dict[str, str]:
    import psycopg

    names = ("server_version", "shared_buffers", "work_mem", "effective_cache_size",
             "maintenance_work_mem", "max_parallel_maintenance_workers")  # fmt: skip
    with psycopg.connect(url) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


# -- (c) memory search -------------------------------------------------------------------------


class MemorySearch:
    """Searches of the measured scopes on one database."""

    def __init__(self, url: str, scopes: int, per_scope: int) -> None:
        self.store = PostgresMemoryStore(url, embedder=ScaleEmbedder(), migrate=False)
        items = gen.memory_items(scopes, per_scope)
        # a word only this scope's memories hold: the tail in parentheses
        self.own = [[i["content"].rsplit("(", 1)[-1].split()[0] for i in its] for its in items]
        self.questions = queries(200)

    def once(self, r: int, i: int) -> float:
        k = (r * 7 + i) % len(self.own)
        q = f"{self.questions[(r * 31 + i) % len(self.questions)]} {self.own[k][i % len(self.own[k])]}"
        return _ms(lambda: self.store.search_sync(gen.memory_scope(k), q, limit=5))

    def close(self) -> None:
        self.store.close()


# -- the measurement loop ----------------------------------------------------------------------


def p95(values: Sequence[float]) -> float:
    return pct(values, 95) if len(values) > 1 else values[0]


def run(args: argparse.Namespace, urls: dict[str, str], console: Console) -> list[Goal]:
    scopes = max(1, min(args.memories // 100 // args.per_scope, 20))
    searches = {s: MemorySearch(urls[s], scopes, args.per_scope) for s in SIDES}
    builds: dict[str, Any] = {}
    try:
        from _scale_builds import Builds

        builds = {s: Builds(urls[s], args) for s in SIDES}
    except Exception as exc:  # the conversation backend is not there yet
        console.print(f"[yellow]builds not measured: {type(exc).__name__}: {exc}[/]")
    per_round: dict[str, dict[str, dict[str, list[float]]]] = {}
    full_samples: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds + 1):
            order = SIDES if r % 2 else SIDES[::-1]
            timed: Timed = {}
            for side in order:
                got = timed.setdefault("memory search", {}).setdefault(side, [])
                got += [searches[side].once(r, i) for i in range(args.searches)]
                if side in builds:
                    for metric, samples in builds[side].round(r).items():
                        timed.setdefault(metric, {}).setdefault(side, []).extend(samples)
            if r == 0:
                continue  # warm-up: connections, plans, the document-frequency cache
            for metric, by_side in timed.items():
                for stat, fn in (("p50", statistics.median), ("p95", p95)):
                    slot = per_round.setdefault(f"{metric} {stat}", {s: [] for s in SIDES})
                    for side in SIDES:
                        slot[side].append(fn(by_side[side]))
                full_samples.setdefault(metric, []).extend(by_side["full"])
    finally:
        for s in searches.values():
            s.close()
        for b in builds.values():
            b.close()
    return goals(args, per_round, full_samples, console)


METRICS = (
    ("cold first build (history only)", "history cold"),
    ("warm build (history only)", "history warm"),
    ("default build (recall), warm", "default warm"),
    ("memory search (scope of 100)", "memory search"),
)


def goals(
    args: argparse.Namespace,
    per_round: dict[str, dict[str, list[float]]],
    full_samples: dict[str, list[float]],
    console: Console,
) -> list[Goal]:
    size = f"{args.conversations * args.messages:,} msgs / {args.memories:,} mems"
    out = []
    for label, metric in METRICS:
        for stat in ("p50", "p95"):
            got = per_round.get(f"{metric} {stat}")
            ratio = paired(got["full"], got["small"]) if got else None
            out.append(Goal(f"{label} {stat}, full / 1/100", GOAL, ratio, at_most=True,
                            note=size if ratio else "conversation backend missing"))  # fmt: skip
    mem = full_samples.get("memory search")
    if mem:
        console.print(
            f"memory search at {args.memories:,} memories: p50 {statistics.median(mem):.2f} ms, "
            f"p95 {p95(mem):.2f} ms over {len(mem)} searches (this machine, one process)\n"
            f"  published, NOT run here (they need graph databases or hosted LLMs; other "
            f"hardware, other data): Zep p95 {ZEP_P95_MS:.0f} ms on LoCoMo; mem0 about "
            f"{MEM0_P50_MS / 1000:.0f} s p50 per query"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/10 of the sizes")
    ap.add_argument("--dsn", default=os.environ.get("CONTEXTWRIGHT_BENCH_DSN"))
    ap.add_argument("--conversations", type=int, default=None)
    ap.add_argument("--messages", type=int, default=100)
    ap.add_argument("--memories", type=int, default=None)
    ap.add_argument("--per-scope", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--searches", type=int, default=40, help="per side per round")
    ap.add_argument("--convs-per-round", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3, help="warm turns per conversation")
    ap.add_argument("--keep", action="store_true", help="do not drop the databases")
    args = ap.parse_args(argv)
    q = args.quick
    args.conversations = args.conversations or (1_000 if q else 10_000)
    args.memories = args.memories or (20_000 if q else 200_000)
    args.rounds = args.rounds or (4 if q else 8)
    if args.dsn:
        os.environ["CONTEXTWRIGHT_TEST_DSN"] = args.dsn
    console = Console(width=200)
    console.print(f"machine: {machine()}")
    console.print(f"PostgreSQL: {server_settings(pg.server_url())}")
    load = LoadSampler()
    urls = make_databases(args, console)
    try:
        goals_ = run(args, urls, console)
    finally:
        if not args.keep:
            for url in urls.values():
                pg.drop_database(url)
    ld = load.stop()
    title = f"Scale on PostgreSQL, full / 1/100 (load avg {ld['min']:.1f}-{ld['max']:.1f})"
    goal_table(console, title, goals_, "full / small")
    return 0


if __name__ == "__main__":
    sys.exit(main())
