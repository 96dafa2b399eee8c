"""The fetch stage: every applicable source asked for its blocks, cached, under deadlines.

Each source's fetch runs as a task of its own, under its own deadline, and the
tasks are awaited together. Most sources never wait for anything (the built-in
state, stats and device sources, memory or knowledge sources over in-process
stores): where asyncio has eager tasks (Python 3.12+) a task starts on the
caller's stack, and one that finishes there costs no loop turn and no timer,
its result is used at once. Elsewhere every source takes one loop turn.
With a tracer enabled, each fetch runs inside its span, in its own task.

A source that computes for longer than its deadline without ever awaiting cannot
be interrupted (a timeout can only cancel at an ``await``); its report line
carries the time it took.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from .._trace import NO_TRACER, AttrValue, Tracer
from ..model._blocks import Block
from ..sources._base import Source
from ..sources._state import Turn
from ..stores._cache import Cache, cache_namespace
from ._tracing import SOURCE_FETCH

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
    """One source's fetch, timed from its start."""

    __slots__ = ("allowance", "deadline", "error", "source", "start", "turn")

    def __init__(self, source: Source, turn: Turn, allowance: int) -> None:
        self.source, self.turn, self.allowance = source, turn, allowance
        self.deadline = float(getattr(source, "deadline", 0.5))
        self.start = time.perf_counter()
        self.error: BaseException | None = None  # why it failed or timed out

    def done(self, status: str, blocks: list[Block], reason: str) -> Fetched:
        ms = (time.perf_counter() - self.start) * 1e3
        return Fetched(self.source.name, status, blocks, reason, False, ms)

    def failed(self, exc: BaseException) -> Fetched:
        self.error = exc
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

    async def run(self, cache: Cache) -> Fetched:
        """The source's answer, or why there is none (failure, deadline)."""
        try:
            async with _timeout(self.deadline):
                value = await self.source.fetch(self.turn, self.allowance)
        except TimeoutError:
            why = f"no answer within {self.deadline * 1e3:.0f} ms"
            self.error = TimeoutError(why)
            return self.done("timed_out", [], why)
        except Exception as exc:
            return self.failed(exc)
        return self.result(value, cache)

    async def traced(self, cache: Cache, tracer: Tracer) -> Fetched:
        """`run` in a span of its own, current while the source runs: spans the
        source opens are its children."""
        with tracer.span(SOURCE_FETCH, _source_attributes(self.source)) as span:
            fetched = await self.run(cache)
            span.update(_fetched_attributes(fetched))
            if self.error is not None:
                span.error(self.error, fetched.reason)
        return fetched


def _source_attributes(source: Source) -> dict[str, AttrValue]:
    return {
        "contextwright.source.name": source.name,
        "contextwright.source.priority": int(getattr(source, "priority", 1)),
    }


def _fetched_attributes(fetched: Fetched) -> dict[str, AttrValue]:
    return {
        "contextwright.source.status": fetched.status,
        "contextwright.source.blocks": len(fetched.blocks),
    }


if sys.version_info >= (3, 11):
    _timeout = asyncio.timeout
else:  # pragma: no cover - Python 3.10
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def _timeout(delay: float) -> Any:
        task = asyncio.current_task()
        assert task is not None
        handle = asyncio.get_running_loop().call_later(delay, task.cancel)
        try:
            yield
        except asyncio.CancelledError:
            if handle.when() <= asyncio.get_running_loop().time():
                raise TimeoutError from None
            raise
        finally:
            handle.cancel()


def _start(coro: Coroutine[Any, Any, Fetched]) -> asyncio.Task[Fetched]:
    """A task for ``coro``, started eagerly where asyncio can (3.12+)."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return loop.create_task(coro)


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
    sources: Sequence[Source], turn: Turn, allowance: int, cache: Cache, tracer: Tracer = NO_TRACER
) -> list[Fetched]:
    """Each source's answer, in order: cached, or fetched under its deadline (concurrently).

    With an enabled ``tracer`` each source fetched has a span
    (``contextwright.source.fetch``); one served from the cache has none (the fetch
    stage's span lists them).
    """
    out: list[Fetched | asyncio.Task[Fetched]] = []
    traced = tracer.enabled
    for source in sources:
        hit = from_cache(cache, source, turn)
        if hit is not None:
            out.append(hit)
            continue
        run = _Run(source, turn, allowance)
        out.append(_start(run.traced(cache, tracer) if traced else run.run(cache)))
    waiting = [t for t in out if isinstance(t, asyncio.Task) and not t.done()]
    if waiting:
        await asyncio.wait(waiting)
    return [f.result() if isinstance(f, asyncio.Task) else f for f in out]
