"""A bounded load test of ``contextwright serve`` on loopback (issue #21, Tests).

``contextwright serve --workers 2`` runs as a subprocess on an SQLite file with one
tenant key (made by ``contextwright keys create``). ``--conversations`` conversations
are seeded with ``--messages`` messages each through the API; then ``--clients``
concurrent clients (httpx async, one connection each) run a mixed load for
``--seconds``: each operation picks a conversation at random and either appends a
message (``--append-share`` of the time; a client message id, as a retrying client
sends it) or builds a context for a new user message with ``--budget`` (which stores
it), as an agent's turn does. A client runs one request at a time, so at most
``--clients`` requests are in flight, and opens a new connection every 20 requests
(the workers share one listening socket: connections held for the whole run could
all land on one worker; each worker's CPU time is reported).

Before the run, builds on new connections reach every worker once (`prime`: a
worker loads the engine on its first build). Reported: operations and errors (any answer but 2xx, or a transport error; the first
few are printed), throughput, p50/p99 latency per operation (after the warm-up), and
the resident memory (VmRSS of ``/proc/<pid>/status``) of each worker process, sampled
every 0.5 s: at the end of the warm-up (``--warmup`` seconds, default a quarter of the
run) against the end of the run. The warm-up is for the workers' bounded caches to
fill (token counts: 8 MiB; outlines of recalled turns: 8 MiB; conversation tails):
RSS rises while they fill, then stays flat; a leak keeps rising. Goals: 0 errors, every worker's RSS grows at most
``--max-growth`` (10 %) after the warm-up. Exit status 1 if a goal is missed.

    python bench/load_service.py                   # 2 minutes, 16 clients, 2 workers
    python bench/load_service.py --seconds 10      # the short version the tests run
    python bench/load_service.py --json            # one JSON line at the end too

`drive` and `Service` are also used by ``bench_service.py``.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TOPICS = (
    "refund policy", "shipping notes", "invoice 4471", "the Lisbon warehouse", "courier delays",
    "plan upgrade", "billing region", "tracking label", "the quarterly review", "escalation",
)  # fmt: skip
RECONNECT = 20  # requests per connection
VERBS = ("asked about", "confirmed", "disputed", "needs an update on", "resolved")


def text(rng: random.Random, i: int) -> str:
    """A plausible message: a topic, a verb, numbers (so search and summaries have work)."""
    a, b = rng.choice(TOPICS), rng.choice(TOPICS)
    n = rng.randint(10, 99_999)
    return (
        f"Turn {i}: the customer {rng.choice(VERBS)} {a}; order {n} is tied to {b}. "
        f"Amount {n % 977}.{n % 100:02d} EUR, week {i % 52 + 1}."
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "contextwright", *args],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    return out.stdout


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` that are uvicorn workers (not the resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and "resource_tracker" not in cmd:
            found.append(int(entry.name))
    return sorted(found)


@dataclass
class Service:
    """``contextwright serve`` as a subprocess: its URL, key and worker pids."""

    url: str
    key: str
    proc: subprocess.Popen[bytes]
    workers: list[int]
    db: str
    log: Path


@contextmanager
def serving(
    workers: int = 2, budget: int = 2000, db: str | None = None, extra: tuple[str, ...] = ()
) -> Iterator[Service]:
    """Start ``contextwright serve`` on a free port of 127.0.0.1 with a fresh key."""
    root = Path(tempfile.mkdtemp(prefix="cw-load-"))
    db = db or str(root / "service.db")
    src = Path(__file__).resolve().parents[1] / "src"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    key = cli("keys", "create", "--tenant", "load", "--db", db, env=env).strip().splitlines()[-1]
    port = free_port()
    log = root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "contextwright", "serve", "--db", db, "--port", str(port),
             "--workers", str(workers), "--budget", str(budget), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError("serve exited:\n" + log.read_text()[-3000:])
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not answer /healthz:\n" + log.read_text()[-3000:])
            time.sleep(0.1)
        pids = children(proc.pid) if workers > 1 else [proc.pid]
        while workers > 1 and len(pids) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = children(proc.pid)
        yield Service(url, key, proc, pids, db, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def seed(url: str, key: str, conversations: int, messages: int, rng: random.Random) -> list[str]:
    """``conversations`` conversations of ``messages`` alternating user/assistant messages."""
    ids = [f"load-{i}" for i in range(conversations)]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for cid in ids:
            batch = [
                {"role": ("user", "assistant")[j % 2], "content": text(rng, j)}
                for j in range(messages)
            ]
            for k in range(0, len(batch), 200):
                r = c.post(
                    f"/v1/conversations/{cid}/messages", json={"messages": batch[k : k + 200]}
                )
                r.raise_for_status()
    return ids


def prime(service: Service, ids: list[str], budget: int, tries: int = 400) -> int:
    """Build on new connections until every worker has spent 0.2 CPU s on them (a
    worker loads the engine and its stores on first use); the requests made."""
    start = {pid: cpu_seconds(pid) for pid in service.workers}
    headers = {"Authorization": f"Bearer {service.key}", "Connection": "close"}
    body = {"message": "warm up", "budget": budget, "store_message": False}
    with httpx.Client(base_url=service.url, headers=headers, timeout=60) as c:
        for n in range(1, tries + 1):
            c.post(f"/v1/conversations/{ids[n % len(ids)]}/context", json=body).raise_for_status()
            if all(cpu_seconds(pid) - start[pid] > 0.2 for pid in service.workers):
                return n
    return tries


@dataclass
class Load:
    """What `drive` measured: latencies (ms) per operation after the warm-up, errors, RSS."""

    seconds: float
    warmup: float
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"append": [], "build": []})
    ops: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    rss: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)  # CPU seconds of each worker

    def rss_at(self, pid: int, t: float) -> int:
        """The last sample at or before ``t`` seconds into the run."""
        before = [kib for at, kib in self.rss[pid] if at <= t]
        return before[-1] if before else self.rss[pid][0][1]

    def growth(self) -> dict[int, tuple[int, int, float]]:
        """Per worker: RSS at the end of the warm-up, at the end, growth ratio."""
        out = {}
        for pid, samples in self.rss.items():
            warm, end = self.rss_at(pid, self.warmup), samples[-1][1]
            out[pid] = (warm, end, end / warm - 1 if warm else 0.0)
        return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def sample_rss(pids: list[int], load: Load, t0: float, stop: threading.Event) -> None:
    for pid in pids:
        load.rss[pid] = [(0.0, rss_kib(pid))]
    while not stop.wait(0.5):
        now = time.monotonic() - t0
        for pid in pids:
            load.rss[pid].append((now, rss_kib(pid)))
    now = time.monotonic() - t0
    for pid in pids:
        load.rss[pid].append((now, rss_kib(pid)))


async def client_loop(
    n: int, url: str, key: str, ids: list[str], load: Load, until: float, t0: float,
    budget: int, append_share: float, seed_: int,
) -> None:  # fmt: skip
    rng = random.Random(seed_ * 1000 + n)
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as c:
        i = 0
        while time.monotonic() < until:
            i += 1
            cid = rng.choice(ids)
            if rng.random() < append_share:
                op = "append"
                body: dict[str, Any] = {"messages": [
                    {"role": "assistant", "content": text(rng, i), "id": f"c{n}-{i}"}]}  # fmt: skip
                path = f"/v1/conversations/{cid}/messages"
            else:
                op = "build"
                body = {"message": text(rng, i), "budget": budget}
                path = f"/v1/conversations/{cid}/context"
            start = time.monotonic()
            try:
                # a new connection now and then, as clients behind a balancer make:
                # the workers share one listening socket, and 16 connections kept
                # for the whole run may all land on one worker
                close = {"Connection": "close"} if i % RECONNECT == 0 else None
                r = await c.post(path, json=body, headers=close)
                ok, what = r.is_success, f"{op} {r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                ok, what = False, f"{op} {type(exc).__name__}: {exc}"
            end = time.monotonic()
            load.ops += 1
            if not ok:
                load.errors += 1
                if len(load.error_samples) < 5:
                    load.error_samples.append(what)
            elif start - t0 >= load.warmup:
                load.latencies[op].append((end - start) * 1000)


async def drive(
    service: Service, ids: list[str], *, clients: int, seconds: float, warmup: float,
    budget: int, append_share: float, seed_: int = 1,
) -> Load:  # fmt: skip
    """Run the mixed load for ``seconds``; sample every worker's RSS meanwhile."""
    load = Load(seconds, warmup)
    stop = threading.Event()
    t0 = time.monotonic()
    sampler = threading.Thread(
        target=sample_rss, args=(service.workers, load, t0, stop), daemon=True
    )
    sampler.start()
    cpu0 = {pid: cpu_seconds(pid) for pid in service.workers}
    until = t0 + seconds
    await asyncio.gather(*[
        client_loop(n, service.url, service.key, ids, load, until, t0, budget, append_share, seed_)
        for n in range(clients)
    ])  # fmt: skip
    stop.set()
    sampler.join()
    load.cpu = {pid: cpu_seconds(pid) - cpu0[pid] for pid in service.workers}
    return load


def report(load: Load, max_growth: float, args: argparse.Namespace) -> dict[str, Any]:
    measured = load.seconds - load.warmup
    out: dict[str, Any] = {
        "seconds": load.seconds, "warmup": load.warmup, "clients": args.clients,
        "workers": args.workers, "ops": load.ops, "errors": load.errors,
        "error_samples": load.error_samples, "latency_ms": {}, "rss": {},
    }  # fmt: skip
    print(f"{args.clients} clients, {args.workers} workers, {load.seconds:g} s "
          f"(warm-up {load.warmup:g} s), {args.conversations} conversations, budget {args.budget}")  # fmt: skip
    print(f"operations: {load.ops}, errors: {load.errors}")
    for sample in load.error_samples:
        print(f"  error: {sample}")
    for op, values in load.latencies.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        rate = len(values) / measured if measured > 0 else 0.0
        out["latency_ms"][op] = {"n": len(values), "per_s": rate, "p50": p50, "p99": p99}
        print(f"{op:>6}: {len(values):6d} after warm-up, {rate:6.1f}/s, "
              f"p50 {p50:7.1f} ms, p99 {p99:7.1f} ms")  # fmt: skip
    worst = 0.0
    for pid, (warm, end, g) in load.growth().items():
        worst = max(worst, g)
        cpu = load.cpu.get(pid, 0.0)
        out["rss"][str(pid)] = {"warm_kib": warm, "end_kib": end, "growth": g, "cpu_s": cpu}
        print(f"worker {pid}: {cpu:.1f} CPU s; RSS {warm / 1024:.1f} MiB after warm-up -> "
              f"{end / 1024:.1f} MiB at the end ({g:+.1%})")  # fmt: skip
        tenths = [load.rss_at(pid, load.seconds * k / 10) / 1024 for k in range(11)]
        print("  by tenths of the run (MiB): " + " ".join(f"{m:.0f}" for m in tenths))
    out["max_growth"] = worst
    ok = load.errors == 0 and worst <= max_growth and bool(load.rss)
    out["pass"] = ok
    print(f"goals: 0 errors {'PASS' if load.errors == 0 else 'MISS'}; RSS growth <= "
          f"{max_growth:.0%} {'PASS' if worst <= max_growth else 'MISS'} (worst {worst:+.1%})")  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--warmup", type=float, default=None, help="default: a quarter of --seconds")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--messages", type=int, default=400, help="seeded per conversation")
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--append-share", type=float, default=0.5)
    p.add_argument("--max-growth", type=float, default=0.10)
    p.add_argument("--json", action="store_true", help="end with one JSON line of the results")
    args = p.parse_args()
    warmup = args.warmup if args.warmup is not None else args.seconds / 4
    rng = random.Random(7)
    with serving(args.workers, args.budget) as service:
        ids = seed(service.url, service.key, args.conversations, args.messages, rng)
        primed = prime(service, ids, args.budget)
        load = asyncio.run(drive(
            service, ids, clients=args.clients, seconds=args.seconds, warmup=warmup,
            budget=args.budget, append_share=args.append_share,
        ))  # fmt: skip
        result = report(load, args.max_growth, args)
        result["primed"] = primed
        print(f"(before the run, {primed} builds on new connections reached every worker)")
        result["load_average"] = os.getloadavg()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        print(json.dumps(result))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
