"""Packing recalled turns into a token allowance, and rendering them as one block.

`RecallSource` ranks the old turns; this module takes them best first into its
allowance and writes the block:

- **Greedy by rank, within the allowance.** Turns are taken best first; one that
  does not fit is skipped and the next is tried, so the allowance is used up by
  whole turns, up to the source's turn limit. Taking cheap turns first (score
  per token) was tried and lost recall: the turns that answer questions are
  longer than average.
- **Compact rendering.** Turns are grouped under one date line per day, each as
  ``speaker: text`` — the speaker is the message's name, else its role; the text
  is verbatim (escaped only where it would forge a tag). A date line costs about
  six tokens once per day instead of on every turn. Within a day the turns keep
  their order; the days come most relevant first, so that if the engine has to
  cut the block (from the end), the least relevant day goes.
- **Turns kept apart.** The block (`RecalledTurns`) keeps the turns it shows,
  so that the engine can leave out one the history window holds after all
  (`RecalledTurns.without`): recall is fetched before the window is decided.
- **Counted exactly.** Every line is counted once with its line break and
  cached on the turn, the packed block is counted once as a whole, and turns are
  added (the estimate was high) or dropped (it was low) to match (`pack`).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from ..budget._fit import JOIN_TOKENS
from ..model._blocks import Block, escape_content, render_block
from ..tokens._count import TokenCounter
from ._turns import IndexedTurn, TurnIndex

__all__ = ["SMALLEST_LINE", "CostMemo", "Packing", "RecalledTurns", "pack"]

SMALLEST_LINE = 4  # "x: y" and its line break


@dataclass(frozen=True, slots=True)
class RecalledTurns(Block):
    """A block of recalled turns that knows them (best first), to leave some out."""

    turns: tuple[IndexedTurn, ...] = ()
    header: str = ""

    @property
    def seqs(self) -> list[int]:
        """The sequence numbers of the turns shown."""
        return [t.seq for t in self.turns]

    def without(self, seqs: Container[int]) -> RecalledTurns | None:
        """This block without the turns numbered in ``seqs``; None if none is left."""
        keep = [t for t in self.turns if t.seq not in seqs]
        if len(keep) == len(self.turns):
            return self
        return _recalled(self.name, self.header, keep, self.priority) if keep else None

    def with_content(self, content: str, **changes: Any) -> Block:
        """A plain `Block`: new content no longer matches the turns."""
        values = {f: getattr(self, f) for f in Block.__dataclass_fields__}
        values.update(content=content, tokens=None)
        values.update(changes)
        return Block(**values)


def _recalled(name: str, header: str, turns: list[IndexedTurn], priority: int) -> RecalledTurns:
    seqs = ",".join(str(t.seq) for t in turns)
    return RecalledTurns(
        name, _render(header, turns), priority, provenance=f"store:{seqs}", turns=tuple(turns),
        header=header,
    )  # fmt: skip


class CostMemo:
    """Counts of small repeated strings (header, frames, date lines), memoised by counter."""

    def __init__(self) -> None:
        self._costs: dict[tuple[str, str], int] = {}

    def count(self, counter: TokenCounter, text: str) -> int:
        key = (counter.name, text)
        cost = self._costs.get(key)
        if cost is None:
            if len(self._costs) > 4096:
                self._costs.clear()
            cost = self._costs[key] = counter.count(text)
        return cost


def pack(
    index: TurnIndex, ranked: list[tuple[int, float]], allowance: int, *, counter: TokenCounter,
    costs: CostMemo, name: str, header: str, priority: int, limit: int | None,
    rest: Callable[[], list[tuple[int, float]]] | None = None,
) -> Block | None:  # fmt: skip
    """The best turns that fit ``allowance``, as one block named ``name`` under ``header``.

    ``ranked`` may be the start of the ranking only; ``rest`` then gives all of
    it, asked for if packing runs out of candidates. ``limit`` caps the turns.
    """
    frame = costs.count(counter, render_block(Block(name, header))) + JOIN_TOKENS
    packing = Packing(index, ranked, counter, costs, limit, rest)
    packing.fill(allowance - frame)
    for attempt in range(3):
        if not packing.taken:
            return None
        block = packing.block(name, header, priority)
        # One exact count of the whole; with the engine's caching counter, the
        # engine's own count of this block is then a cache hit.
        spare = allowance - counter.count(render_block(block)) - JOIN_TOKENS
        if spare < 0:
            packing.drop(-spare)  # merges at the seams went the other way: rare
        elif not (spare >= SMALLEST_LINE and attempt < 2 and packing.fill(spare)):
            return block
    # still unverified after a last change: the engine truncates if it must
    return packing.block(name, header, priority) if packing.taken else None


class Packing:
    """Greedy packing of ranked turns into a token allowance, resumable.

    Each turn costs its line (counted with its line break, cached on the turn),
    plus a date line the first time its day appears.
    """

    def __init__(
        self, index: TurnIndex, ranked: list[tuple[int, float]], counter: TokenCounter,
        costs: CostMemo, limit: int | None,
        rest: Callable[[], list[tuple[int, float]]] | None = None,
    ) -> None:  # fmt: skip
        self.index, self.ranked, self.counter, self.costs = index, ranked, counter, costs
        self.rest = rest  # the whole ranking, when ``ranked`` is only its start
        self.cap = len(index) if limit is None else limit  # taken turns are distinct
        self.next = 0  # the first ranked turn not yet considered
        self.taken: list[IndexedTurn] = []
        self.days: dict[str, int] = {}

    def cost(self, t: IndexedTurn) -> int:
        cost = _line_cost(t, self.counter)
        if t.day and t.day not in self.days:
            cost += self.costs.count(self.counter, t.day + ":\n")
        return cost

    def fill(self, left: int) -> bool:
        """Take the next turns that fit ``left`` tokens; whether any was taken."""
        before = len(self.taken)
        while len(self.taken) < self.cap and left >= SMALLEST_LINE:
            if self.next == len(self.ranked):
                if self.rest is None:
                    break
                self.ranked, self.rest = self.rest(), None  # the start is the same: go on
                continue
            t = self.index.turn(self.ranked[self.next][0])
            self.next += 1
            cost = self.cost(t)
            if cost <= left:
                left -= cost
                self.taken.append(t)
                self.days[t.day] = self.days.get(t.day, 0) + 1
        return len(self.taken) > before

    def drop(self, excess: int) -> None:
        """Remove the weakest turns until about ``excess`` tokens are freed."""
        while excess > 0 and self.taken:
            t = self.taken.pop()
            self.days[t.day] -= 1
            if not self.days[t.day]:
                del self.days[t.day]
            excess -= self.cost(t)
        self.next = len(self.ranked)  # what was dropped must not come back
        self.rest = None

    def block(self, name: str, header: str, priority: int) -> RecalledTurns:
        return _recalled(name, header, self.taken, priority)


def _line(t: IndexedTurn) -> str:
    return f"{t.speaker}: {t.text}"


def _line_cost(t: IndexedTurn, counter: TokenCounter) -> int:
    """A turn's line with its line break, as it will be escaped in the block (cached)."""
    cost = t.costs.get(counter.name)
    if cost is None:
        cost = t.costs[counter.name] = counter.count(escape_content(_line(t)) + "\n")
    return cost


def _render(header: str, turns: list[IndexedTurn]) -> str:
    """The block's content: the header, then the turns grouped by day.

    ``turns`` come best first. Within a day the turns are in conversation order;
    the days come in the order of their best turn, so that if the engine must
    cut the block to fit (it cuts from the end), the least relevant day goes.
    """
    days: dict[str, list[IndexedTurn]] = {}
    for t in turns:
        days.setdefault(t.day, []).append(t)
    lines = [header]
    for day, group in days.items():
        if day:
            lines.append(day + ":")
        lines.extend(_line(t) for t in sorted(group, key=lambda t: t.seq))
    return "\n".join(lines)
