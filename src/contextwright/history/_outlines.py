"""Recall's cache of stored messages' outlines: an LRU bounded in bytes, never stale.

The default recall asks the store, on every build, for its full-text hits below
the window and the outlines of the messages around them (about 200 at the
default search limit). Reading and decoding those rows was most of the store's
share of a build, while a conversation's hits keep landing in the same
neighbourhoods from one message to the next. Stored messages never change (a
message is appended once, under the next sequence number, and never rewritten),
so the outline of message ``seq`` of a conversation, once read, stays exact (until
the conversation is deleted: `forget`, by the process that deletes it): it
is kept here under ``(tenant, conversation, seq)`` with no version to check, and
the store is told which ones the caller holds (`search_outlines`'s ``known``), so
that it reads only the rest.

The cache is bounded by an estimate of the bytes its entries hold (the text, and
a fixed overhead per entry), least recently used out first. Dropping any entry,
or the whole cache, changes no result: what is missing is read from the store.
An entry dropped *while* the store was being asked (another build on another
thread filled the cache meanwhile) is noticed by `take`, and the caller asks
again without the cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence

from ..stores import MessageOutline

__all__ = ["OutlineCache"]

# What an entry costs besides its text: the key tuple, the outline's slots, the
# ordered dict's node (measured with tracemalloc: about 330 bytes for a short turn).
_ENTRY_BYTES = 300


def _size(outline: MessageOutline) -> int:
    text = outline.text
    # str holds 1, 2 or 4 bytes a character; 4 for non-ASCII overestimates CJK a little
    return _ENTRY_BYTES + (len(text) if text.isascii() else 4 * len(text))


class OutlineCache:
    """Outlines of stored messages by ``(tenant, conversation, seq)``, at most ``max_bytes``.

    Least recently used first out: the conversation used longest ago gives up
    its least recently used outlines first.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._convs: OrderedDict[tuple[str, str], OrderedDict[int, MessageOutline]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(d) for d in self._convs.values())

    @property
    def nbytes(self) -> int:
        """The estimated bytes the entries hold (at most ``max_bytes``)."""
        return self._bytes

    def known(self, tenant: str, conversation: str) -> Container[int]:
        """The conversation's sequence numbers held here, for the store to skip.

        The store may read it on its worker thread without the lock (a lookup is
        atomic); `take` checks afterwards that nothing it skipped has gone.
        """
        return self._convs.get((tenant, conversation), _NONE)

    def take(
        self, tenant: str, conversation: str, seqs: Iterable[int], fresh: Sequence[MessageOutline]
    ) -> list[MessageOutline] | None:
        """The outlines of ``seqs`` (ascending), from ``fresh`` (just read; kept) or the cache.

        None if one of them is in neither: it was dropped while the store was
        asked, and the caller must ask again. ``seqs`` must all be stored
        messages (sequence numbers below the window are).
        """
        got = {o.seq: o for o in fresh}
        out: list[MessageOutline] = []
        key = (tenant, conversation)
        keep = self.max_bytes > 0
        with self._lock:
            held = self._convs.get(key)
            if held is None:
                held = OrderedDict()
                if keep:
                    self._convs[key] = held
            else:
                self._convs.move_to_end(key)
            for seq in seqs:
                o = got.get(seq)
                if o is None:
                    o = held.get(seq)
                    if o is None:
                        return None
                    held.move_to_end(seq)
                elif keep and seq not in held:
                    held[seq] = o
                    self._bytes += _size(o)
                out.append(o)
            self._evict()
        return out

    def _evict(self) -> None:
        convs = self._convs
        while self._bytes > self.max_bytes and convs:
            oldest = next(iter(convs))
            held = convs[oldest]
            if held:
                _, gone = held.popitem(last=False)
                self._bytes -= _size(gone)
            if not held:
                del convs[oldest]

    def forget(self, tenant: str, conversation: str) -> None:
        """Drop the conversation's outlines (it was deleted: its seqs may be reused)."""
        with self._lock:
            held = self._convs.pop((tenant, conversation), None)
            if held is not None:
                self._bytes -= sum(_size(o) for o in held.values())

    def clear(self) -> None:
        with self._lock:
            self._convs.clear()
            self._bytes = 0


_NONE: frozenset[int] = frozenset()
