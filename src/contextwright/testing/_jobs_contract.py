"""`JobsContract`: the rules every durable job queue (`Jobs`) must keep, as test methods.

A queue's test module subclasses it and says how to open the queue::

    class TestMyJobs(JobsContract):
        def open_jobs(self, directory, clock):
            return MyJobs(directory / "db", clock=clock)

Each test opens a fresh queue whose ``clock`` is a `ManualClock` (leases and
retries are tested by moving it, never by sleeping) and closes it with
`close_jobs`. What the suite pins down: one pending or running job per
(tenant, kind, key); a lease holds until it runs out and is then taken over; the
``claim`` number fences the old holder out (no renew, complete or fail); failures
back off and the last one is kept, state ``failed``, with its error; a job whose
workers keep dying ends ``failed``; the enqueuing worker claims first and others
a lease later; bad input raises a typed error naming the field, with nothing
written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .._errors import ConfigError, InvalidMessageError, LeaseLostError
from ..stores._jobs import Jobs
from ._support import ManualClock, Suite, raises, scenario

__all__ = ["JobsContract"]

K = "summarise"


class JobsContract(Suite[Jobs]):
    """The queue rules as test methods; subclass and define `open_jobs` (module docstring)."""

    def open_jobs(self, directory: Path, clock: Callable[[], float]) -> Jobs:
        """A fresh, empty queue keeping its files (if any) under ``directory``, on ``clock``."""
        raise NotImplementedError

    async def close_jobs(self, jobs: Jobs) -> None:
        """Close the queue (default: nothing to close)."""

    def open(self, directory: Path, clock: Callable[[], float]) -> Jobs:
        return self.open_jobs(directory, clock)

    async def close(self, subject: Jobs) -> None:
        await self.close_jobs(subject)

    @scenario
    async def test_the_queue_is_a_jobs(self, jobs: Jobs, clock: ManualClock) -> None:
        assert isinstance(jobs, Jobs)
        assert await jobs.jobs() == []
        assert await jobs.claim([K], worker="w", lease=1) is None
        assert await jobs.next_due([K], worker="w", lease=1) is None

    @scenario
    async def test_enqueue_is_idempotent_per_tenant_kind_and_key_while_active(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        a = await jobs.enqueue(K, "c1", {"n": 1}, tenant="t")
        assert (a.state, a.attempts, a.claim, a.run_after) == ("pending", 0, 0, clock())
        again = await jobs.enqueue(K, "c1", {"n": 2}, tenant="t")
        assert again.id == a.id
        assert again.payload == {"n": 1}
        other = [
            await jobs.enqueue(K, "c1", {}, tenant="t2"),
            await jobs.enqueue("memory", "c1", {}, tenant="t"),
            await jobs.enqueue(K, "c2", {}, tenant="t"),
        ]
        assert len({a.id, *(j.id for j in other)}) == 4
        claimed = await jobs.claim([K], worker="w", lease=10)
        assert claimed is not None
        assert claimed.id == a.id
        assert (await jobs.enqueue(K, "c1", {}, tenant="t")).id == a.id  # running: still one
        await jobs.complete(claimed)
        fresh = await jobs.enqueue(K, "c1", {"n": 3}, tenant="t")
        assert fresh.id != a.id
        assert fresh.state == "pending"
        assert [j.key for j in await jobs.jobs(tenant="t", kind=K)] == ["c2", "c1"]
        assert await jobs.active([a.id, fresh.id, other[0].id]) == {fresh.id, other[0].id}

    @scenario
    async def test_a_lease_holds_until_it_runs_out_then_the_job_is_taken_over(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        await jobs.enqueue(K, "c", {}, tenant="t")
        a = await jobs.claim([K], worker="a", lease=5)
        assert a is not None
        assert (a.worker, a.attempts, a.claim) == ("a", 1, 1)
        assert await jobs.claim([K], worker="b", lease=5) is None  # held
        clock.advance(4)
        assert await jobs.renew(a, 5)  # the holder renews: good for 5 s from now
        clock.advance(4)
        assert await jobs.claim([K], worker="b", lease=5) is None
        assert await jobs.next_due([K], worker="b", lease=5) == clock() + 1
        clock.advance(1)
        b = await jobs.claim([K], worker="b", lease=5)  # a stopped renewing: taken over
        assert b is not None
        assert (b.id, b.worker, b.attempts, b.claim) == (a.id, "b", 2, 2)
        # fencing: the old holder writes nothing any more
        assert not await jobs.renew(a, 5)
        with raises(LeaseLostError):
            await jobs.complete(a)
        with raises(LeaseLostError):
            await jobs.fail(a, "boom", retry_in=1)
        (now,) = await jobs.jobs()
        assert (now.state, now.worker, now.claim, now.error) == ("running", "b", 2, None)
        await jobs.complete(b)
        assert await jobs.jobs() == []
        assert await jobs.next_due([K], worker="b", lease=5) is None

    @scenario
    async def test_failures_back_off_and_the_last_one_is_kept_with_its_error(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        job = await jobs.enqueue(K, "c", {"x": 1}, tenant="t", max_attempts=2)
        first = await jobs.claim([K], worker="w", lease=5)
        assert first is not None
        again = await jobs.fail(first, "StoreError: locked", retry_in=30)
        assert (again.state, again.run_after, again.error) == (
            "pending", clock() + 30, "StoreError: locked",
        )  # fmt: skip
        assert await jobs.claim([K], worker="w", lease=5) is None  # backing off
        clock.advance(30)
        second = await jobs.claim([K], worker="w", lease=5)
        assert second is not None
        assert second.attempts == 2
        final = await jobs.fail(second, "StoreError: still locked", retry_in=60)
        assert final.state == "failed"
        clock.advance(1000)
        assert await jobs.claim([K], worker="w", lease=5) is None  # never run again
        assert await jobs.next_due([K], worker="w", lease=5) is None
        (kept,) = await jobs.jobs(state="failed")
        assert (kept.id, kept.error, kept.attempts, kept.payload) == (
            job.id, "StoreError: still locked", 2, {"x": 1},
        )  # fmt: skip
        assert await jobs.active([job.id]) == set()
        # a failed job does not block new work on the same key, and stays listed
        assert (await jobs.enqueue(K, "c", {}, tenant="t")).id != job.id
        assert [j.state for j in await jobs.jobs(kind=K)] == ["failed", "pending"]

    @scenario
    async def test_a_job_whose_workers_keep_dying_ends_failed(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        job = await jobs.enqueue(K, "c", {}, tenant="t", max_attempts=2)
        for worker in ("a", "b"):
            assert await jobs.claim([K], worker=worker, lease=5) is not None
            clock.advance(6)  # dies holding it
        assert await jobs.claim([K], worker="c", lease=5) is None
        (dead,) = await jobs.jobs()
        assert dead.id == job.id
        assert dead.state == "failed"
        assert "ran out 2 time(s)" in (dead.error or "")

    @scenario
    async def test_the_enqueuing_worker_claims_first_others_a_lease_later(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        await jobs.enqueue(K, "c", {}, tenant="t", owner="a")
        assert await jobs.claim([K], worker="b", lease=5) is None
        assert await jobs.next_due([K], worker="b", lease=5) == clock() + 5
        assert await jobs.next_due([K], worker="a", lease=5) == clock()
        clock.advance(5)  # the owner may have died before claiming it
        taken = await jobs.claim([K], worker="b", lease=5)
        assert taken is not None
        assert taken.worker == "b"

    @scenario
    async def test_claims_take_the_oldest_due_job_of_the_kinds_asked(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        later = await jobs.enqueue(K, "later", {}, tenant="t", run_after=10)
        first = await jobs.enqueue(K, "first", {}, tenant="t")
        second = await jobs.enqueue(K, "second", {}, tenant="u")
        await jobs.enqueue("other", "x", {}, tenant="t")
        order = []
        for _ in range(3):
            job = await jobs.claim([K], worker="w", lease=60)
            if job is not None:
                order.append(job.id)
        assert order == [first.id, second.id]  # "later" is not due, "other" not asked
        clock.advance(10)
        job = await jobs.claim([K, "nothing"], worker="w", lease=60)
        assert job is not None
        assert job.id == later.id

    @scenario
    async def test_bad_input_raises_a_typed_error_naming_the_field_and_writes_nothing(
        self, jobs: Jobs, clock: ManualClock
    ) -> None:
        cases: list[tuple[dict[str, object], type[Exception], str]] = [
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
            kw: dict[str, object] = {"kind": K, "key": "c", "payload": {}, "tenant": "t", **change}
            with raises(error, field):
                await jobs.enqueue(kw.pop("kind"), kw.pop("key"), kw.pop("payload"), **kw)  # type: ignore[arg-type]
        assert await jobs.jobs() == []
        with raises(ConfigError, "lease"):
            await jobs.claim([K], worker="w", lease=0)
        with raises(ConfigError, "kinds"):
            await jobs.claim(K, worker="w", lease=1)
        with raises(ConfigError, "worker"):
            await jobs.claim([K], worker="", lease=1)
        with raises(ConfigError, "state"):
            await jobs.jobs(state="done")
        job = await jobs.enqueue(K, "c", {}, tenant="t")
        held = await jobs.claim([K], worker="w", lease=5)
        assert held is not None
        with raises(ConfigError, "retry_in"):
            await jobs.fail(held, "x", retry_in=-1)
        with raises(ConfigError, "error"):
            await jobs.fail(held, 5, retry_in=1)  # type: ignore[arg-type]
        (still,) = await jobs.jobs()
        assert (still.id, still.state, still.error) == (job.id, "running", None)
