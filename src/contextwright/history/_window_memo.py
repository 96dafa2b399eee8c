"""What a window walk measured, kept between builds: steps, running sums, the memo.

A walk measures the units of a history newest first (`_Step`: the unit, its
messages as the prompt will hold them, their cost). `WindowMemo` keeps the last
walk over one conversation as a `_Chain`: its steps oldest first with running
sums of their costs, messages and shortenings, their messages in one flat list,
and the history messages they were measured from.

On the next build over the same history grown at its end, `WindowMemo.quick`
measures only the appended units, adds them at the chain's newest end, checks
the rest of the chain against the history in one comparison, and finds where
the window stops by bisecting the running sums; the window's messages are then
one slice of the flat list. A build therefore does Python work for what is new,
not for every unit of the window. Whenever that cannot give exactly the window
a fresh walk would (the history was edited or lost its oldest messages, the
allowance now reaches past the remembered walk, the newest unit must be
shortened to fit, a broken unit lies inside the window, a cap on units), it
answers None and the caller walks, reusing what still lines up (`reusable`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ..model._messages import Message
from ..model._units import Unit, iter_units_backwards
from ..tokens._count import TokenCounter
from ..tokens._frame import MessageOverhead, count_message
from ._shorten import ShortenCache, shorten_message

__all__ = ["Run", "Step", "WindowMemo", "measure"]


@dataclass(frozen=True, slots=True)
class Step:
    """One unit as a walk measured it (``messages`` shortened where too long); also a taken one."""

    unit: Unit
    messages: list[Message]
    cost: int
    shortened: int
    originals: tuple[Message, ...]  # history[unit.start:unit.end], to check a reuse by identity


def measure(
    history: Sequence[Message],
    unit: Unit,
    counter: TokenCounter,
    overhead: MessageOverhead,
    max_message_tokens: int | None,
    cache: ShortenCache | None,
) -> Step:
    """The unit's messages as the prompt holds them, and their cost (a broken unit costs 0)."""
    originals = tuple(history[unit.start : unit.end])
    if not unit.ok:
        return Step(unit, [], 0, 0, originals)
    msgs: list[Message] = []
    cost = 0
    shortened = 0
    for m in originals:
        c = count_message(counter, m, overhead)
        if max_message_tokens is not None and c > max_message_tokens:
            m = shorten_message(m, max_message_tokens, counter, overhead, cache)
            shortened += 1
            c = count_message(counter, m, overhead)
        msgs.append(m)
        cost += c
    return Step(unit, msgs, cost, shortened, originals)


@dataclass(frozen=True, slots=True)
class _Chain:
    """Measured steps, oldest first, with running sums; never changed once built.

    ``cost[i]`` is the cost of every step before ``steps[i]`` since the chain
    began (``cost[0]`` need not be 0: a chain dropped at its old end keeps its
    sums), likewise ``msgs``, ``short`` and ``broken`` (broken steps); the
    messages of ``steps[i]`` are ``flat[msgs[i] - msgs[0] : msgs[i + 1] - msgs[0]]``.
    ``originals`` is the history the steps cover, ``history[steps[0].unit.start:
    steps[-1].unit.end]``.
    """

    steps: list[Step]
    cost: list[int]
    msgs: list[int]
    short: list[int]
    broken: list[int]
    flat: list[Message]
    originals: list[Message]

    @classmethod
    def of(cls, steps: list[Step]) -> _Chain:
        return _Chain([], [0], [0], [0], [0], [], []).extend(steps)

    def extend(self, newer: Iterable[Step]) -> _Chain:
        """This chain with ``newer`` (oldest first) added at its newest end."""
        add = list(newer)
        return _Chain(
            self.steps + add,
            self.cost + list(accumulate((s.cost for s in add), initial=self.cost[-1]))[1:],
            self.msgs + list(accumulate((len(s.messages) for s in add), initial=self.msgs[-1]))[1:],
            self.short + list(accumulate((s.shortened for s in add), initial=self.short[-1]))[1:],
            self.broken
            + list(accumulate((not s.unit.ok for s in add), initial=self.broken[-1]))[1:],
            self.flat + [m for s in add for m in s.messages],
            self.originals + [m for s in add for m in s.originals],
        )

    def since(self, lo: int) -> _Chain:
        """The chain without its ``lo`` oldest steps."""
        if lo == 0:
            return self
        cut = self.steps[lo].unit.start - self.steps[0].unit.start
        return _Chain(
            self.steps[lo:], self.cost[lo:], self.msgs[lo:], self.short[lo:], self.broken[lo:],
            self.flat[self.msgs[lo] - self.msgs[0] :], self.originals[cut:],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Run:
    """A window's taken units as a range of a chain: ``taken[j]`` is ``chain.steps[top - 1 - j]``.

    Holds only when no broken step lies in ``chain.steps[top - count:top]``.
    """

    chain: _Chain
    top: int
    count: int

    def cost(self, k: int) -> int:
        """The cost of the newest ``k`` taken units."""
        c = self.chain.cost
        return c[self.top] - c[self.top - k]

    def shortened(self, k: int) -> int:
        s = self.chain.short
        return s[self.top] - s[self.top - k]

    def messages(self, k: int) -> list[Message]:
        """The messages of the newest ``k`` taken units, oldest first."""
        m, base = self.chain.msgs, self.chain.msgs[0]
        return self.chain.flat[m[self.top - k] - base : m[self.top] - base]

    def fit(self, allowance: int) -> int:
        """How many of the newest taken units fit in ``allowance`` together."""
        c = self.chain.cost
        lo = self.top - self.count
        return self.top - bisect_left(c, c[self.top] - allowance, lo, self.top)


@dataclass(frozen=True, slots=True)
class Quick:
    """A window `WindowMemo.quick` found: the run taken, and the step it stopped at (if any)."""

    run: Run
    stopper: Step | None  # the newest step left out (over the allowance); None: start of history


class WindowMemo:
    """The last walk over one history, for the next build to reuse.

    Keep one per conversation (the engine keys them by namespace). The saved
    state is replaced in one assignment, so a concurrent build sees the old walk
    or the new one, never half of each.
    """

    def __init__(self) -> None:
        # (settings key, history length, its last message, the walk's steps, its ``stop``)
        self._state: tuple[Any, int, Message, _Chain, int] | None = None

    def reusable(
        self, history: Sequence[Message], key: Any, stop: int
    ) -> tuple[int, list[Step], int] | None:
        """(offset of the old indices in ``history``, old steps newest first, new messages' start)."""
        state = self._state
        if state is None or state[0] != key:
            return None
        _, n, last, chain, old_stop = state
        steps = chain.steps[::-1]
        # the history grew at the end (and may have lost its oldest messages)
        for back in range(min(len(history), 16)):
            i = len(history) - 1 - back
            if history[i] is last:
                offset = i - (n - 1)
                if i + 1 < len(history) and history[i + 1].role == "tool":
                    return None  # new results complete the last remembered unit
                if steps and steps[0].unit.start + offset < stop:
                    return None
                if old_stop and steps and steps[-1].unit.start == old_stop:
                    # the walk's ``stop`` may have cut this unit short (orphaned
                    # results before it): measure it again
                    steps = steps[:-1]
                return offset, steps, i + 1
        return None

    def save(self, key: Any, history: Sequence[Message], seen: list[Step], stop: int) -> None:
        """Remember a walk: ``seen`` is every step it measured, newest first."""
        if history and seen:
            self._state = (key, len(history), history[-1], _Chain.of(seen[::-1]), stop)
        elif history:
            self._state = None

    def quick(
        self,
        history: Sequence[Message],
        allowance: int,
        key: Any,
        stop: int,
        counter: TokenCounter,
        overhead: MessageOverhead,
        max_message_tokens: int | None,
        cache: ShortenCache | None,
    ) -> Quick | None:
        """The window from the remembered walk and the appended units, or None to walk.

        Saves the walk it stands for, as a full walk would.
        """
        state = self._state
        if state is None or state[0] != key or state[4] != stop or allowance <= 0:
            return None
        _, n, last, chain, _ = state
        size = len(history)
        if size < n or history[n - 1] is not last:
            return None
        if size > n and history[n].role == "tool":
            return None  # new results complete the last remembered unit
        start = chain.steps[0].unit.start
        if stop and start == stop:
            return None  # ``stop`` may have cut the oldest unit short: let a walk decide
        old = history[start:n]
        if type(old) is not list:
            old = list(old)
        if old != chain.originals:
            return None  # edited: an equal message measures and renders the same, any other not
        if size > n:
            fresh = [
                measure(history, u, counter, overhead, max_message_tokens, cache)
                for u in iter_units_backwards(history, n, size)
            ]
            chain = chain.extend(reversed(fresh))
        newest = chain.steps[-1]
        top = len(chain.steps)
        if not newest.unit.ok or newest.cost > allowance:
            return None  # the newest unit is shortened to fit, or the window holds nothing
        cost = chain.cost
        lo = bisect_left(cost, cost[top] - allowance, 0, top)
        if lo == 0 and start != stop:
            return None  # the allowance reaches past the remembered walk
        if chain.broken[top] != chain.broken[lo]:
            return None  # broken units inside the window are reported one by one
        kept = chain.since(lo - 1) if lo else chain
        self._state = (key, size, history[-1], kept, stop)
        top -= len(chain.steps) - len(kept.steps)
        return Quick(Run(kept, top, top - (1 if lo else 0)), kept.steps[0] if lo else None)
