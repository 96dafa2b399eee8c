"""Redis across processes and outages: invalidations and wake-ups reach another process,
and a Redis killed or stalled mid-run never fails a build nor serves a stale block.

The second process is `tests/redis_worker.py`, driven line by line over its stdin;
each step waits for its reply, so the order of events is fixed by signals, not by
sleeps. Outages use a private redis-server (`PrivateRedis`), never the shared one.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from contextwright import (
    ContextEngine,
    HeuristicCounter,
    InMemoryMemoryStore,
    Scope,
    invalidate_user_memory,
)
from contextwright.sources import UserMemorySource
from contextwright.stores.redis import RedisCache, RedisWakeup
from tests.rediskit import PrivateRedis, shared_url, unique_prefix

ROOT = Path(__file__).resolve().parents[1]


class Worker:
    def __init__(self, url: str, prefix: str, local: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "redis_worker.py"), url, prefix, str(local)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self.lines: queue.Queue[object] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.reply() == "ready"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def reply(self, timeout: float = 20) -> object:
        return self.lines.get(timeout=timeout)

    def ask(self, *cmd: object) -> object:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.reply()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("local", [0, 1024])
def test_an_invalidation_in_one_process_is_seen_by_another(local):
    prefix = unique_prefix()
    here = RedisCache(shared_url(), prefix=prefix, local=local)
    assert here.wait_listening(10)
    there = Worker(shared_url(), prefix, local)
    try:
        here.set("acme/u1/c1", "user_memory:", ["likes tea"], ttl=60, tags=["user_memory:acme/u1"])
        here.set("acme/u2/c1", "user_memory:", ["likes coffee"], ttl=60, tags=["m:acme/u2"])
        assert there.ask("get", "acme/u1/c1", "user_memory:") == ["likes tea"]
        assert there.ask("get", "acme/u1/c1", "user_memory:") == ["likes tea"]  # local copy
        # when invalidate returns, every listening process has dropped its local copy
        assert here.invalidate(tags=["user_memory:acme/u1"]) == 1
        assert there.ask("get", "acme/u1/c1", "user_memory:") is None
        assert there.ask("get", "acme/u2/c1", "user_memory:") == ["likes coffee"]
        # and the other way round, by namespace
        assert there.ask("set", "acme/u3/c9", "k", "v", 60, []) == "ok"
        assert here.get("acme/u3/c9", "k") == "v"
        assert here.invalidate(namespace="acme/u3/c9") == 1
        assert there.ask("get", "acme/u3/c9", "k") is None
    finally:
        there.close()
        here.clear()
        here.close()


def test_a_wakeup_in_one_process_fires_the_callback_in_another():
    channel_prefix = unique_prefix()
    there = Worker(shared_url(), channel_prefix, 0)
    wakeup = RedisWakeup(shared_url(), channel=channel_prefix + "jobs")
    try:
        assert there.ask("listen") == "listening"
        asyncio.run(wakeup.notify())
        assert there.reply() == "woke"
        asyncio.run(wakeup.notify())
        assert there.reply() == "woke"
    finally:
        there.close()
        wakeup.close()


def test_wakeup_listens_across_a_restart_and_never_raises():
    server = PrivateRedis()
    fired = threading.Semaphore(0)
    wakeup = RedisWakeup(server.url, channel="cw:jobs", timeout=0.2, retry_after=0)
    stop = wakeup.listen(fired.release)
    try:
        assert wakeup.wait_listening(10)
        asyncio.run(wakeup.notify())
        assert fired.acquire(timeout=10)
        server.kill()
        asyncio.run(wakeup.notify())  # dropped, not raised
        assert wakeup.unavailable
        server.start()
        # back: the listener resubscribes and wakes its callback once (a signal may be lost)
        assert fired.acquire(timeout=20)
        asyncio.run(wakeup.notify())
        assert fired.acquire(timeout=10)
        assert wakeup.unavailable is None
    finally:
        stop()
        wakeup.close()
        server.close()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _engine(cache: RedisCache) -> tuple[ContextEngine, InMemoryMemoryStore]:
    memories = InMemoryMemoryStore()
    source = UserMemorySource(store=memories)
    return ContextEngine(counter=HeuristicCounter(), sources=[source], cache=cache), memories


def _build(engine: ContextEngine, conversation: str = "c"):
    built = engine.build_sync(
        "what do I drink?", budget=800, tenant="t", user="u", conversation=conversation
    )
    return built, "".join(m.text for m in built.messages)


@pytest.mark.parametrize("local", [0, 1024])
def test_builds_go_on_while_redis_is_killed_and_the_receipt_says_so(local):
    server = PrivateRedis()
    clock = Clock()
    cache = RedisCache(server.url, local=local, timeout=0.2, retry_after=5, clock=clock)
    engine, memories = _engine(cache)
    try:
        if local:
            assert cache.wait_listening(10)
        memories.add(Scope("t", "u"), "drinks green tea")
        first, _ = _build(engine)
        assert first.report.cache_misses == 1
        assert first.report.cache_unavailable is None
        assert _build(engine)[0].report.block("user_memory").cached
        server.kill()
        # (a local copy may still answer until the listener notices; another conversation
        # has none, so this build asks Redis, and from then on the local layer is bypassed)
        assert _build(engine, "c2")[0].report.cache_unavailable
        for _ in range(3):  # one timeout opens the breaker, the next builds skip Redis
            down, text = _build(engine)
            assert "green tea" in text
            assert not down.report.block("user_memory").cached
            assert down.report.cache_unavailable
            assert any("shared cache unavailable" in w for w in down.report.warnings)
        server.start()  # empty: a restarted cache-only Redis keeps nothing
        clock.t += 5  # the breaker's pause is over: the next call tries Redis again
        back, _ = _build(engine)
        assert back.report.cache_unavailable is None
        assert not back.report.block("user_memory").cached
        assert _build(engine)[0].report.block("user_memory").cached
    finally:
        cache.close()
        server.close()


@pytest.mark.parametrize("local", [0, 1024])
def test_an_invalidation_made_while_redis_is_away_is_applied_before_it_serves(local):
    # A stalled Redis keeps its data: the entry the invalidation could not reach is
    # still there when Redis answers again, and must not be served.
    server = PrivateRedis()
    clock = Clock()
    cache = RedisCache(server.url, local=local, timeout=0.2, retry_after=5, clock=clock)
    other = RedisCache(server.url, local=0)  # another worker, reading the same Redis
    engine, memories = _engine(cache)
    try:
        memories.add(Scope("t", "u"), "drinks green tea")
        _build(engine)
        assert _build(engine)[0].report.block("user_memory").cached
        server.pause()
        memories.add(Scope("t", "u"), "switched to black coffee")
        invalidate_user_memory(engine)(Scope("t", "u"))  # cannot reach Redis: remembered
        assert cache.unavailable
        away, text = _build(engine)
        assert "black coffee" in text
        assert away.report.cache_unavailable
        server.resume()
        clock.t += 5
        back, text = _build(engine)
        assert "black coffee" in text
        assert not back.report.block("user_memory").cached
        assert back.report.cache_unavailable is None
        # the replay reached Redis itself, so other workers miss the stale entry too
        hit = other.get("t/u/c", "user_memory:")
        assert hit is None or "black coffee" in "".join(b.content for b in hit)
    finally:
        server.resume()
        other.close()
        cache.close()
        server.close()
