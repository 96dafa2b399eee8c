"""The PostgreSQL job queue across processes: a killed worker's job taken over, many
claimers with SKIP LOCKED, and the LISTEN/NOTIFY wake-up (also after a lost connection).

The queue's own rules are `JobsContract` (tests/contract, `TestPostgresJobs`). Here the
workers are real processes (tests/pg_jobs_worker.py) on a real PostgreSQL (`pg_url`),
killed with SIGKILL, not asked to stop; every wait is on a signal (a line printed, a
row written), with a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright._errors import ConfigError, InvalidMessageError
from contextwright.model._checks import unicode_problem
from contextwright.stores import Job, MemoryJobs
from contextwright.stores._runner import JobRunner
from contextwright.stores.postgres._connect import open_async_pool
from contextwright.stores.postgres._jobs import PostgresJobs
from contextwright.stores.postgres._migrations import migrate_url
from contextwright.stores.postgres._wakeup import PostgresWakeup

WORKER = Path(__file__).with_name("pg_jobs_worker.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip


def _go(proc: subprocess.Popen[str]) -> None:
    """Tell a ``drain`` worker to start."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def _line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The next line ``proc`` prints, waiting at most ``timeout`` s (its stderr if it died)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            raise AssertionError(f"no line within {timeout} s; stderr: {proc.communicate()[1]}")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"worker exited {proc.wait()}: {proc.communicate()[1]}")
    return line.strip()


def _prepare(url: str) -> PostgresJobs:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.effects (key text NOT NULL, pid int NOT NULL)")
    return PostgresJobs(url)


def _effects(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [(k, p) for k, p in conn.execute("SELECT key, pid FROM public.effects")]


def test_a_job_held_by_a_killed_worker_is_taken_over_after_its_lease_and_done_once(
    pg_url, tmp_path
):
    jobs = _prepare(pg_url)

    async def enqueue() -> None:
        for key in ("a", "b", "stuck"):
            await jobs.enqueue("effect", key, {}, tenant="t")
        await jobs.aclose()

    asyncio.run(enqueue())
    a = _spawn("hold", pg_url)
    try:
        assert _line(a, 30) == "started stuck"  # A ran a and b, and is inside stuck's handler
    finally:
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=10)
    assert a.returncode == -signal.SIGKILL
    assert sorted(_effects(pg_url)) == [("a", a.pid), ("b", a.pid)]
    (held,) = asyncio.run(_listed(pg_url))
    assert (held.key, held.state, held.attempts, held.claim) == ("stuck", "running", 1, 1)
    assert held.worker is not None
    assert f":{a.pid}:" in held.worker
    # B takes it over once A's 1 s lease has run out, and finishes it
    b = _spawn("drain", pg_url)
    try:
        _go(b)
        assert _line(b, 60) == "done 1"
    finally:
        b.kill()
        b.communicate(timeout=10)
    effects = _effects(pg_url)
    assert Counter(k for k, _ in effects) == {"a": 1, "b": 1, "stuck": 1}  # each effect once
    assert ("stuck", b.pid) in effects
    assert asyncio.run(_listed(pg_url)) == []  # completed jobs leave the queue


async def _listed(url: str) -> list[Job]:
    jobs = PostgresJobs(url)
    try:
        return await jobs.jobs()
    finally:
        await jobs.aclose()


def test_three_processes_claim_two_hundred_jobs_each_done_exactly_once(pg_url, tmp_path):
    jobs = _prepare(pg_url)
    keys = [f"k{i:03d}" for i in range(200)]

    async def enqueue() -> None:
        for key in keys:
            await jobs.enqueue("effect", key, {"n": key}, tenant="t")
        await jobs.aclose()

    asyncio.run(enqueue())
    procs = [_spawn("drain", pg_url) for _ in range(3)]
    started = time.monotonic()
    for p in procs:
        _go(p)
    try:
        done = [int(_line(p, 60).split()[1]) for p in procs]
    finally:
        for p in procs:
            p.kill()
            assert "Traceback" not in p.communicate(timeout=10)[1]
    elapsed = time.monotonic() - started
    effects = _effects(pg_url)
    counts = Counter(k for k, _ in effects)
    assert sorted(counts) == keys
    assert set(counts.values()) == {1}, [k for k, n in counts.items() if n > 1]  # no double claim
    assert sum(done) == 200
    by_pid = Counter(p for _, p in effects)
    assert sorted(by_pid.values()) == sorted(done)
    assert asyncio.run(_listed(pg_url)) == []
    print(f"\n3 claimers, 200 jobs: {elapsed:.2f} s (incl. start-up), split {sorted(done)}")


def test_an_idle_runner_in_another_process_is_woken_by_an_enqueue(pg_url):
    jobs = _prepare(pg_url)
    a = _spawn("serve", pg_url)
    try:
        assert _line(a, 30) == "ready"  # A's runner: nothing due, asleep until woken
        latencies = []
        for key in ("w1", "w2", "w3"):
            sent = time.monotonic()
            jobs.enqueue_now("effect", key, {}, tenant="t")  # committed: NOTIFY sent
            assert _line(a, 10) == f"ran {key}"
            latencies.append(time.monotonic() - sent)
        # without the wake-up A would never look again (nothing is due): see the control below
        assert max(latencies) < 2.0, latencies
        print(
            f"\nwake-up latency (enqueue -> handler ran in A): {[f'{x * 1000:.0f} ms' for x in latencies]}"
        )
    finally:
        a.kill()
        a.communicate(timeout=10)


def test_without_a_wakeup_an_idle_runner_does_not_see_another_workers_job(pg_url):
    """The control for the test above: the signal, not a poll, is what runs the job."""
    seen = threading.Event()

    async def handler(job: Job) -> None:
        seen.set()

    async def main() -> None:
        mine, theirs = PostgresJobs(pg_url), PostgresJobs(pg_url)
        runner = JobRunner(mine, {"effect": handler}, lease=1.0)  # no wakeup
        runner.start()
        assert await asyncio.to_thread(runner._idle.wait, 10)  # nothing due: asleep, no deadline
        await theirs.enqueue("effect", "x", {}, tenant="t")
        assert not await asyncio.to_thread(seen.wait, 1.0)
        runner._wake()  # what the wake-up would have done
        assert await asyncio.to_thread(seen.wait, 10.0)
        await theirs.aclose()
        await mine.aclose()
        runner.close(5)

    asyncio.run(main())


def test_a_serving_runner_listens_and_stops_listening_when_closed(pg_url):
    ran = threading.Event()

    async def handler(job: Job) -> None:
        ran.set()

    async def main() -> None:
        mine, theirs = PostgresJobs(pg_url), PostgresJobs(pg_url)
        runner = JobRunner(mine, {"effect": handler}, lease=1.0, wakeup=mine.wakeup)
        runner.start()
        assert await asyncio.to_thread(runner._idle.wait, 10)
        assert await asyncio.to_thread(mine.wakeup.wait_listening, 10)
        await theirs.enqueue("effect", "x", {}, tenant="t")  # another queue: woken by NOTIFY
        assert await asyncio.to_thread(ran.wait, 10)
        await theirs.aclose()
        runner.close(5)
        assert mine.wakeup._thread is None  # close stopped the listener
        await mine.aclose()

    asyncio.run(main())


def test_the_listener_reconnects_after_its_connection_is_killed(pg_url):
    wakeup = PostgresWakeup(pg_url)
    woken = threading.Event()
    stop = wakeup.listen(woken.set)
    try:
        assert wakeup.wait_listening(10)
        wakeup.notify_now()
        assert woken.wait(10)
        woken.clear()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (killed,) = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed == 1
        assert woken.wait(10)  # after a reconnect the callbacks run once (signals were lost)
        assert wakeup.reconnects == 1
        woken.clear()
        assert wakeup.wait_listening(10)
        wakeup.notify_now()
        assert woken.wait(10)
    finally:
        stop()
    assert wakeup._thread is None


def test_a_wakeup_that_cannot_connect_never_raises(tmp_path):
    wakeup = PostgresWakeup(f"postgresql://nobody@/none?host={tmp_path}", connect_timeout=1)
    wakeup.notify_now()  # nothing to connect to: logged, not raised
    asyncio.run(wakeup.notify())
    stop = wakeup.listen(lambda: None)
    assert not wakeup.wait_listening(0.3)
    stop()  # the thread stops though it never connected
    assert wakeup._thread is None


class Counting:
    def __init__(self) -> None:
        self.notified = 0

    async def notify(self) -> None:
        self.notified += 1

    def listen(self, callback: Any) -> Any:
        return lambda: None


async def test_the_runner_notifies_unless_the_queue_does_it_itself():
    async def handler(job: Job) -> None:
        pass

    wakeup = Counting()
    runner = JobRunner(MemoryJobs(), {"effect": handler}, inline=True, wakeup=wakeup)
    await runner.enqueue("effect", "a", {}, tenant="t")
    runner.enqueue_now("effect", "b", {}, tenant="t")
    assert wakeup.notified == 2
    queue = MemoryJobs()
    queue.wakeup = wakeup  # type: ignore[attr-defined]  # a queue that signals its own enqueues
    runner = JobRunner(queue, {"effect": handler}, inline=True, wakeup=wakeup)
    await runner.enqueue("effect", "a", {}, tenant="t")
    assert wakeup.notified == 2


async def test_given_a_pool_the_queue_uses_it_and_leaves_it_open(pg_url):
    migrate_url(pg_url)  # the pool's owner migrates (the conversation backend does)
    pool = await open_async_pool(pg_url)
    try:
        jobs = PostgresJobs(pool)
        job = await jobs.enqueue("effect", "a", {"x": 1}, tenant="t")
        again = jobs.enqueue_now("effect", "a", {}, tenant="t")  # its own short connection
        assert again == job
        held = await jobs.claim(["effect"], worker="w", lease=5)
        assert held is not None
        await jobs.complete(held)
        await jobs.aclose()
        assert not pool.closed
        async with pool.connection() as conn:
            assert await (await conn.execute("SELECT count(*) FROM jobs")).fetchone() == (0,)
    finally:
        await pool.close()


def test_postgres_jobs_refuses_what_is_not_a_url_or_a_pool():
    with pytest.raises(ConfigError, match="url_or_pool"):
        PostgresJobs(42)
    with pytest.raises(ConfigError, match="db"):
        PostgresJobs("sqlite:///x.db")


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def test_payloads_and_names_read_back_as_written(pg_url):
    """Whatever JSON the queue accepts (NUL characters, any key order) reads back equal; a
    payload standard JSON cannot hold (NaN, infinity) and a name PostgreSQL cannot store (a
    NUL in it) are refused naming the field, nothing written."""
    loop = asyncio.new_event_loop()
    jobs = PostgresJobs(pg_url)
    numbers = itertools.count()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(payload=st.dictionaries(st.text(max_size=8), JSON, max_size=5), name=st.text(min_size=1))
    def roundtrip(payload: dict[str, Any], name: str) -> None:
        if unicode_problem(name) is not None:
            return
        key, tenant = f"{next(numbers)}{name}", f"t{name}"
        if "\x00" in name:
            with pytest.raises(ConfigError, match="key"):
                loop.run_until_complete(jobs.enqueue("effect", key, payload, tenant="t"))
            with pytest.raises(ConfigError, match="tenant"):
                loop.run_until_complete(jobs.enqueue("effect", "k", payload, tenant=tenant))
            assert loop.run_until_complete(jobs.jobs(tenant=tenant)) == []
            return
        job = loop.run_until_complete(jobs.enqueue("effect", key, payload, tenant=tenant))
        stored = [j for j in loop.run_until_complete(jobs.jobs(tenant=tenant)) if j.id == job.id]
        assert stored == [job]
        assert (job.key, job.tenant, job.payload) == (key, tenant, payload)

    try:
        roundtrip()
        for bad in (float("nan"), float("inf")):
            with pytest.raises(InvalidMessageError) as err:
                loop.run_until_complete(jobs.enqueue("odd", "odd", {"x": [bad]}, tenant="u"))
            assert err.value.where == "payload['x'][0]"
        assert loop.run_until_complete(jobs.jobs(tenant="u")) == []
        odd = {"big": 1e300, "nul": "a\x00b", "z": 1, "a": 2}
        job = loop.run_until_complete(jobs.enqueue("odd", "odd", odd, tenant="u"))
        (back,) = loop.run_until_complete(jobs.jobs(tenant="u"))
        assert back.payload["big"] == 1e300
        assert (back.payload["nul"], list(back.payload)) == ("a\x00b", ["a", "big", "nul", "z"])
        held = loop.run_until_complete(jobs.claim(["odd"], worker="w", lease=5))
        assert held is not None
        assert held.id == job.id
        with pytest.raises(ConfigError, match="worker"):
            loop.run_until_complete(jobs.claim(["odd"], worker="w\x00", lease=5))
        failed = loop.run_until_complete(jobs.fail(held, "bad\x00byte", retry_in=0))
        assert failed.error == "bad\ufffdbyte"  # a NUL in a message is shown, not refused
    finally:
        loop.run_until_complete(jobs.aclose())
        loop.close()
