"""The stateful mode's machinery: the in-process tail, store calls, background jobs.

`Conversations` (``_conversations.py``) is built from these: a `Tail` per
conversation (the newest prompt-ready messages and running totals), kept for
the most recently used conversations in a `TailCache`, `StoreCalls`
(the store as coroutines, inline under the sync API), and `Background` (one
daemon thread with an event loop, for summaries that sync callers get too).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._errors import StoreError
from ..model._messages import Message
from ..stores import AsyncStore, Store, Summary
from ._shutdown import at_shutdown

__all__ = ["Background", "StoreCalls", "Tail", "TailCache"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class Tail:
    """The newest prompt-ready messages of one conversation, and where they stand."""

    messages: deque[Message] = field(default_factory=deque)
    costs: deque[int] = field(default_factory=deque)  # the prompt cost of each of ``messages``
    tokens: int = 0  # sum of the prompt costs of ``messages``
    last_seq: int = 0  # newest seq this process has seen
    user_turns: int = 0
    total_tokens: int = 0  # stored prompt cost of the whole conversation (running sum)
    covered_tokens: int = 0  # of that, what the summary covers
    summary: Summary | None = None
    # The user the conversation belongs to, once it exists; set before any of its
    # messages enter the tail, so that a tail with messages always knows its owner.
    owner: str | None = None
    # The store's change token when the tail was last known to hold everything
    # stored (see `Conversations._tail`); None: ask the store.
    synced: tuple[int, int] | None = None
    # Background summaries adopt their result from another thread.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[list[Message], int, Summary | None]:
        with self.lock:
            return list(self.messages), self.user_turns, self.summary

    @property
    def boundary(self) -> int:
        return self.summary.upto_seq if self.summary else 0

    @property
    def unsummarized_tokens(self) -> int:
        return max(0, self.total_tokens - self.covered_tokens)


class TailCache:
    """The tails of the ``maxsize`` most recently used conversations (least recently used
    evicted first).

    A tail only saves reading the store: an evicted conversation's next build reads
    its tail afresh (`Conversations._load_tail`), as a new process would, and builds
    the same context. ``busy(key)`` marks tails that are not evicted while it holds
    (a background summary is adopting its result into them), so the cache may hold
    more than ``maxsize`` while such work is under way.
    """

    def __init__(self, maxsize: int, busy: Callable[[tuple[str, str]], bool]) -> None:
        self.maxsize = maxsize
        self._busy = busy
        self._items: OrderedDict[tuple[str, str], Tail] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, key: tuple[str, str]) -> Tail:
        with self._lock:
            return self._items[key]

    def get(self, key: tuple[str, str]) -> Tail | None:
        with self._lock:
            tail = self._items.get(key)
            if tail is not None:
                self._items.move_to_end(key)
            return tail

    def put(self, key: tuple[str, str], tail: Tail) -> None:
        with self._lock:
            self._items[key] = tail
            self._items.move_to_end(key)
            over = len(self._items) - self.maxsize
            if over <= 0:
                return
            for old in [k for k in self._items if k != key and not self._busy(k)][:over]:
                del self._items[old]


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


class Background:
    """One daemon thread with an event loop for summaries, so sync callers get them too.

    At interpreter exit (before threads are joined and thread pools stop: see
    ``_shutdown.py``) the jobs get ``exit_timeout`` seconds to finish; the rest
    are abandoned, cleanly: their store writes are single transactions run on
    the store's worker thread, which the interpreter lets finish, so an abandoned
    job has written all of a summary (with its log entry) or none of it, and
    the next build that finds a summary due makes it.
    """

    def __init__(self, exit_timeout: float = 5.0) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.pending: set[concurrent.futures.Future[Any]] = set()
        self.exit_timeout = exit_timeout

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name="contextwright-bg", daemon=True
                )
                self._thread.start()
                self._loop = loop
                with _running_lock:
                    _running.add(self)
                at_shutdown(_finish_running)
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self.pending.add(fut)
        fut.add_done_callback(self.pending.discard)
        return fut

    def wait(self, timeout: float | None = None) -> None:
        """Wait until no job is pending, those that jobs submit while it waits included."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pending = [f for f in list(self.pending) if not f.done()]
            left = None if deadline is None else deadline - time.monotonic()
            if not pending or (left is not None and left <= 0):
                return
            concurrent.futures.wait(pending, timeout=left)

    def close(self, join_timeout: float = 5.0) -> None:
        """Stop the background loop and join its thread (no thread outlives this).

        Jobs not finished are abandoned whole (each store write is one
        transaction); call `wait` first to let them finish.
        """
        with _running_lock:
            _running.discard(self)
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(join_timeout)
            if not thread.is_alive():
                loop.close()

    def _finish(self) -> None:
        """At exit: wait ``exit_timeout`` seconds for the jobs, then stop (see the class)."""
        self.wait(self.exit_timeout)
        left = sum(1 for f in list(self.pending) if not f.done())
        if left:
            log.info("abandoning %d background job(s) at exit (summaries are made later)", left)
        self.close()


# Background loops that run, finished at interpreter exit (`Background._finish`).
_running: set[Background] = set()
_running_lock = threading.Lock()


def _finish_running() -> None:
    with _running_lock:
        running = list(_running)
    for bg in running:
        bg._finish()
