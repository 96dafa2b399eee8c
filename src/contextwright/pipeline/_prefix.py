"""The prompt-cache receipt: how much of a build's request the provider can read from its cache.

Providers cache the prefix of a request (Anthropic up to each ``cache_control``
mark, OpenAI automatically) and charge a write for what follows the longest prefix
they have seen (Anthropic: 1.25 times the input price, a read 0.1). A build's
*cacheable part* is its messages up to the last cache breakpoint: the system
message, the summary, the history window (`BuiltContext.cache_breakpoints`); the
per-turn tail after it (retrieved blocks, the current message, the goal) is new
every turn.

`PrefixMemo` keeps, per conversation (the cache namespace), the cacheable part of
the previous build and compares the next build's with it, message by message (a
message that renders the same: same role, name and parts). The result is the
receipt's `PrefixReport`: the cacheable tokens, the prefix shared with the previous
build (read from the cache), what is written, and the least any build could have
written (the messages the previous build did not hold; everything after a changed
system prompt or summary). It is an accelerator of the report only, bounded in
count: when it has forgotten a conversation (evicted, dropped, another process
built the previous request) the report says so (``known`` False) and counts the
whole cacheable part as written; no build ever changes because of it.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from operator import is_

from ..model._messages import Message
from ..tokens._count import TokenCounter
from ..tokens._frame import MessageOverhead, count_message

__all__ = ["PrefixMemo", "PrefixReport"]


@dataclass
class PrefixReport:
    """A build's request against the previous build's of the same conversation.

    ``changed`` says where the shared prefix ended: ``""`` (the previous cacheable
    part is all there: only new messages follow it), ``"first"`` (no previous build
    known), ``"system"`` (the system message: prompt or static blocks),
    ``"summary"`` (a new summary: a compaction) or ``"history"`` (an older message of
    the window changed or left it).
    """

    cacheable_tokens: int  # up to the last cache breakpoint: system, summary, history
    cached_tokens: int  # the prefix of those identical to the previous build's
    write_tokens: int  # cacheable_tokens - cached_tokens: written to the cache
    least_write_tokens: int  # what must be written: new messages, or all after a change
    known: bool  # the previous build of this conversation was known
    changed: str = ""


def _same(a: Message, b: Message) -> bool:
    """Whether two messages render the same (ids, sequence numbers and times aside)."""
    return a is b or (a.role == b.role and a.name == b.name and a.parts == b.parts)


def _key(m: Message) -> Hashable:
    key = (m.role, m.name, m.parts)
    try:
        hash(key)
    except TypeError:  # a part holding something unhashable: compared by its text
        return (m.role, m.name, repr(m.parts))
    return key


class PrefixMemo:
    """The previous build's cacheable messages per conversation, the ``maxsize`` most recent."""

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        # per namespace: the cacheable messages, their tokens, how many came before the window
        self._items: OrderedDict[str, tuple[list[Message], int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def forget(self, namespace: str) -> None:
        with self._lock:
            self._items.pop(namespace, None)

    def compare(
        self,
        namespace: str,
        messages: Sequence[Message],
        breakpoints: Sequence[int],
        head: int,
        summary: bool,
        window_tokens: int,
        counter: TokenCounter,
        overhead: MessageOverhead,
    ) -> PrefixReport:
        """Compare a build's cacheable part (``messages`` up to the last of
        ``breakpoints``: ``head`` messages before the window, the last of them the
        summary if ``summary``, then the window of ``window_tokens``) with the
        previous build's, and remember it for the next.

        The usual case — the previous part is a prefix, its window messages the very
        objects of this one's — costs a C-level identity scan and no counting.
        """
        cacheable = list(messages[: breakpoints[-1] + 1]) if breakpoints else []
        cut = min(head, len(cacheable))
        head_costs = [count_message(counter, m, overhead) for m in cacheable[:cut]]
        total = sum(head_costs) + (window_tokens if len(cacheable) > head else 0)
        with self._lock:
            before = self._items.pop(namespace, None)
            self._items[namespace] = (cacheable, total, head)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
        if before is None:
            return PrefixReport(total, 0, total, total, False, "first")
        prev, prev_total, prev_head = before
        n = len(prev)
        if (
            prev_head == head
            and n <= len(cacheable)
            and all(map(_same, prev[:head], cacheable[:head]))
            and all(map(is_, prev[head:], cacheable[head:n]))
        ):
            write = total - prev_total
            return PrefixReport(total, prev_total, write, write, True, "")
        k, limit = 0, min(n, len(cacheable))
        while k < limit and _same(prev[k], cacheable[k]):
            k += 1
        costs = head_costs + [count_message(counter, m, overhead) for m in cacheable[cut:]]
        cached = sum(costs[:k])
        write = total - cached
        if k == n:
            return PrefixReport(total, cached, write, write, True, "")
        if k >= head:  # the history changed: only messages it did not hold had to be written
            had = Counter(_key(m) for m in prev[head:])
            least = 0
            for m, c in zip(cacheable[k:], costs[k:], strict=True):
                key = _key(m)
                if had[key] > 0:
                    had[key] -= 1
                else:
                    least += c
            return PrefixReport(total, cached, write, least, True, "history")
        changed = "summary" if summary and k == head - 1 else "system"
        return PrefixReport(total, cached, write, write, True, changed)
