"""Many workers on one SQLite file: a builder's throughput beside a writer, and two builders.

Real processes (``multiprocessing``, spawn) on one SQLite file (WAL), each with its
own `Conversations` (history + recall, cl100k, budget 8,000: the stateful default
of ``bench_goals.py``). A template file holds two conversations of the seeded
synthetic thread of ``bench_history.py`` (``--messages`` each), imported and built
once; every round runs on a fresh copy of it. The processes start their clocks
together (a barrier, after their imports and two warm-up turns) and build for
``--seconds``.

A builder's turn is an agent's: ``build_sync`` of a new user message (which stores
it), then the reply appended. Throughput is turns per second.

(a) **Beside a flat-out appender.** Solo: one builder on conversation 1. Contended:
    the same, while a second process appends single messages to the same
    conversation as fast as it can. After each append commits, the appender
    publishes (in shared memory) the append's number and sequence number; before
    each build, the builder reads them. A build is *stale* if nothing in it (the
    window, the summary of older turns, recalled turns) shows that note or a later
    one (or, when the receipt reports the last sequence number it read, if that is
    below the published one). Its window must
    also hold the appended messages it shows verbatim in order, each once (a note
    twice, or a hole between two notes, is a wrong window). Goals: the builder
    keeps >= 50% of its solo turns/s; zero stale builds, zero wrong windows. A few
    wrong builds are printed in short (``#12..40``: appended notes 12 to 40).
(b) **Two builders.** One builder on conversation 1, vs two builders (conversations
    1 and 2 of the same file) at once. Goal: >= 1.5x the total turns/s.

Rounds alternate the two sides of each comparison (solo, contended, contended,
solo, ...); each round gives one paired ratio. The machine's cores are shared with
whatever else runs: two builders cannot be faster than one when the other core is
busy, and the load average is printed with the results.

    python bench/bench_workers.py             # about 3 minutes
    python bench/bench_workers.py --quick     # about 40 s
"""

import argparse
import multiprocessing as mp
import os
import queue
import re
import shutil
import statistics
import time
import warnings
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from _paired import Goal, goal_table, paired, quartiles, rotate
from bench_history import (
    STATE,
    TENANT,
    USER,
    LoadSampler,
    Workdir,
    fresh,
    machine,
    make_engine,
    synthetic_thread,
    turn_messages,
)
from contextwright import Conversations, Message
from contextwright.stores import SQLiteStore

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=ResourceWarning)

CONVS = ("c1", "c2")
BARRIER_TIMEOUT = 600.0


def _marker(k: int) -> str:
    return f"[a{k:08d}]"


_MARK = re.compile(r"\[a(\d{8})\]")


def _marks(text: str) -> list[int]:
    return [int(x) for x in _MARK.findall(text)]


def _verdict(messages: Sequence[Message], k: int) -> str:
    """How a build's messages show the store it read: "ok", "stale", "repeats" or "unknown".

    The appended notes are numbered in commit order and the window is the newest
    messages in order, after the summary of the older ones. "repeats": the notes
    the window holds verbatim are not consecutive, each once (a note twice, or a
    hole; not the hole after a window's first message, the opening user message of
    the turn its oldest unit belongs to, which opens a window cut inside a turn). "stale": the window holds notes, all before ``k`` (note ``k`` committed
    before the build began, so it belongs after them). With no note in the window,
    a summary or recalled turn naming note ``k`` or a later one is "ok"; otherwise
    the messages cannot tell ("unknown": the rule summary names only some notes).
    """
    notes = [n for m in messages if m.text.startswith("[a") for n in _marks(m.text)[:1]]
    if len(notes) > 1 and notes[1] > notes[0] + 1:
        # The window opens with its turn's opening user message, and the messages
        # between it and the oldest unit kept did not fit: a hole by design.
        notes = notes[1:]
    verbatim = sorted(notes)
    if verbatim and verbatim != list(range(verbatim[0], verbatim[-1] + 1)):
        return "repeats"
    if verbatim:
        return "ok" if verbatim[-1] >= k else "stale"
    named = max((n for m in messages for n in _marks(m.text)), default=-1)
    return "ok" if named >= k else "unknown"


def _outline(messages: Sequence[Message]) -> str:
    """A build's messages in short: runs of appended notes as ``#12..40``, the rest by role."""
    out: list[str] = []
    for m in messages:
        found = _marks(m.text)
        if m.text.startswith("[a") and found:
            last = out[-1] if out else ""
            if last.startswith("#") and int(last.split("..")[-1].lstrip("#")) + 1 == found[0]:
                out[-1] = f"{last.split('..')[0]}..{found[0]}"
                continue
            out.append(f"#{found[0]}")
        elif found:
            out.append(f"{m.role}(notes {min(found)}..{max(found)})")
        else:
            out.append(m.role)
    return " ".join(out)


def _open(path: str, now: float) -> Conversations:
    return Conversations(make_engine(now, sources=False), SQLiteStore(path))


def builder(
    path: str,
    cid: str,
    now: float,
    seconds: float,
    barrier: Any,
    published: Any,
    results: Any,
    seed: int,
) -> None:
    """Build turns on ``cid`` for ``seconds`` after the barrier; put what it saw on ``results``."""
    conv = _open(path, now)
    pairs = turn_messages(64, seed=seed)
    for j, (q, reply) in enumerate(pairs[:2]):  # warm up: the first build reloads the tail
        conv.build_sync(cid, q, tenant=TENANT, user=USER, state=STATE)
        conv.append_sync(cid, [reply.replace(id=f"{cid}-w{j}")], tenant=TENANT, user=USER)
    barrier.wait(BARRIER_TIMEOUT)
    lat: list[float] = []
    checked = with_seq = 0
    bad = {"stale": 0, "repeats": 0, "unknown": 0}
    examples: list[dict[str, Any]] = []
    started = time.perf_counter()
    i = 0
    while time.perf_counter() - started < seconds:
        q, reply = pairs[i % len(pairs)]
        k = seq = -1
        if published is not None:
            with published.get_lock():
                k, seq = published[0], published[1]
        t = time.perf_counter()
        built = conv.build_sync(cid, f"{q} #{i}", tenant=TENANT, user=USER, state=STATE)
        lat.append((time.perf_counter() - t) * 1e3)
        if k >= 0:
            checked += 1
            verdict = _verdict(built.messages, k)
            last_seq = getattr(built.report, "last_seq", None)
            if last_seq is not None:
                with_seq += 1
                if verdict != "repeats":
                    verdict = "ok" if last_seq >= seq else "stale"
            if verdict == "unknown":
                checked -= 1
            if verdict != "ok":
                bad[verdict] = bad.get(verdict, 0) + 1
                if len(examples) < 3 and verdict != "unknown":
                    examples.append(
                        {"verdict": verdict, "k": k, "seq": seq, "turn": i, "last_seq": last_seq,
                         "window": _outline(built.messages)}
                    )  # fmt: skip
        conv.append_sync(cid, [reply.replace(id=f"{cid}-r{i}")], tenant=TENANT, user=USER)
        i += 1
    elapsed = time.perf_counter() - started
    results.put(
        {"role": "builder", "turns": i, "seconds": elapsed, "lat_ms": lat, **bad,
         "checked": checked, "with_seq": with_seq, "examples": examples}
    )  # fmt: skip
    conv.close()


def appender(
    path: str, cid: str, now: float, barrier: Any, stop: Any, published: Any, results: Any
) -> None:
    """Append single messages to ``cid`` until ``stop``; publish each committed one."""
    conv = _open(path, now)

    def append(k: int) -> None:
        text = f"{_marker(k)} a note from the other worker, number {k}"
        m = Message.user(text) if k % 2 == 0 else Message.assistant(text)
        stored = conv.append_sync(cid, [m], tenant=TENANT, user=USER)
        with published.get_lock():
            published[0], published[1] = k, stored[-1].seq

    append(0)  # before the clocks start, so that every timed build has one to look for
    barrier.wait(BARRIER_TIMEOUT)
    started = time.perf_counter()
    k = 1
    while not stop.is_set():
        append(k)
        k += 1
    results.put({"role": "appender", "appends": k - 1, "seconds": time.perf_counter() - started})
    conv.close()


def make_template(wd: Workdir, messages: int) -> tuple[str, float]:
    """Both conversations imported (as the CLI does) and built once; (path, clock)."""
    thread = synthetic_thread(messages)
    now = (thread[-1].created_at or 0.0) + 600
    path = wd.db("template")
    conv = _open(path, now)
    q, reply = turn_messages(1, seed=5)[0]
    for cid in CONVS:
        conv.import_sync(
            cid, fresh(thread), tenant=TENANT, user=USER, batch_size=1000, optimize_index=True
        )
        conv.build_sync(cid, q, tenant=TENANT, user=USER, state=STATE)
        conv.append_sync(cid, [reply.replace(id=f"{cid}-t")], tenant=TENANT, user=USER)
    conv.wait_idle_sync(300)
    conv.close()
    return path, now


def run_round(
    wd: Workdir, template: str, now: float, seconds: float, builders: int, append: bool
) -> list[dict[str, Any]]:
    """One round on a fresh copy of ``template``: the processes' reports."""
    ctx = mp.get_context("spawn")
    path = wd.db("round")
    shutil.copyfile(template, path)
    barrier = ctx.Barrier(builders + append)
    stop = ctx.Event()
    published = ctx.Array("q", [-1, -1]) if append else None
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=builder,
            args=(path, CONVS[b], now, seconds, barrier, published, results, 40 + b),
        )
        for b in range(builders)
    ]
    if append:
        procs.append(
            ctx.Process(
                target=appender, args=(path, CONVS[0], now, barrier, stop, published, results)
            )
        )
    for p in procs:
        p.start()
    out: list[dict[str, Any]] = []

    def collect(n: int) -> None:
        deadline = time.monotonic() + BARRIER_TIMEOUT + seconds + 120
        while len(out) < n:
            try:
                out.append(results.get(timeout=1.0))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker failed (exit codes {dead})") from None

    try:
        collect(builders)  # the builders end by themselves
        stop.set()
        collect(builders + append)
    finally:
        stop.set()
        for p in procs:
            p.join(60)
            if p.exitcode is None:
                p.kill()
                p.join()
    bad = [p.exitcode for p in procs if p.exitcode]
    if bad:
        raise RuntimeError(f"a worker process failed (exit codes {bad})")
    return out


def turns_per_s(reports: Sequence[dict[str, Any]]) -> float:
    return sum(r["turns"] / r["seconds"] for r in reports if r["role"] == "builder")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 messages, 2 rounds of 3 s")
    ap.add_argument("--messages", type=int, help="messages per conversation (full 10,000)")
    ap.add_argument("--seconds", type=float, help="building time per round (full 8, quick 3)")
    ap.add_argument("--rounds", type=int, help="rounds per side of each comparison (full 4)")
    args = ap.parse_args(argv)
    q = args.quick
    messages = args.messages or (1000 if q else 10_000)
    seconds = args.seconds or (3.0 if q else 8.0)
    rounds = args.rounds or (2 if q else 4)

    console = Console(width=max(200, Console().width))
    info = machine()
    load = LoadSampler()
    console.print(
        f"[bold]bench_workers[/] ({'quick' if q else 'full'}) - {info['cpu']}, {info['nproc']} "
        f"cores, SQLite {info['versions']['sqlite']}; contextwright from "
        f"{info['contextwright_src']} ({info['git']}); load average "
        f"{info['loadavg_at_start'][0]:.2f}; {messages:,} messages per conversation, "
        f"{seconds:g} s per round, {rounds} rounds per side"
    )
    started = time.perf_counter()
    wd = Workdir()
    try:
        template, now = make_template(wd, messages)
        runs: dict[str, list[list[dict[str, Any]]]] = {k: [] for k in ("solo", "contended")}
        runs |= {"one": [], "two": []}
        setups = {"solo": (1, False), "contended": (1, True), "one": (1, False), "two": (2, False)}
        for pair in (("solo", "contended"), ("one", "two")):
            for r in range(rounds):
                for side in rotate(pair, r):
                    runs[side].append(run_round(wd, template, now, seconds, *setups[side]))
                console.print(f"  {pair[0]} / {pair[1]} round {r + 1}/{rounds} done")
        ld = load.stop()

        tab = Table(title="Builder turns (build a new user message + append the reply), per round")
        for col in ("setup", "rounds", "turns/s (median)", "build p50 ms", "build p95 ms", "other"):
            tab.add_column(col, justify="left" if col in ("setup", "other") else "right")
        stale = repeats = unknown = checked = with_seq = 0
        examples: list[dict[str, Any]] = []
        for side, label in (
            ("solo", "1 builder"),
            ("contended", "1 builder + 1 appender, same conversation"),
            ("one", "1 builder"),
            ("two", "2 builders, 2 conversations, one file"),
        ):
            reps = runs[side]
            lat = [x for rep in reps for r in rep if r["role"] == "builder" for x in r["lat_ms"]]
            other = ""
            apps = [r for rep in reps for r in rep if r["role"] == "appender"]
            if apps:
                rate = statistics.median(a["appends"] / a["seconds"] for a in apps)
                other = f"appender {rate:,.0f} appends/s"
            for rep in reps:
                for r in rep:
                    if r["role"] == "builder" and side == "contended":
                        stale += r["stale"]
                        repeats += r["repeats"]
                        unknown += r["unknown"]
                        checked += r["checked"]
                        with_seq += r["with_seq"]
                        examples += r["examples"]
            p95 = quartiles(lat)[2] if len(lat) < 20 else statistics.quantiles(lat, n=20)[-1]
            tab.add_row(
                label,
                str(len(reps)),
                f"{statistics.median(turns_per_s(rep) for rep in reps):.1f}",
                f"{statistics.median(lat):.2f}",
                f"{p95:.2f}",
                other,
            )
        console.print(tab)
        for ex in examples[:3]:
            console.print(f"  wrong build: {ex}", markup=False, highlight=False)
        seq_note = (
            f"{with_seq:,} also by the receipt's last_seq"
            if with_seq
            else "by marker only: the receipt does not report last_seq"
        )
        goals = [
            Goal(
                "builder beside a flat-out appender vs solo, turns/s",
                0.5,
                paired([turns_per_s(x) for x in runs["contended"]],
                       [turns_per_s(x) for x in runs["solo"]]),
                unit="turns/s",
            ),
            Goal(
                "stale builds beside the appender",
                "0",
                None,
                check=(f"{stale} of {checked:,}", stale == 0 and checked > 0),
                note=f"builds checked against the last append committed before they began; "
                f"{seq_note}; {unknown} more could not be told apart (no note in the window)",
            ),
            Goal(
                "builds beside the appender repeating or skipping a message",
                "0",
                None,
                check=(f"{repeats} of {checked:,}", repeats == 0 and checked > 0),
                note="the appended notes the window holds verbatim must be consecutive, each once",
            ),
            Goal(
                "two builders on one file vs one, total turns/s",
                1.5,
                paired([turns_per_s(x) for x in runs["two"]], [turns_per_s(x) for x in runs["one"]]),
                unit="turns/s",
            ),
        ]  # fmt: skip
        goal_table(console, "Goals (many workers)", goals, "medians (num / den)")
        console.print(
            f"run time {time.perf_counter() - started:.0f} s; 1-min load average during the run: "
            f"min {ld['min']:.2f}, mean {ld['mean']:.2f}, max {ld['max']:.2f} on "
            f"{os.cpu_count()} cores (shared: other processes compete for the cores)"
        )
        return 0
    finally:
        wd.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
