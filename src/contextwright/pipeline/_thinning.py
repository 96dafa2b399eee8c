"""Older thinking goes first: the history the window walks when the whole does not fit.

When the window cannot hold all of the history, the first thing to go is the
thinking of turns that are over (docs/providers.md, "Thinking"): it is the cheapest
content to lose, and the providers allow it (`model._thinking`). The turn in
progress — a tool loop, everything after the last user message — keeps its own.

`thin_history` gives a view of the history in which each message before the turn
in progress is its copy without thinking (`drop_thinking`); copies are made only for
the messages the window walk reaches, and kept in the engine's shortening cache so
that the same copy (by identity) comes back at every build and the window's memo
still lines up. `thinning_line` is the receipt's line for what was left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, overload

from ..history._window import WindowResult
from ..model._messages import Message
from ..model._thinking import drop_thinking, has_thinking, loop_start
from ..tokens._frame import count_message
from ._receipt import BlockReport

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = ["ThinnedHistory", "thin_history", "thinning_line"]


class ThinnedHistory(Sequence[Message]):
    """``history`` with the thinking of ``history[:stop]`` left out (copies made on access)."""

    def __init__(self, history: Sequence[Message], stop: int, engine: ContextEngine) -> None:
        self.history = history
        self.stop = stop
        self._engine = engine
        # message id -> (the message, its copy without thinking)
        self.copies: dict[str, tuple[Message, Message]] = {}

    def __len__(self) -> int:
        return len(self.history)

    def _at(self, i: int, m: Message) -> Message:
        if i >= self.stop or not has_thinking(m):
            return m
        cache = self._engine._shortened
        key = (m.id, -2, "thinking")
        copy = cache.get(key)
        if copy is None:
            copy = drop_thinking(m) or m
            cache.put(key, copy)
        self.copies[m.id] = (m, copy)
        return copy

    @overload
    def __getitem__(self, i: int) -> Message: ...
    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...
    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            indexes = range(*i.indices(len(self.history)))
            return [self._at(j, self.history[j]) for j in indexes]
        j = i + len(self.history) if i < 0 else i
        return self._at(j, self.history[i])


def thin_history(
    engine: ContextEngine, history: Sequence[Message], probe: WindowResult, stepping: bool
) -> ThinnedHistory | None:
    """The history without older thinking, if thinking is within the reach of ``probe``
    (a window that is to be cut).

    ``stepping``: the build is an agent's next step, so the turn in progress (after
    the last user message) keeps its thinking; otherwise every turn is over.
    """
    stop = loop_start(history) if stepping else len(history)
    reach = range(min(probe.considered_end, stop), stop)
    if not any(has_thinking(history[i]) for i in reach):
        return None
    return ThinnedHistory(history, stop, engine)


def thinning_line(
    engine: ContextEngine, thinned: ThinnedHistory, window: Sequence[Message]
) -> BlockReport | None:
    """The receipt line for the thinking the kept window (``window``) left out, if any."""
    parts = saved = turns = 0
    counter, ov = engine.counter, engine.overhead
    for m in window:  # a kept copy may have been shortened too: found by id
        pair = thinned.copies.get(m.id) if "thinking_dropped" in m.metadata else None
        if pair is None:
            continue
        original, copy = pair
        turns += 1
        parts += int(copy.metadata["thinking_dropped"])
        saved += count_message(counter, original, ov) - count_message(counter, copy, ov)
    if not parts:
        return None
    return BlockReport(
        "thinking", "history", "recent", 2, "dropped", 0,
        f"{parts} thinking part(s) of {turns} earlier assistant message(s) left out to fit: "
        "older thinking goes first; the turn in progress keeps its own",
        original_tokens=saved,
    )  # fmt: skip
