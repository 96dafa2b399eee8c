"""Many worker processes on one conversation in one SQLite file, or one PostgreSQL database.

Four processes (multiprocessing, spawn) append 250 messages each to the same
conversation, as fast as they can, and build against it every few appends. What
is stored must be exactly the 1,000 messages, numbered 1..1000 once each. Every
build must include every message committed before it started: before each build,
a worker notes the highest sequence number it knows to be committed (its own last
append, and a shared counter that every worker raises after each commit), and
the build's receipt must have read at least that far and show that message (or a
summary that covers it). Nothing in a worker's own process can tell it what the
others wrote: only the store can.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from typing import Any

import pytest

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
from contextwright.stores import SQLiteStore

WORKERS = 4
APPENDS = 250
BUILD_EVERY = 5
TENANT, USER, CID = "t", "u", "shared"


def marker(worker: int, k: int) -> str:
    return f"[w{worker}:{k}]"


def work(
    worker: int, db: str, committed: Any, start: Any, results: Any
) -> None:  # pragma: no cover - runs in the child processes
    """One worker: append its messages, build every few, check what each build saw."""
    problems: list[str] = []
    builds = 0
    try:
        engine = ContextEngine(
            system_prompt="You are a worker.", counter=HeuristicCounter(), budget=6000
        )
        store: Any = db if db.startswith("postgresql") else SQLiteStore(db, busy_timeout=30.0)
        with Conversations(engine, store) as convs:
            log, summaries = convs.backend.conversations, convs.backend.summaries
            start.wait(60)  # all together: an explicit signal, not a sleep
            own = 0
            for k in range(APPENDS):
                text = f"{marker(worker, k)} note {k} from worker {worker} about the plan."
                stored = convs.append_sync(CID, [Message.user(text)], tenant=TENANT, user=USER)
                own = stored[0].seq or 0
                with committed.get_lock():  # raised only after the commit returned
                    committed.value = max(committed.value, own)
                if k % BUILD_EVERY != BUILD_EVERY - 1:
                    continue
                with committed.get_lock():
                    known = max(own, committed.value)
                built = convs.build_sync(
                    CID, f"worker {worker}: where do we stand?", tenant=TENANT, user=USER,
                    store_message=False,
                )  # fmt: skip
                builds += 1
                seen = built.report.last_seq
                if seen is None or seen < known:
                    problems.append(f"build {builds}: read up to seq {seen}, {known} was committed")
                    continue
                seqs = [m.seq for m in built.messages if m.seq is not None]
                if seqs != sorted(set(seqs)) or (seqs and seqs[-1] - seqs[0] + 1 != len(seqs)):
                    # the window is a run of stored messages: each once, none skipped
                    problems.append(f"build {builds}: the window's seqs are not one run: {seqs}")
                    continue
                (wanted,) = convs._sync.run(
                    log.read(CID, tenant=TENANT, after_seq=known - 1, upto_seq=known)
                )
                shown = "\n".join(m.text for m in built.messages)
                if wanted.text in shown:
                    continue
                covering = [
                    s for s in convs._sync.run(summaries.summaries(CID, tenant=TENANT))
                    if s.content and s.content in shown
                ]  # fmt: skip
                if not covering or covering[-1].upto_seq < known:
                    problems.append(
                        f"build {builds}: seq {known} ({wanted.text[:12]}) neither shown nor "
                        f"summarised (summaries shown: {[s.upto_seq for s in covering]})"
                    )
            convs.wait_idle_sync(60)
    except BaseException:
        problems.append(traceback.format_exc())
    results.put((worker, builds, problems))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_four_processes_append_and_build_on_one_conversation(kind, tmp_path, request):
    if kind == "postgres":  # a fresh database; the workers race to migrate it
        db = request.getfixturevalue("pg_url")
    else:
        db = str(tmp_path / "many.db")
        SQLiteStore(db).close()  # made (and migrated) once, before the workers race
    ctx = mp.get_context("spawn")
    committed = ctx.Value("q", 0)
    start = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    began = time.monotonic()
    procs = [
        ctx.Process(target=work, args=(w, db, committed, start, results)) for w in range(WORKERS)
    ]
    for p in procs:
        p.start()
    reports = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    elapsed = time.monotonic() - began

    for worker, builds, problems in sorted(reports):
        assert not problems, f"worker {worker}: " + "\n".join(problems[:5])
        assert builds == APPENDS // BUILD_EVERY

    engine = ContextEngine(counter=HeuristicCounter(), budget=6000)
    with Conversations(engine, db if kind == "postgres" else SQLiteStore(db)) as convs:
        stored = convs.messages_sync(CID, tenant=TENANT, user=USER)
    assert [m.seq for m in stored] == list(range(1, WORKERS * APPENDS + 1))
    markers = [m.text.split(" ", 1)[0] for m in stored]
    assert sorted(markers) == sorted(marker(w, k) for w in range(WORKERS) for k in range(APPENDS))
    # each worker's own messages keep their order
    for w in range(WORKERS):
        mine = [int(x.split(":")[1][:-1]) for x in markers if x.startswith(f"[w{w}:")]
        assert mine == list(range(APPENDS))
    assert elapsed < 60, f"took {elapsed:.1f} s"
