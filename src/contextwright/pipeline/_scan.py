"""The engine's incremental scan of a history: every item a `Message`, the user messages
among them, and the newest one holding a provider's compaction (`_stand_in`).

Per conversation the scan is remembered with the last message it saw; when the next
history holds that same message object at the same position (a history that grows
by appending), only the messages after it are looked at, so a growing conversation
costs O(new messages) per build.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import InvalidMessageError
from ..model._messages import Message
from ._stand_in import has_compaction

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = ["scan_history"]


def scan_history(
    engine: ContextEngine, history: Sequence[Message], key: tuple[str, str, str]
) -> tuple[int, int]:
    """Check that every item of ``history`` is a `Message`; the user messages among them,
    and the index of the last one holding a provider's compaction (-1: none).

    Per conversation (``key``) the scan is remembered with the last message it
    saw; when the next history holds that same message object at the same
    position (a history that grows by appending), only the messages after it
    are checked and counted, so a growing conversation costs O(new messages)
    per build.
    """
    n = len(history)
    with engine._memo_lock:
        seen = engine._scans.get(key)
        if seen is not None:
            engine._scans.move_to_end(key)
    start = count = 0
    comp = -1
    if seen is not None:
        seen_n, seen_last, seen_count, seen_comp = seen
        if 0 < seen_n <= n and history[seen_n - 1] is seen_last:
            start, count, comp = seen_n, seen_count, seen_comp
    for i in range(start, n):
        m = history[i]
        if not isinstance(m, Message):
            raise InvalidMessageError(f"history[{i}]", f"must be a Message, got {type(m).__name__}")
        if m.role == "user":
            count += 1
        elif m.role == "assistant" and has_compaction(m):
            comp = i
    with engine._memo_lock:
        if n:
            engine._scans[key] = (n, history[n - 1], count, comp)
            if len(engine._scans) > 256:
                engine._scans.popitem(last=False)
        else:
            engine._scans.pop(key, None)
    return count, comp
