"""Builds through the HTTP service against the same builds in-process (issue #21, Performance).

One SQLite file holds ``--conversations`` conversations of ``--messages`` messages
(the seeded text of ``load_service.py``), a memory of their user and a knowledge
page, all of tenant ``load``. The same builds (a new user message, ``--budget``
tokens, ``store_message=False`` so that every round sees the same data) run

* **in-process**: ``Host.build`` — the very operation the route calls, with the
  same sources and the receipt recorded — awaited one after another in this process;
* **over HTTP**: ``POST /v1/conversations/{id}/context`` to ``contextwright serve``
  (one worker, a subprocess on the same file) from one keep-alive httpx client, one
  request at a time.

Each round times ``--builds`` builds each way, the order alternating; the round's
ratio is HTTP builds/s over in-process builds/s; the table prints the median of the
ratios (goal >= 0.5: the service at most doubles a build's cost) with their spread.
Then the load of ``load_service.py`` (16 clients, mixed appends and builds,
``--load-seconds``) on copies of the file: over HTTP (2 workers) and in-process
(16 tasks on one `Host`); the builds' p50/p99 under it, beside the one-at-a-time
p50/p99 of both.

    python bench/bench_service.py                 # about 2 minutes on 2 cores
    python bench/bench_service.py --quick         # about 40 s
    python bench/bench_service.py --profile       # also: cProfile of the in-process builds
"""

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console

from _paired import Goal, goal_table, paired
from contextwright.interfaces._host import open_host
from load_service import drive, percentile, seed, serving, text

TENANT, USER = "load", "ann"
GOAL = 0.5


async def fill(db: str, conversations: int, messages: int, budget: int) -> list[str]:
    """The data set, written in-process (faster than over HTTP; the same rows)."""
    host = await open_host(db)
    rng = random.Random(11)
    ids = [f"bench-{i}" for i in range(conversations)]
    try:
        for cid in ids:
            await host.create(TENANT, cid, user=USER)
            for k in range(0, messages, 500):
                batch = [
                    {"role": ("user", "assistant")[j % 2], "content": text(rng, j)}
                    for j in range(k, min(messages, k + 500))
                ]
                await host.append(TENANT, cid, batch)
        await host.add_memory(
            TENANT, USER, "Ann handles the refund policy for the Lisbon warehouse.",
            source_message_ids=["m1"],
        )  # fmt: skip
        doc = "# Refunds\n\n" + "Refunds over 500 EUR need a supervisor's approval. " * 30
        await host.ingest(TENANT, doc, source="refunds.md")
        for cid in ids:  # compaction on first build: not part of the comparison
            await host.build(TENANT, cid, "warm up", budget=budget, store_message=False)
        await host.wait_idle()
    finally:
        await host.aclose()
    return ids


class InProcess:
    """``Host.build`` on the file, awaited one at a time."""

    def __init__(self, db: str, budget: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.host = self.loop.run_until_complete(open_host(db, budget=budget))
        self.budget = budget

    def builds(self, jobs: list[tuple[str, str]]) -> list[float]:
        async def run() -> list[float]:
            out = []
            for cid, message in jobs:
                t0 = time.perf_counter()
                await self.host.build(TENANT, cid, message, budget=self.budget, store_message=False)
                out.append(time.perf_counter() - t0)
            return out

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.run_until_complete(self.host.aclose())
        self.loop.close()


class OverHttp:
    """``POST …/context`` to the service, one keep-alive client, one request at a time."""

    def __init__(self, url: str, key: str, budget: int) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        self.budget = budget

    def builds(self, jobs: list[tuple[str, str]]) -> list[float]:
        out = []
        for cid, message in jobs:
            body = {"message": message, "budget": self.budget, "store_message": False}
            t0 = time.perf_counter()
            r = self.client.post(f"/v1/conversations/{cid}/context", json=body)
            out.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise RuntimeError(f"build answered {r.status_code}: {r.text[:300]}")
        return out

    def close(self) -> None:
        self.client.close()


async def inproc_load(
    db: str, ids: list[str], *, seconds: float, warmup: float, budget: int
) -> dict[str, list[float]]:
    """The load of ``load_service.drive`` in this process: 16 tasks on one `Host`."""
    host = await open_host(db, budget=budget)
    times: dict[str, list[float]] = {"append": [], "build": []}
    t0 = time.monotonic()

    async def task(n: int) -> None:
        rng = random.Random(1000 + n)
        i = 0
        while time.monotonic() - t0 < seconds:
            i += 1
            cid = rng.choice(ids)
            start = time.monotonic()
            if rng.random() < 0.5:
                op = "append"
                item = {"role": "assistant", "content": text(rng, i), "id": f"p{n}-{i}"}
                await host.append(TENANT, cid, [item])
            else:
                op = "build"
                await host.build(TENANT, cid, text(rng, i), budget=budget)
            if start - t0 >= warmup:
                times[op].append(time.monotonic() - start)

    try:
        await asyncio.gather(*[task(n) for n in range(16)])
    finally:
        await host.aclose()
    return times


def ms(values: list[float], q: float) -> float:
    return percentile(values, q) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--budget", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--builds", type=int, default=40, help="per side per round")
    p.add_argument("--load-seconds", type=float, default=40.0)
    p.add_argument("--quick", action="store_true", help="fewer rounds, a shorter load")
    p.add_argument("--profile", action="store_true", help="cProfile of in-process builds")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.builds, args.load_seconds = 5, 20, 12.0
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="cw-bench-service-"))
    db = str(root / "bench.db")
    t_start = time.monotonic()
    ids = asyncio.run(fill(db, args.conversations, args.messages, args.budget))
    rng = random.Random(5)
    questions = [text(rng, 10_000 + i) + " What was agreed?" for i in range(64)]

    def jobs(n: int, r: int) -> list[tuple[str, str]]:
        return [
            (ids[(r + i) % len(ids)], questions[(r * 7 + i) % len(questions)]) for i in range(n)
        ]

    inproc_rates: list[float] = []
    http_rates: list[float] = []
    inproc_times: list[float] = []
    http_times: list[float] = []
    with serving(workers=1, budget=args.budget, db=db) as service:
        local = InProcess(db, args.budget)
        remote = OverHttp(service.url, service.key, args.budget)
        try:
            local.builds(jobs(10, 0))  # warm both: caches, connections
            remote.builds(jobs(10, 0))
            for r in range(args.rounds):
                sides = [("in", local), ("http", remote)]
                for name, side in sides if r % 2 == 0 else sides[::-1]:
                    times = side.builds(jobs(args.builds, r))
                    rate = len(times) / sum(times)
                    (inproc_rates if name == "in" else http_rates).append(rate)
                    (inproc_times if name == "in" else http_times).extend(times)
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                local.builds(jobs(100, 1))
                prof.disable()
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
                print(buf.getvalue())
        finally:
            remote.close()
            local.close()
    goal = Goal(
        "builds/s over HTTP vs in-process", GOAL, paired(http_rates, inproc_rates),
        unit="builds/s", note="same Host.build, same file; one request at a time",
    )  # fmt: skip
    goal_table(console, "The service's cost per build (ratio = HTTP / in-process)", [goal],
               "medians (HTTP / in-process)")  # fmt: skip

    load_db = str(root / "load.db")
    shutil.copy(db, load_db)
    with serving(workers=2, budget=args.budget, db=load_db) as service:
        more = seed(service.url, service.key, 4, 200, random.Random(3))
        load = asyncio.run(drive(
            service, ids + more, clients=16, seconds=args.load_seconds,
            warmup=args.load_seconds / 4, budget=args.budget, append_share=0.5,
        ))  # fmt: skip
    under = [t / 1000 for t in load.latencies["build"]]
    local_db = str(root / "local.db")
    shutil.copy(db, local_db)
    local_load = asyncio.run(inproc_load(
        local_db, ids, seconds=args.load_seconds, warmup=args.load_seconds / 4,
        budget=args.budget,
    ))  # fmt: skip
    print("\nbuild latency (ms)                 p50      p99     n")
    for label, values in (
        ("in-process, one at a time", inproc_times),
        ("HTTP, one at a time", http_times),
        ("in-process under the load", local_load["build"]),
        (f"HTTP under the load ({load.errors} errors)", under),
    ):
        print(f"{label:<32} {ms(values, 0.5):7.2f} {ms(values, 0.99):8.2f} {len(values):5d}")
    print(
        f"\none at a time: in-process {statistics.median(inproc_rates):.0f} builds/s, "
        f"HTTP {statistics.median(http_rates):.0f} builds/s (medians of the rounds)"
    )
    print(
        f"the load: {args.load_seconds:g} s (a quarter warm-up), 16 clients of mixed appends "
        f"and builds; HTTP: 2 workers, {len(under)} builds and "
        f"{len(load.latencies['append'])} appends measured, {load.errors} errors; in-process: "
        f"16 tasks on one Host, {len(local_load['build'])} builds and "
        f"{len(local_load['append'])} appends measured"
    )
    print(f"data: {args.conversations} conversations x {args.messages} messages, budget "
          f"{args.budget}; run time {time.monotonic() - t_start:.0f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)
    return 0 if goal.verdict == "PASS" and load.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
