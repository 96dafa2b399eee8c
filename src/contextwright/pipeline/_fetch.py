"""The fetch stage: every applicable source asked for its blocks, cached, under deadlines.

Sources are coroutines, but most of them never wait for anything: the built-in
state, stats and device sources, and memory or knowledge sources over in-process
stores, compute their answer and return. Giving each one a task and a
``wait_for`` (two tasks, a timer and several loop turns) cost more than their
work: about 1.2 ms of a 10,000-message stateful build for eight sources. So
each source is started *eagerly*, the way Python 3.12's eager tasks do: its
coroutine is stepped once on the caller's stack. If it finishes there (the usual
case) the result is used at once, with no task and no loop turn. If it suspends —
it awaits real I/O — it is handed, where it stopped, to a task that finishes it
under the source's deadline, concurrently with the other suspended sources.

A source that computes for longer than its deadline without ever awaiting cannot
be interrupted either way (a timeout can only cancel at an ``await``); its
report line carries the time it took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from ..model._blocks import Block
from ..sources._base import Source
from ..sources._state import Turn
from ..stores._cache import Cache, cache_namespace
from ._eager import resume, step

__all__ = ["Fetched", "fetch_all"]


@dataclass
class Fetched:
    """One source's answer for this build, as the fit stage and the receipt see it."""

    source: str
    status: str  # ok | empty | failed | timed_out
    blocks: list[Block]
    reason: str
    cached: bool
    ms: float


def _as_blocks(result: Any, source: Source) -> list[Block]:
    if result is None:
        return []
    items = [result] if isinstance(result, Block) else list(result)
    for b in items:
        if not isinstance(b, Block):
            raise TypeError(f"source {source.name!r} returned {type(b).__name__}, not Block")
    if getattr(source, "static", False):
        items = [b if b.static else b.with_content(b.content, static=True) for b in items]
    return [b for b in items if not b.empty]


def cache_key(source: Source, turn: Turn) -> str:
    """The source's name (escaped: it holds no ``:`` then) and its own key for the turn."""
    key_fn = getattr(source, "cache_key", None)
    return f"{cache_namespace(source.name)}:{key_fn(turn) if key_fn else ''}"


class _Run:
    """One source's fetch: started eagerly, finished later only if it had to wait."""

    __slots__ = ("allowance", "deadline", "source", "start", "turn")

    def __init__(self, source: Source, turn: Turn, allowance: int) -> None:
        self.source, self.turn, self.allowance = source, turn, allowance
        self.deadline = float(getattr(source, "deadline", 0.5))
        self.start = time.perf_counter()

    def done(self, status: str, blocks: list[Block], reason: str) -> Fetched:
        ms = (time.perf_counter() - self.start) * 1e3
        return Fetched(self.source.name, status, blocks, reason, False, ms)

    def failed(self, exc: BaseException) -> Fetched:
        return self.done("failed", [], f"{type(exc).__name__}: {exc}")

    def result(self, value: Any, cache: Cache) -> Fetched:
        try:
            blocks = _as_blocks(value, self.source)
            ttl = float(getattr(self.source, "ttl", 0.0) or 0.0)
            if ttl > 0:
                tags_fn = getattr(self.source, "cache_tags", None)
                tags = tags_fn(self.turn) if tags_fn else getattr(self.source, "tags", ())
                key = cache_key(self.source, self.turn)
                cache.set(self.turn.namespace, key, tuple(blocks), ttl=ttl, tags=tags)
        except Exception as exc:  # a source must never break the build
            return self.failed(exc)
        return self.done("ok", blocks, "") if blocks else self.done("empty", [], "nothing to add")

    async def finish(self, coro: Coroutine[Any, Any, Any], waiting: Any, cache: Cache) -> Fetched:
        left = self.deadline - (time.perf_counter() - self.start)
        try:
            value = await asyncio.wait_for(resume(coro, waiting), max(left, 0.0))
        except asyncio.TimeoutError:
            return self.done("timed_out", [], f"no answer within {self.deadline * 1e3:.0f} ms")
        except Exception as exc:
            return self.failed(exc)
        return self.result(value, cache)


def from_cache(cache: Cache, source: Source, turn: Turn) -> Fetched | None:
    """A fresh cached answer of ``source``, if it caches and has one."""
    if not float(getattr(source, "ttl", 0.0) or 0.0) > 0:
        return None
    start = time.perf_counter()
    try:
        hit = cache.get(turn.namespace, cache_key(source, turn))
    except Exception:  # a broken cache_key or cache is a miss; the fetch reports it
        return None
    if hit is None:
        return None
    ms = (time.perf_counter() - start) * 1e3
    return Fetched(source.name, "ok" if hit else "empty", list(hit), "served from cache", True, ms)


async def fetch_all(
    sources: Sequence[Source], turn: Turn, allowance: int, cache: Cache
) -> list[Fetched]:
    """Each source's answer, in order: cached, computed eagerly, or awaited under its deadline."""
    out: list[Fetched | None] = []
    waits: list[tuple[int, Coroutine[Any, Any, Fetched]]] = []
    for source in sources:
        hit = from_cache(cache, source, turn)
        if hit is not None:
            out.append(hit)
            continue
        run = _Run(source, turn, allowance)
        try:
            coro = source.fetch(turn, allowance)
            if not asyncio.iscoroutine(coro):  # some other awaitable: wrap it
                coro = _await(coro)
            finished, value = step(coro)
        except Exception as exc:
            out.append(run.failed(exc))
            continue
        if finished:
            out.append(run.result(value, cache))
            continue
        waits.append((len(out), run.finish(coro, value, cache)))
        out.append(None)
    if waits:
        got = await asyncio.gather(*(c for _, c in waits))
        for (i, _), f in zip(waits, got, strict=True):
            out[i] = f
    return [f for f in out if f is not None]


async def _await(awaitable: Any) -> Any:
    return await awaitable
