"""`AsyncStore`: any `Store` as coroutines, run on one dedicated worker thread.

The methods are not written out twice (the httpx lesson in STYLE.md): each is a
`_OnWorker` descriptor built from the `Store` protocol's method, one line per
method. mypy reads the sync method's parameters through a ``ParamSpec``, so
``await store.append(conv, msgs, tenant=t)`` is checked exactly like the sync
call; at run time the descriptor looks the method up by name on the wrapped
store and submits the call to the worker. The list of methods is pinned by a
test against `Store`, so a method added to the protocol cannot be forgotten here.

Why one thread: SQLite serialises writers anyway, a single worker keeps calls in
submission order, and the connection is only ever used from that thread. The
event loop awaits a future meanwhile, so it never blocks on the database.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from .._errors import StoreError
from ._records import Store

__all__ = ["AsyncStore"]

P = ParamSpec("P")
R = TypeVar("R")


class _OnWorker(Generic[P, R]):
    """A `Store` method as a coroutine running on the owning `AsyncStore`'s worker."""

    def __init__(self, method: Callable[Concatenate[Any, P], R]) -> None:
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> _OnWorker[P, R]: ...
    @overload
    def __get__(
        self, obj: AsyncStore, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(
        self, obj: AsyncStore | None, owner: type[Any] | None = None
    ) -> _OnWorker[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if obj is None:
            return self
        method: Callable[P, R] = getattr(obj.store, self.name)

        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await obj._run(functools.partial(method, *args, **kwargs))

        call.__name__ = call.__qualname__ = self.name
        call.__doc__ = self.__doc__
        return call


class AsyncStore:
    """Any `Store` (e.g. `SQLiteStore`) with every method as a coroutine.

    Calls run one at a time, in order, on a worker thread owned by this object. A
    cancelled call still completes on the worker — a transaction is never
    abandoned half-way — only the awaiting stops. `close` closes the store too.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextwright-store")
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncStore({self.store!r})"

    @property
    def closed(self) -> bool:
        return self._closed

    async def _run(self, call: Callable[[], R]) -> R:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    ensure_conversation = _OnWorker(Store.ensure_conversation)
    get_conversation = _OnWorker(Store.get_conversation)
    version = _OnWorker(Store.version)
    list_conversations = _OnWorker(Store.list_conversations)
    append = _OnWorker(Store.append)
    read = _OnWorker(Store.read)
    read_tail = _OnWorker(Store.read_tail)
    read_outline = _OnWorker(Store.read_outline)
    token_total = _OnWorker(Store.token_total)
    count_messages = _OnWorker(Store.count_messages)
    message_tokens = _OnWorker(Store.message_tokens)
    set_message_tokens = _OnWorker(Store.set_message_tokens)
    save_summary = _OnWorker(Store.save_summary)
    latest_summary = _OnWorker(Store.latest_summary)
    summaries = _OnWorker(Store.summaries)
    log_compaction = _OnWorker(Store.log_compaction)
    save_compaction = _OnWorker(Store.save_compaction)
    compactions = _OnWorker(Store.compactions)
    put_working = _OnWorker(Store.put_working)
    get_working = _OnWorker(Store.get_working)
    collect_working = _OnWorker(Store.collect_working)
    pin = _OnWorker(Store.pin)
    unpin = _OnWorker(Store.unpin)
    pinned = _OnWorker(Store.pinned)
    search = _OnWorker(Store.search)
    search_seqs = _OnWorker(Store.search_seqs)
    speaker_names = _OnWorker(Store.speaker_names)
    search_outlines = _OnWorker(Store.search_outlines)

    async def close(self) -> None:
        """Close the wrapped store on the worker, then stop the worker (idempotent)."""
        if self._closed:
            return
        try:
            await self._run(self.store.close)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
