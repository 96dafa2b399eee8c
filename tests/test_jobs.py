"""Durable background jobs: the runner, and a worker killed mid-summary.

The queue's own rules (dedup, leases, fencing, backoff, failed jobs kept, bad input)
are `contextwright.testing.JobsContract`, run for both queues in tests/contract.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
from contextwright._errors import StoreError
from contextwright.history import CompactionConfig
from contextwright.stores import Job, SQLiteJobs, SQLiteStore
from contextwright.stores._runner import JobRunner
from contextwright.testing import ManualClock

H = HeuristicCounter()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


# -- the runner -----------------------------------------------------------------------


async def test_inline_runner_retries_a_failing_job_with_backoff_and_keeps_the_last_failure(
    tmp_path, caplog
):
    store = SQLiteStore(tmp_path / "r.db")
    clock = Clock()
    jobs = SQLiteJobs(store, clock=clock)
    seen: list[int] = []

    async def flaky(job: Job) -> None:
        seen.append(job.attempts)
        raise StoreError("database is locked")

    runner = JobRunner(jobs, {"memory": flaky}, inline=True, retry_base=2.0)
    with caplog.at_level(logging.WARNING):
        job, done = await runner.enqueue("memory", "u", {}, tenant="t", max_attempts=3)
    assert seen == [1]
    assert not done.done()
    (pending,) = await jobs.jobs()
    assert pending.run_after == clock.now + 2.0
    assert "locked" in (pending.error or "")
    assert "retried in 2.0 s" in caplog.text
    clock.now += 2.0
    assert await runner.run_due() == 1  # second attempt: backoff doubles
    assert (await jobs.jobs())[0].run_after == clock.now + 4.0
    clock.now += 4.0
    with caplog.at_level(logging.ERROR):
        assert await runner.wait_idle(5)
    assert seen == [1, 2, 3]
    assert done.done()
    (failed,) = await jobs.jobs(state="failed")
    assert failed.id == job.id
    assert failed.error == "StoreError: database is locked"
    assert "failed for good" in caplog.text
    runner.close()
    store.close()


async def test_the_runner_renews_its_lease_while_a_job_runs(tmp_path):
    """A job longer than its lease keeps it: another worker cannot take it meanwhile.

    The queue's clock is a manual one: the job moves it on by most of a lease and
    then waits until it sees the runner renew (an explicit signal, not a wall-clock
    race), three times, so that without the renewals the lease would have run out.
    """
    store = SQLiteStore(tmp_path / "l.db")
    clock = ManualClock()
    jobs = SQLiteJobs(store, clock=clock)
    taken: list[Job | None] = []

    async def lease_until() -> float:
        (running,) = await jobs.jobs(state="running")
        return running.lease_until or 0.0

    async def long(job: Job) -> None:
        for _ in range(3):
            before = await lease_until()
            clock.advance(0.3 * 0.9)  # most of the lease, not all of it
            for _ in range(20_000):  # a guard against a hang, not a timing
                if await lease_until() > before:
                    break  # renewed: it holds a lease from the new "now"
                await asyncio.sleep(0.005)  # the renewal task runs meanwhile
            else:
                raise AssertionError("the lease was never renewed")
        taken.append(await jobs.claim(["k"], worker="other", lease=0.3))

    runner = JobRunner(jobs, {"k": long}, inline=True, lease=0.3)
    await runner.enqueue("k", "x", {}, tenant="t")
    assert taken == [None]
    assert await jobs.jobs() == []  # completed by its holder
    runner.close()
    store.close()


async def test_a_taken_over_job_is_cancelled_and_writes_nothing(tmp_path):
    store = SQLiteStore(tmp_path / "o.db")
    clock = Clock()
    jobs = SQLiteJobs(store, clock=clock)
    stopped = asyncio.Event()
    wrote: list[str] = []

    async def slow(job: Job) -> None:
        clock.now += 10  # this worker stalls past its lease...
        assert await jobs.claim(["k"], worker="other", lease=60) is not None  # ...and is overtaken
        try:
            await asyncio.Event().wait()  # until the renewal notices
        except asyncio.CancelledError:
            stopped.set()
            raise
        wrote.append("never")

    runner = JobRunner(jobs, {"k": slow}, inline=True, lease=0.3)
    await runner.enqueue("k", "x", {}, tenant="t")
    assert stopped.is_set()
    assert wrote == []
    (job,) = await jobs.jobs()
    assert (job.state, job.worker, job.error) == ("running", "other", None)
    runner.close()
    store.close()


def _bg_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "contextwright-bg" and t.is_alive()}


def test_a_thread_runner_runs_jobs_and_no_thread_outlives_close(tmp_path):
    store = SQLiteStore(tmp_path / "t.db")
    jobs = SQLiteJobs(store)
    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.key)

    before = _bg_threads()
    runner = JobRunner(jobs, {"k": handler})

    async def go() -> None:
        for key in ("a", "b", "a"):
            await runner.enqueue("k", key, {}, tenant="t")
        assert await runner.wait_idle(10)

    asyncio.run(go())
    assert sorted(ran) in (["a", "b"], ["a", "a", "b"])  # "a" again only if it had run
    assert _bg_threads() - before
    runner.close()
    assert _bg_threads() - before == set()
    assert asyncio.run(jobs.jobs()) == []
    store.close()


def test_conversations_report_failed_jobs(tmp_path):
    """A summary whose store write keeps failing is retried, then listed as failed."""

    class Broken(SQLiteStore):
        def save_compaction(self, *a, **kw):
            raise StoreError("disk I/O error")

        save_compaction_versioned = save_compaction

    config = CompactionConfig.preset("development")
    convs = Conversations(
        ContextEngine(counter=H, budget=3000), Broken(tmp_path / "b.db"), compaction=config,
        inline_jobs=True,
    )  # fmt: skip
    convs._runner.retry_base = 0.0  # retry at once
    turns = [Message.user(f"q{i} " * 20) if i % 2 == 0 else Message.assistant(f"a{i} " * 20)
             for i in range(60)]  # fmt: skip
    convs.append_sync("c", turns, tenant="t", user="u")
    convs.wait_idle_sync(10)
    (failed,) = convs.jobs_sync(state="failed")
    assert failed.kind == "summarise"
    assert failed.key == "c"
    assert failed.attempts == 5
    assert failed.error == "StoreError: disk I/O error"
    assert len(convs.store.read("c", tenant="t")) == 60  # nothing lost
    convs.close()


# -- a worker killed holding a summary ------------------------------------------------

WORKER_A = textwrap.dedent(
    """
    import asyncio, sys
    from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
    from contextwright.history import CompactionConfig, RuleSummarizer
    from contextwright.stores import SQLiteStore

    db, started = sys.argv[1], sys.argv[2]

    class Stuck(RuleSummarizer):
        async def summarize_outlined(self, outlined, newest, **kw):
            open(started, "w").close()  # tell the parent, then never finish
            await asyncio.Event().wait()

    convs = Conversations(
        ContextEngine(counter=HeuristicCounter(), budget=3000), SQLiteStore(db),
        compaction=CompactionConfig.preset("development"), summarizer=Stuck(HeuristicCounter()),
        job_lease=1.0,
    )
    turns = [Message.user(f"question {i} about plan {i % 7} " * 8) if i % 2 == 0
             else Message.assistant(f"plan {i % 7} costs {i * 10} dollars " * 8)
             for i in range(60)]
    convs.append_sync("c", turns, tenant="t", user="u")  # schedules the summary job
    print("appended", flush=True)
    sys.stdin.read()  # until killed
    """
)


def test_a_summary_job_held_by_a_killed_worker_is_finished_by_another(tmp_path):
    db, started = tmp_path / "k.db", tmp_path / "started"
    script = tmp_path / "worker_a.py"
    script.write_text(WORKER_A)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    a = subprocess.Popen(
        [sys.executable, str(script), str(db), str(started)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert a.stdout is not None
        assert a.stdout.readline().strip() == "appended"
        deadline = time.monotonic() + 60
        while not started.exists():  # the file is the signal: A is summarising
            assert a.poll() is None, a.stderr.read() if a.stderr else ""
            assert time.monotonic() < deadline, "worker A never started the summary"
            time.sleep(0.01)
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(10)
    assert a.returncode == -signal.SIGKILL
    store = SQLiteStore(db)
    (held,) = asyncio.run(SQLiteJobs(store).jobs())
    assert (held.kind, held.key, held.state, held.attempts) == ("summarise", "c", "running", 1)
    assert held.worker is not None
    assert held.worker.endswith(f":{a.pid}:1")
    assert store.summaries("c", tenant="t") == []  # A wrote nothing of it
    # process B: takes the job over once A's lease (1 s) has run out, and finishes it
    b = Conversations(
        ContextEngine(counter=H, budget=3000), store,
        compaction=CompactionConfig.preset("development"), job_lease=1.0,
    )  # fmt: skip
    try:
        b.wait_idle_sync(30, all_jobs=True)
        assert b.jobs_sync() == []
        (summary,) = store.summaries("c", tenant="t")  # exactly one summary of that range
        assert summary.from_seq == 1
        assert summary.upto_seq > 1
        applied = [e for e in store.compactions("c", tenant="t") if e.applied]
        assert [e.summary_version for e in applied] == [1]
        stored = store.read("c", tenant="t")
        assert [m.seq for m in stored] == list(range(1, 61))  # every message still stored
    finally:
        b.close()
