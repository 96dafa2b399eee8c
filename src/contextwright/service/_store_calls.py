"""The store as coroutines for `Conversations`: on the store's worker, or inline.

`StoreCalls` runs each store call on the `AsyncStore` worker thread, or at once
on the caller's thread when the call comes from the sync API's private loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .._errors import StoreError
from ..stores import AsyncStore, Store

__all__ = ["StoreCalls"]

T = TypeVar("T")


class StoreCalls(AsyncStore):
    """The store as coroutines: on a worker thread, or inline on the sync API's own loop.

    The sync facades (`Conversations.build_sync`…) drive a private event loop that
    nothing else runs on, so blocking it blocks no one: there each call runs at
    once on the caller's thread. That saves a thread hop per call and, above all,
    the GIL hand-offs that made a turn's time jump by milliseconds when the main
    thread and the worker both ran Python. Any other loop (the caller's, the
    background summaries') gets the worker thread, so it never blocks.
    """

    def __init__(self, store: Store, inline: Callable[[], bool]) -> None:
        super().__init__(store)
        self._inline = inline

    async def _run(self, call: Callable[[], T]) -> T:
        if self._inline():
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            return call()
        return await super()._run(call)
