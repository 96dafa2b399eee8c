"""A worker process for tests/test_pg_jobs.py: a `JobRunner` over `PostgresJobs` on a test database.

Every job is of kind ``effect``; its handler inserts one row ``(key, pid)`` into the
table ``public.effects`` (the parent creates it), so the parent can count how often
each job's effect happened and in which process.

python pg_jobs_worker.py hold URL
    serve with a 1 s lease; the job with key ``stuck`` prints "started stuck" and never
    finishes (the parent SIGKILLs the process).
python pg_jobs_worker.py drain URL GO_FILE
    wait until GO_FILE exists, serve with a 1 s lease until the queue has no job left,
    print "done N" (N: jobs this process ran) and exit.
python pg_jobs_worker.py serve URL
    serve with the queue's wake-up and nothing due (the runner sleeps until woken);
    prints "ready" once listening, then "ran KEY" for every job it runs; runs until
    stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import psycopg

from contextwright.stores import Job
from contextwright.stores._runner import JobRunner
from contextwright.stores.postgres._jobs import PostgresJobs


class Effects:
    """Writes the effect rows over one connection of this process's own."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.lock = threading.Lock()
        self.ran = 0

    async def handler(self, job: Job) -> None:
        if job.key == "stuck" and MODE == "hold":
            print("started stuck", flush=True)
            await asyncio.Event().wait()  # never finishes
        with self.lock:
            self.conn.execute(
                "INSERT INTO public.effects (key, pid) VALUES (%s, %s)", (job.key, os.getpid())
            )
            self.ran += 1
        if MODE == "serve":
            print(f"ran {job.key}", flush=True)


async def main(mode: str, url: str, args: list[str]) -> None:
    jobs = PostgresJobs(url)
    effects = Effects(url)
    runner = JobRunner(jobs, {"effect": effects.handler}, lease=1.0, wakeup=jobs.wakeup)
    if mode == "drain":  # starts when the test says "go" on stdin: all drainers at once
        await asyncio.to_thread(sys.stdin.readline)
    runner.start()
    if mode in ("hold", "serve"):
        if mode == "serve":  # (hold's runner may print before this: it starts with work due)
            assert jobs.wakeup.wait_listening(30), "never listening"
            print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until killed, or stdin closes
    else:
        assert await runner.wait_all(timeout=60), "the queue never emptied"
        print(f"done {effects.ran}", flush=True)
    await jobs.aclose()
    runner.close(5)


if __name__ == "__main__":
    MODE, URL, *ARGS = sys.argv[1:]
    asyncio.run(main(MODE, URL, ARGS))
