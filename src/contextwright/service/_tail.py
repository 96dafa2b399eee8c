"""The stateful mode's machinery: the in-process tail and store calls.

`Conversations` (``_conversations.py``) is built from these: a `Tail` per
conversation (the newest prompt-ready messages and running totals), kept for
the most recently used conversations in a `TailCache`, and `StoreCalls` (the
store as coroutines, inline under the sync API). Background work runs as
durable jobs (``_jobrunner.py``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .._errors import StoreError
from ..model._messages import Message
from ..stores import AsyncStore, Store, Summary

__all__ = ["StoreCalls", "Tail", "TailCache"]

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
