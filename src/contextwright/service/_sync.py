"""The one sync facade: coroutine methods run on a private event loop.

`SyncLoop` is the loop a sync API runs its coroutines on (made on first use,
one call at a time; a store backend may run its calls inline on it: `inline_loop`). `sync_twin` makes the ``*_sync`` method of a coroutine
method, and `sync_list` the ``*_sync`` of an async iterator method (as a list),
so a class states its sync API in one line per method instead of copying each.
Calling one inside a running event loop is a `UserError`: the async methods are
for that.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from .._errors import UserError
from ..stores._inline import inline_loop

__all__ = ["SyncLoop", "sync_list", "sync_twin"]

P = ParamSpec("P")
T = TypeVar("T")
_MESSAGE = "this is the sync API; inside an event loop use the async methods"


def no_running_loop() -> None:
    """`UserError` if the caller runs inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UserError(_MESSAGE)


class SyncLoop:
    """A private event loop that runs one coroutine at a time for sync callers."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end on the private loop (`UserError` inside a running loop)."""
        try:
            no_running_loop()
        except UserError:
            coro.close()
            raise
        with self._lock:
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            with inline_loop(self.loop):  # nothing else runs on it: store calls may block it
                return self.loop.run_until_complete(coro)

    def is_running_here(self) -> bool:
        """Whether the running loop is this one (call from a coroutine)."""
        return self.loop is not None and asyncio.get_running_loop() is self.loop

    def close(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.close()


class HasSyncLoop(Protocol):
    _sync: SyncLoop


S = TypeVar("S", bound=HasSyncLoop)


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], T]:
    """The ``*_sync`` method of coroutine ``method``: the same call, run on ``self._sync``."""

    def twin(self: S, /, *args: P.args, **kw: P.kwargs) -> T:
        return self._sync.run(method(self, *args, **kw))

    _name(twin, method, f"`{method.__name__}` for code without an event loop.")
    return twin


def sync_list(
    method: Callable[Concatenate[S, P], AsyncIterator[T]],
) -> Callable[Concatenate[S, P], list[T]]:
    """The ``*_sync`` method of async iterator ``method``: everything it yields, as a list."""

    def twin(self: S, /, *args: P.args, **kw: P.kwargs) -> list[T]:
        async def collect() -> list[T]:
            return [item async for item in method(self, *args, **kw)]

        return self._sync.run(collect())

    _name(twin, method, f"`{method.__name__}` for code without an event loop, as a list.")
    return twin


def _name(twin: Callable[..., Any], method: Callable[..., Any], doc: str) -> None:
    """Name and document ``twin`` after ``method`` (its signature shows in help())."""
    twin.__name__ = f"{method.__name__}_sync"
    twin.__qualname__ = method.__qualname__ + "_sync"
    twin.__module__ = method.__module__
    twin.__doc__ = doc
    twin.__wrapped__ = method  # type: ignore[attr-defined]
