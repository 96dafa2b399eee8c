"""The in-process tail of a stored conversation, and the cache that bounds the tails.

A `Tail` holds the newest prompt-ready messages of one conversation (enough for
the largest window), its summary and running totals, and the conversation's
version (`Store.version`) at which all that was last known to be current. It is
an accelerator only: a tail that is dropped or evicted is read from the store
again and builds the same context (`_tail_sync.TailKeeper`).

`TailCache` keeps the tails of the most recently used conversations, bounded by
count and by approximate bytes (`approx_bytes` of their messages and summary),
least recently used evicted first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model._messages import Message
from ..stores import Summary

__all__ = ["Tail", "TailCache", "approx_bytes"]

Key = tuple[str, str]  # (tenant, conversation)
_MESSAGE_BYTES = 400  # a Message, its tuple of parts, its token cache: the fixed part
_PART_BYTES = 120  # one part object with its fields


def _text_bytes(value: object) -> int:
    if isinstance(value, str):
        return 49 + (len(value) if value.isascii() else 2 * len(value))
    if isinstance(value, (tuple, list)):
        return sum(_part_bytes(v) for v in value)
    return 0


def _part_bytes(part: object) -> int:
    size = _PART_BYTES
    for name in getattr(type(part), "__slots__", ()):
        size += _text_bytes(getattr(part, name, None))
    return size


def approx_bytes(message: Message) -> int:
    """Roughly what ``message`` takes in memory (its texts, parts and objects)."""
    return _MESSAGE_BYTES + sum(_part_bytes(p) for p in message.parts)


@dataclass
class Tail:
    """The newest prompt-ready messages of one conversation, and where they stand.

    Its messages change through `push`, `pop_oldest`, `clear_messages` and
    `set_summary` (called under ``lock``), which keep ``bytes`` and the cache's
    account of it up to date.
    """

    messages: deque[Message] = field(default_factory=deque)
    costs: deque[int] = field(default_factory=deque)  # the prompt cost of each of ``messages``
    sizes: deque[int] = field(default_factory=deque)  # `approx_bytes` of each of ``messages``
    tokens: int = 0  # sum of the prompt costs of ``messages``
    bytes: int = 0  # approximate memory of ``messages`` and ``summary``
    last_seq: int = 0  # newest seq this process has seen
    user_turns: int = 0
    total_tokens: int = 0  # stored prompt cost of the whole conversation (running sum)
    covered_tokens: int = 0  # of that, what the summary covers
    summary: Summary | None = None
    # The user the conversation belongs to, once it exists; set before any of its
    # messages enter the tail, so that a tail with messages always knows its owner.
    owner: str | None = None
    # The conversation's version (`Store.version`) at which the tail was last known
    # to hold everything stored (see `TailKeeper.synced`); None: unknown. Set by
    # `current` (and `follow`), which keep ``verified``.
    version: int | None = None
    # The newest version at which the tail was ever known current (0: none). Versions
    # of an id never repeat, across deletes too: a stored conversation whose
    # `first_version` is above it was made after the tail's one was deleted.
    verified: int = 0
    # Background summaries adopt their result from another thread.
    lock: threading.Lock = field(default_factory=threading.Lock)
    # set by the cache that holds the tail: told of every change of ``bytes``
    resized: Callable[[int], None] | None = field(default=None, repr=False)
    accounted: int = 0  # what the cache counts for this tail (the cache's lock guards it)

    def snapshot(self) -> tuple[list[Message], int, Summary | None, int]:
        """(messages, user turns, summary, last seq), read together."""
        with self.lock:
            return list(self.messages), self.user_turns, self.summary, self.last_seq

    def follow(self, written: int | None) -> None:
        """Take in the version a write of this process left (call under ``lock``).

        A tail that was current at the version just before that write, and has
        taken in what it wrote, is current at ``written``; otherwise (another
        writer came in between, or the version is not known) it must ask.
        """
        current = self.version
        if written is None or current is None or written - current not in (0, 1):
            self.version = None
        else:
            self.current(written)

    def current(self, version: int) -> None:
        """The tail holds everything stored at ``version`` (call under ``lock``)."""
        self.version = version
        self.verified = max(self.verified, version)

    def _grew(self, delta: int) -> None:
        self.bytes += delta
        if self.resized is not None and delta:
            self.resized(delta)

    def push(self, message: Message, cost: int) -> None:
        """Add ``message`` (prompt cost ``cost``) as the newest."""
        size = approx_bytes(message)
        self.messages.append(message)
        self.costs.append(cost)
        self.sizes.append(size)
        self.tokens += cost
        self._grew(size)

    def extend(self, messages: list[Message], costs: list[int]) -> None:
        """`push` each of ``messages``."""
        sizes = [approx_bytes(m) for m in messages]
        self.messages.extend(messages)
        self.costs.extend(costs)
        self.sizes.extend(sizes)
        self.tokens += sum(costs)
        self._grew(sum(sizes))

    def pop_oldest(self) -> None:
        """Drop the oldest message."""
        self.messages.popleft()
        self.tokens -= self.costs.popleft()
        self._grew(-self.sizes.popleft())

    def clear_messages(self) -> None:
        freed = sum(self.sizes)
        self.messages.clear()
        self.costs.clear()
        self.sizes.clear()
        self.tokens = 0
        self._grew(-freed)

    def set_summary(self, summary: Summary | None) -> None:
        old = _text_bytes(self.summary.content) if self.summary is not None else 0
        new = _text_bytes(summary.content) if summary is not None else 0
        self.summary = summary
        self._grew(new - old)

    @property
    def boundary(self) -> int:
        return self.summary.upto_seq if self.summary else 0

    @property
    def unsummarized_tokens(self) -> int:
        return max(0, self.total_tokens - self.covered_tokens)


class TailCache:
    """The tails of the most recently used conversations, at most ``maxsize`` of them
    and about ``max_bytes`` in all (least recently used evicted first).

    A tail only saves reading the store: an evicted conversation's next build reads
    its tail afresh, as a new process would, and builds the same context. The tail
    just used is never evicted, however large. ``busy(key)`` marks tails that are
    not evicted while it holds (a summary of this process is adopting its result
    into them), so the cache may hold more while such work is under way.
    """

    def __init__(
        self, maxsize: int, busy: Callable[[Key], bool], max_bytes: int = 64 << 20
    ) -> None:
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self._busy = busy
        self._items: OrderedDict[Key, Tail] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """Approximate bytes of the tails held."""
        return self._bytes

    def __getitem__(self, key: Key) -> Tail:
        with self._lock:
            return self._items[key]

    def get(self, key: Key) -> Tail | None:
        with self._lock:
            tail = self._items.get(key)
            if tail is not None:
                self._items.move_to_end(key)
            return tail

    def discard(self, key: Key) -> None:
        """Forget the tail of one conversation, if held (a deleted one's)."""
        with self._lock:
            tail = self._items.pop(key, None)
            if tail is not None:
                self._forget(tail)

    def clear(self) -> None:
        """Forget every tail (busy ones too: what they adopt is in the store as well)."""
        with self._lock:
            for tail in self._items.values():
                tail.resized = None
            self._items.clear()
            self._bytes = 0

    def put(self, key: Key, tail: Tail) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._forget(old)
            self._items[key] = tail
            tail.accounted = tail.bytes
            self._bytes += tail.bytes
            tail.resized = lambda delta: self._resized(key, tail, delta)
            self._evict(key)

    def _resized(self, key: Key, tail: Tail, delta: int) -> None:
        """A held tail's size moved by ``delta`` (called under the tail's lock)."""
        with self._lock:
            if self._items.get(key) is not tail:
                return
            tail.accounted += delta
            self._bytes += delta
            if self._bytes > self.max_bytes:
                self._evict(key)

    def _forget(self, tail: Tail) -> None:
        tail.resized = None
        self._bytes -= tail.accounted
        tail.accounted = 0

    def _evict(self, keep: Key) -> None:
        """Drop the least recently used tails (not ``keep``, not busy ones) until within bounds."""
        if len(self._items) <= self.maxsize and self._bytes <= self.max_bytes:
            return
        for k in list(self._items):
            if len(self._items) <= self.maxsize and self._bytes <= self.max_bytes:
                return
            if k == keep or self._busy(k):
                continue
            self._forget(self._items.pop(k))
