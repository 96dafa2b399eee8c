"""PostgreSQL beside SQLite on the same work, and many worker processes on one PostgreSQL.

(a) **Same work, side by side.** Two copies of one conversation (the seeded
    synthetic thread of ``bench_history.py``, ``--messages`` long), one in an
    SQLite file, one in a PostgreSQL database, each behind its own
    `Conversations` (cl100k, budget 8,000). Every round times, on both, in
    alternating order: an agent turn with the history-only engine (build of a new
    user message, which stores it, then the reply appended: warm, the tail cache
    current), the same with the default engine (recall on), and one single-message
    append. A fourth pair times a memory search over ``--memories`` memories in
    `SQLiteMemoryStore` and `PostgresMemoryStore` (same deterministic embedder).
    Each row is the per-round ratio PostgreSQL / SQLite (median, IQR). Goal: the
    warm history build within 3x of SQLite's; the others are reported.
(b) **Many workers.** 1, 2 and 4 worker processes on one PostgreSQL, each running
    agent turns (build + reply) on conversations drawn at random from
    ``--conversations`` (each starts with 40 messages) for ``--seconds``. After
    each append commits a worker publishes the conversation's last seq in shared
    memory; a build that reads less than the value published before it started is
    *stale*. At the end every conversation must hold exactly its initial messages
    plus two per turn run on it, seqs 1..n without gaps, each id once. Goals:
    throughput 2 workers >= 1.6x of 1; 4 workers >= 2 workers; zero stale, lost or
    duplicated.

PostgreSQL comes from ``--dsn`` / ``$CONTEXTWRIGHT_BENCH_DSN`` (a server whose user
may create databases), else from the ``pgserver`` package (PostgreSQL 16 +
pgvector on a Unix socket), as in the tests.

    python bench/bench_pg.py            # about 4 minutes
    python bench/bench_pg.py --quick    # about 1 minute
"""

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from _paired import Goal, goal_table, paired
from _scale_embed import ScaleEmbedder
from bench_history import (
    STATE,
    TENANT,
    USER,
    LoadSampler,
    fresh,
    machine,
    make_engine,
    synthetic_thread,
    turn_messages,
)
from contextwright import Conversations, Message
from contextwright.stores import SQLiteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import pg

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=ResourceWarning)

INITIAL = 40  # messages per conversation before the workers start
BARRIER_TIMEOUT = 300.0


# -- (a) the same work on both ----------------------------------------------------------------


def _open_pair(thread: list[Message], now: float, recall: bool, root: Path) -> dict[str, Any]:
    url = pg.create_database("cwbench")
    sqlite = str(root / f"{'default' if recall else 'history'}.db")
    pair: dict[str, Any] = {"_url": url}
    for side, store in (("sqlite", SQLiteStore(sqlite)), ("postgres", url)):
        conv = Conversations(make_engine(now, sources=False), store, recall=recall)
        conv.import_sync("c", fresh(thread), tenant=TENANT, user=USER, batch_size=1000)
        conv.wait_idle_sync(300)
        pair[side] = conv
    return pair


def _turn(conv: Conversations, q: str, reply: Message) -> float:
    t = time.perf_counter()
    conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
    dt = time.perf_counter() - t
    conv.append_sync("c", [reply.replace()], tenant=TENANT, user=USER)
    conv.wait_idle_sync(120)
    return dt * 1e3


def _append(conv: Conversations, i: int) -> float:
    m = Message.user(f"a short note number {i} about the refund of order 88231")
    t = time.perf_counter()
    conv.append_sync("notes", [m], tenant=TENANT, user=USER)
    return (time.perf_counter() - t) * 1e3


def _memory_pair(n: int, root: Path) -> tuple[Any, Any, str]:
    from contextwright.memory import Scope
    from contextwright.stores._open import open_memory_store

    url = pg.create_database("cwbenchmem")
    rng = random.Random(7)
    words = [w for w in synthetic_thread(400)[0].text.split() if w.isalpha()] or ["refund"]
    scope = Scope(TENANT, USER)
    stores = []
    for db in (str(root / "memory.db"), url):
        store = open_memory_store(db, embedder=ScaleEmbedder(384))
        store.add_many(
            scope,
            [" ".join(rng.choice(words) for _ in range(12)) for _ in range(n)],
        )
        stores.append(store)
    return stores[0], stores[1], url


def _search(store: Any, q: str) -> float:
    from contextwright.memory import Scope

    t = time.perf_counter()
    store.search_sync(Scope(TENANT, USER), q, limit=8)
    return (time.perf_counter() - t) * 1e3


def same_work(args: argparse.Namespace, console: Console) -> list[Goal]:
    thread = synthetic_thread(args.messages)
    now = (thread[-1].created_at or 0.0) + 600
    root = Path(tempfile.mkdtemp(prefix="cw-bench-pg-"))
    pairs = {name: _open_pair(thread, now, recall, root) for name, recall in
             (("history", False), ("default", True))}  # fmt: skip
    ms: dict[str, dict[str, list[float]]] = {
        k: {"sqlite": [], "postgres": []} for k in ("history", "default", "append", "memory")
    }
    mem_sqlite = mem_pg = mem_url = None
    try:
        mem_sqlite, mem_pg, mem_url = _memory_pair(args.memories, root)
    except Exception as exc:  # the memory half is optional until its store exists
        console.print(f"[yellow]memory search not measured: {type(exc).__name__}: {exc}[/]")
    questions = turn_messages(args.rounds + 1, seed=11)
    for r, (q, reply) in enumerate(questions):
        order = ("sqlite", "postgres") if r % 2 else ("postgres", "sqlite")
        for side in order:
            for name in ("history", "default"):
                dt = _turn(pairs[name][side], q, reply)
                if r:  # round 0 warms up
                    ms[name][side].append(dt)
            dt = statistics.median(_append(pairs["history"][side], r * 10 + k) for k in range(5))
            if r:
                ms["append"][side].append(dt)
            if mem_sqlite is not None:
                store = mem_sqlite if side == "sqlite" else mem_pg
                dt = statistics.median(_search(store, w) for w in q.split()[:5] or [q])
                if r:
                    ms["memory"][side].append(dt)
    for pair in pairs.values():
        for side in ("sqlite", "postgres"):
            pair[side].close()
        pg.drop_database(pair["_url"])
    for store in (mem_sqlite, mem_pg):
        if store is not None:
            store.close()
    if mem_url:
        pg.drop_database(mem_url)
    n = args.messages

    def ratio(k: str) -> Any:
        return paired(ms[k]["postgres"], ms[k]["sqlite"]) if ms[k]["sqlite"] else None

    return [
        Goal(f"warm history build, PostgreSQL / SQLite @ {n:,}", 3.0, ratio("history"), at_most=True),
        Goal(f"default build (recall), PostgreSQL / SQLite @ {n:,}", "report", ratio("default"),
             note="reported, no goal"),
        Goal("single append, PostgreSQL / SQLite", "report", ratio("append"), note="reported, no goal"),
        Goal(f"memory search, PostgreSQL / SQLite @ {args.memories:,}", "report", ratio("memory"),
             note="reported, no goal"),
    ]  # fmt: skip


# -- (b) many workers -------------------------------------------------------------------------


def _worker(
    url: str, convs: int, seconds: float, seed: int, published: Any, lock: Any,
    barrier: Any, results: Any,
) -> None:  # fmt: skip
    warnings.filterwarnings("ignore")
    rng = random.Random(seed)
    now = time.time() + 3600
    conv = Conversations(make_engine(now, sources=False), url, recall=True)
    pool = turn_messages(50, seed=seed)
    # warm up: two turns outside the clock
    for q, reply in pool[:2]:
        conv.build_sync(f"w{seed}", q, tenant=TENANT, user=USER)
        conv.append_sync(f"w{seed}", [reply.replace()], tenant=TENANT, user=USER)
    barrier.wait(BARRIER_TIMEOUT)
    turns, stale, per_conv = 0, 0, [0] * convs
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        k = rng.randrange(convs)
        q, reply = pool[turns % len(pool)]
        seen = published[k]
        built = conv.build_sync(f"c{k}", q, tenant=TENANT, user=USER, state=STATE)
        last = built.report.last_seq or 0
        stale += last < seen
        fresh_reply = Message.assistant(reply.text)  # a new id: the pool's repeat
        saved = conv.append_sync(f"c{k}", [fresh_reply], tenant=TENANT, user=USER)
        seq = saved[-1].seq or 0
        with lock:
            published[k] = max(published[k], seq)
        turns += 1
        per_conv[k] += 1
    conv.close()
    results.put((turns, stale, per_conv, seconds))


def _seed_conversations(url: str, n: int) -> None:
    conv = Conversations(make_engine(time.time(), sources=False), url)
    thread = synthetic_thread(INITIAL)
    for k in range(n):
        conv.import_sync(f"c{k}", fresh(thread), tenant=TENANT, user=USER)
    conv.close()


def _check(url: str, n: int, per_conv: list[int]) -> tuple[int, int]:
    """(lost or extra messages, conversations with gaps or duplicate ids)."""
    conv = Conversations(make_engine(time.time(), sources=False), url)
    lost = broken = 0
    for k in range(n):
        msgs = conv.messages_sync(f"c{k}", tenant=TENANT, user=USER)
        want = INITIAL + 2 * per_conv[k]
        lost += abs(len(msgs) - want)
        seqs = [m.seq for m in msgs]
        ids = [m.id for m in msgs]
        broken += seqs != list(range(1, len(msgs) + 1)) or len(set(ids)) != len(ids)
    conv.close()
    return lost, broken


def many_workers(args: argparse.Namespace, console: Console) -> list[Goal]:
    ctx = mp.get_context("spawn")
    rates: dict[int, list[float]] = {1: [], 2: [], 4: []}
    stale_total = lost_total = broken_total = 0
    for r in range(args.worker_rounds):
        for workers in (1, 2, 4) if r % 2 == 0 else (4, 2, 1):
            url = pg.create_database("cwworkers")
            _seed_conversations(url, args.conversations)
            published = ctx.Array("q", [INITIAL] * args.conversations)
            lock, barrier, results = ctx.Lock(), ctx.Barrier(workers), ctx.Queue()
            procs = [
                ctx.Process(target=_worker, args=(url, args.conversations, args.seconds,
                            1000 * r + w, published, lock, barrier, results))
                for w in range(workers)
            ]  # fmt: skip
            for p in procs:
                p.start()
            got = [results.get(timeout=BARRIER_TIMEOUT + args.seconds * 4) for _ in procs]
            for p in procs:
                p.join()
            turns = sum(g[0] for g in got)
            per_conv = [sum(g[2][k] for g in got) for k in range(args.conversations)]
            lost, broken = _check(url, args.conversations, per_conv)
            stale_total += sum(g[1] for g in got)
            lost_total += lost
            broken_total += broken
            rates[workers].append(turns / args.seconds)
            console.print(
                f"  round {r} · {workers} worker(s): {turns / args.seconds:.1f} turns/s, "
                f"stale {sum(g[1] for g in got)}, lost/extra {lost}, broken {broken}"
            )
            pg.drop_database(url)
    ok = stale_total == 0 and lost_total == 0 and broken_total == 0
    return [
        Goal("2 workers / 1 worker, turns/s", 1.6, paired(rates[2], rates[1]), unit="turns/s"),
        Goal("4 workers / 2 workers, turns/s", 1.0, paired(rates[4], rates[2]), unit="turns/s"),
        Goal("stale builds, lost or duplicated messages", "0",
             None, check=(f"{stale_total} stale, {lost_total} lost/extra, {broken_total} broken",
                          ok)),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dsn", default=os.environ.get("CONTEXTWRIGHT_BENCH_DSN"))
    ap.add_argument("--messages", type=int, default=None)
    ap.add_argument("--memories", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--conversations", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--worker-rounds", type=int, default=None)
    ap.add_argument("--skip", choices=["same", "workers"], default=None)
    args = ap.parse_args(argv)
    q = args.quick
    args.messages = args.messages or (1000 if q else 5000)
    args.memories = args.memories or (1000 if q else 5000)
    args.rounds = args.rounds or (8 if q else 20)
    args.seconds = args.seconds or (5.0 if q else 12.0)
    args.worker_rounds = args.worker_rounds or (1 if q else 3)
    if args.dsn:
        os.environ["CONTEXTWRIGHT_TEST_DSN"] = args.dsn
    console = Console(width=200)
    info = machine()
    console.print(f"machine: {info}")
    load = LoadSampler()
    goals: list[Goal] = []
    if args.skip != "same":
        goals += same_work(args, console)
    if args.skip != "workers":
        goals += many_workers(args, console)
    ld = load.stop()
    title = f"PostgreSQL (load avg {ld['min']:.1f}-{ld['max']:.1f})"
    goal_table(console, title, goals, "PostgreSQL / SQLite or N / fewer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
