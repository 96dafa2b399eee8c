"""Durable background jobs: the queue's rules (both backends), the runner, and a worker killed mid-summary."""

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

import pytest

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
from contextwright._errors import ConfigError, InvalidMessageError, LeaseLostError, StoreError
from contextwright.history import CompactionConfig
from contextwright.stores import Job, Jobs, MemoryJobs, SQLiteJobs, SQLiteStore
from contextwright.stores._runner import JobRunner

H = HeuristicCounter()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "memory"])
def queue(request, tmp_path):
    clock = Clock()
    if request.param == "memory":
        yield MemoryJobs(clock=clock), clock
        return
    store = SQLiteStore(tmp_path / "jobs.db")
    yield SQLiteJobs(store, clock=clock), clock
    store.close()


async def test_both_backends_are_jobs(queue):
    jobs, _ = queue
    assert isinstance(jobs, Jobs)


async def test_enqueue_is_idempotent_per_tenant_kind_and_key_while_active(queue):
    jobs, _ = queue
    a = await jobs.enqueue("summarise", "c1", {"n": 1}, tenant="t")
    again = await jobs.enqueue("summarise", "c1", {"n": 2}, tenant="t")
    assert again.id == a.id
    assert again.payload == {"n": 1}
    other = [
        await jobs.enqueue("summarise", "c1", {}, tenant="t2"),
        await jobs.enqueue("memory", "c1", {}, tenant="t"),
        await jobs.enqueue("summarise", "c2", {}, tenant="t"),
    ]
    assert len({a.id, *(j.id for j in other)}) == 4
    claimed = await jobs.claim(["summarise"], worker="w", lease=10)
    assert claimed is not None
    assert claimed.id == a.id
    assert (await jobs.enqueue("summarise", "c1", {}, tenant="t")).id == a.id  # running: still one
    await jobs.complete(claimed)
    fresh = await jobs.enqueue("summarise", "c1", {"n": 3}, tenant="t")
    assert fresh.id != a.id
    assert fresh.state == "pending"
    assert [j.key for j in await jobs.jobs(tenant="t", kind="summarise")] == ["c2", "c1"]


async def test_a_lease_holds_until_it_runs_out_then_the_job_is_taken_over(queue):
    jobs, clock = queue
    await jobs.enqueue("summarise", "c", {}, tenant="t")
    a = await jobs.claim(["summarise"], worker="a", lease=5)
    assert a is not None
    assert (a.worker, a.attempts, a.claim) == ("a", 1, 1)
    assert await jobs.claim(["summarise"], worker="b", lease=5) is None  # held
    clock.now += 4
    assert await jobs.renew(a, 5)  # the holder renews: good for 5 s from now
    clock.now += 4
    assert await jobs.claim(["summarise"], worker="b", lease=5) is None
    assert await jobs.next_due(["summarise"], worker="b", lease=5) == clock.now + 1
    clock.now += 1
    b = await jobs.claim(["summarise"], worker="b", lease=5)  # a stopped renewing: taken over
    assert b is not None
    assert (b.id, b.worker, b.attempts, b.claim) == (a.id, "b", 2, 2)
    # the old holder writes nothing any more
    assert not await jobs.renew(a, 5)
    with pytest.raises(LeaseLostError):
        await jobs.complete(a)
    with pytest.raises(LeaseLostError):
        await jobs.fail(a, "boom", retry_in=1)
    (now,) = await jobs.jobs()
    assert (now.state, now.worker, now.claim, now.error) == ("running", "b", 2, None)
    await jobs.complete(b)
    assert await jobs.jobs() == []
    assert await jobs.next_due(["summarise"], worker="b", lease=5) is None


async def test_failures_back_off_and_the_last_one_is_kept_with_its_error(queue):
    jobs, clock = queue
    job = await jobs.enqueue("summarise", "c", {"x": 1}, tenant="t", max_attempts=2)
    first = await jobs.claim(["summarise"], worker="w", lease=5)
    assert first is not None
    again = await jobs.fail(first, "StoreError: locked", retry_in=30)
    assert (again.state, again.run_after, again.error) == (
        "pending",
        clock.now + 30,
        "StoreError: locked",
    )
    assert await jobs.claim(["summarise"], worker="w", lease=5) is None  # backing off
    clock.now += 30
    second = await jobs.claim(["summarise"], worker="w", lease=5)
    assert second is not None
    assert second.attempts == 2
    final = await jobs.fail(second, "StoreError: still locked", retry_in=60)
    assert final.state == "failed"
    clock.now += 1000
    assert await jobs.claim(["summarise"], worker="w", lease=5) is None  # never run again
    (kept,) = await jobs.jobs(state="failed")
    assert (kept.id, kept.error, kept.attempts, kept.payload) == (
        job.id, "StoreError: still locked", 2, {"x": 1},
    )  # fmt: skip
    assert await jobs.active([job.id]) == set()
    # a failed job does not block new work on the same key
    assert (await jobs.enqueue("summarise", "c", {}, tenant="t")).id != job.id


async def test_a_job_whose_workers_keep_dying_ends_failed(queue):
    jobs, clock = queue
    job = await jobs.enqueue("summarise", "c", {}, tenant="t", max_attempts=2)
    for worker in ("a", "b"):
        assert await jobs.claim(["summarise"], worker=worker, lease=5) is not None
        clock.now += 6  # dies holding it
    assert await jobs.claim(["summarise"], worker="c", lease=5) is None
    (dead,) = await jobs.jobs()
    assert dead.id == job.id
    assert dead.state == "failed"
    assert "ran out 2 time(s)" in (dead.error or "")


async def test_the_enqueuing_worker_claims_first_others_a_lease_later(queue):
    jobs, clock = queue
    await jobs.enqueue("summarise", "c", {}, tenant="t", owner="a")
    assert await jobs.claim(["summarise"], worker="b", lease=5) is None
    assert await jobs.next_due(["summarise"], worker="b", lease=5) == clock.now + 5
    clock.now += 5  # the owner may have died before claiming it
    assert (await jobs.claim(["summarise"], worker="b", lease=5)).worker == "b"


async def test_bad_input_raises_a_typed_error_naming_the_field_and_writes_nothing(queue):
    jobs, _ = queue
    cases = [
        ({"kind": ""}, ConfigError, "kind"),
        ({"key": 3}, ConfigError, "key"),
        ({"tenant": ""}, ConfigError, "tenant"),
        ({"payload": ["x"]}, ConfigError, "payload"),
        ({"payload": {"f": object()}}, InvalidMessageError, "payload"),
        ({"run_after": -1}, ConfigError, "run_after"),
        ({"run_after": float("nan")}, ConfigError, "run_after"),
        ({"max_attempts": 0}, InvalidMessageError, "max_attempts"),
    ]
    for change, error, field in cases:
        kw = {"kind": "k", "key": "c", "payload": {}, "tenant": "t", **change}
        with pytest.raises(error, match=field):
            await jobs.enqueue(kw.pop("kind"), kw.pop("key"), kw.pop("payload"), **kw)
    assert await jobs.jobs() == []
    with pytest.raises(ConfigError, match="lease"):
        await jobs.claim(["k"], worker="w", lease=0)
    with pytest.raises(ConfigError, match="kinds"):
        await jobs.claim("k", worker="w", lease=1)
    with pytest.raises(ConfigError, match="state"):
        await jobs.jobs(state="done")


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
    """A job longer than its lease keeps it: another worker cannot take it meanwhile."""
    store = SQLiteStore(tmp_path / "l.db")
    jobs = SQLiteJobs(store)
    taken: list[Job | None] = []

    async def long(job: Job) -> None:
        await asyncio.sleep(1.0)  # three leases
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
