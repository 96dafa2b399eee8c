"""Units: an assistant turn that calls tools together with every tool message answering it is one unit; every other message is a unit of its own. Broken units (a result without its call, a call without all its results) are reported, never sent."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from ._messages import Message
from ._parts import ToolCallPart

__all__ = ["Unit", "UnitKind", "_unit_from", "group_units", "iter_units_backwards"]


UnitKind: TypeAlias = Literal["message", "tool_call", "orphan_result", "incomplete_call"]


@dataclass(frozen=True, slots=True)
class Unit:
    """A run ``messages[start:end]`` that is kept or dropped as a whole.

    ``kind`` is ``"message"`` (one plain message), ``"tool_call"`` (an assistant
    turn with tool calls and every result answering it), or one of the broken
    kinds: ``"orphan_result"`` (tool results whose call is not there) and
    ``"incomplete_call"`` (a call some of whose results are missing).
    """

    start: int
    end: int
    kind: UnitKind

    @property
    def ok(self) -> bool:
        return self.kind in ("message", "tool_call")

    def __len__(self) -> int:
        return self.end - self.start


def _unit_from(messages: Sequence[Message], start: int, n: int) -> Unit:
    """The unit that begins at ``start`` (``messages[start]`` is not a tool message)."""
    msg = messages[start]
    calls = msg.tool_calls if msg.role == "assistant" else ()
    if not calls:
        return Unit(start, start + 1, "message")
    pending = {c.id for c in calls}
    if len(pending) != len(calls):  # duplicate call ids can never be answered unambiguously
        pending = set()
    end = start + 1
    broken = len(pending) == 0
    while end < n and messages[end].role == "tool":
        for r in messages[end].tool_results:
            if r.call_id in pending:
                pending.discard(r.call_id)
            else:
                broken = True
        end += 1
    if pending or broken:
        return Unit(start, end, "incomplete_call")
    return Unit(start, end, "tool_call")


def group_units(messages: Sequence[Message]) -> list[Unit]:
    """Split ``messages`` into units, oldest first (see the module docstring)."""
    units: list[Unit] = []
    n = len(messages)
    i = 0
    while i < n:
        if messages[i].role == "tool":
            j = i + 1
            while j < n and messages[j].role == "tool":
                j += 1
            units.append(Unit(i, j, "orphan_result"))
            i = j
            continue
        unit = _unit_from(messages, i, n)
        units.append(unit)
        i = unit.end
    return units


def iter_units_backwards(
    messages: Sequence[Message], stop: int = 0, end: int | None = None
) -> Iterator[Unit]:
    """Yield the units of ``messages[stop:end]`` newest first, touching only what is consumed.

    A sliding window walks this until its budget is spent, so the cost of a build
    depends on the size of the window, not on the length of the conversation.
    The units are the same as `group_units` would give for ``messages[stop:end]``.
    """
    n = len(messages) if end is None else end
    end = n
    while end > stop:
        j = end - 1
        while j >= stop and messages[j].role == "tool":
            j -= 1
        if j < stop:  # only tool messages remain: results without their call
            yield Unit(stop, end, "orphan_result")
            return
        if j == end - 1:
            m = messages[j]
            calls = m.role == "assistant" and any(isinstance(p, ToolCallPart) for p in m.parts)
            yield Unit(j, end, "incomplete_call" if calls else "message")
            end = j
            continue
        # messages[j] is followed by tool messages up to end.
        if messages[j].role == "assistant" and messages[j].tool_calls:
            unit = _unit_from(messages, j, end)
            if unit.end == end:
                yield unit
            else:  # cannot happen: _unit_from consumes every following tool message
                yield Unit(j, end, "incomplete_call")
            end = j
        else:
            yield Unit(j + 1, end, "orphan_result")
            end = j + 1
