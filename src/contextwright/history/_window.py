"""The sliding window: the newest history that fits, in whole units.

`select_window` walks the history backwards one unit at a time (an assistant turn
with its tool results is one unit, `group_units`) and keeps units while they fit
the allowance, so the cost of a build grows with the window, not with the length
of the conversation. It never splits a unit and never keeps a broken one (a tool
result without its call, a call missing results): providers reject both.

A window that had to stop before the start of the history begins with a user
message. When it stops inside a turn (an agent's long run of tool calls, or a turn
opened by a large message), it keeps the newest units of that turn and puts the
turn's opening user message before them: verbatim when it fits, else a short
placeholder quoting its start (`opener_placeholder`). Only when not even the
placeholder fits beside a unit is that unit left out.

Between builds of a growing conversation the walk is remembered (`WindowMemo`,
in ``_window_memo``): the units it measured, with running sums of their costs. The
next build measures only the units appended since, adds them at the newest end
and finds the window's oldest unit by bisecting the sums, so its cost does not
grow with the number of units the window holds. When the history does not line
up (edited, reordered, its oldest messages gone, a tool result completing the
last remembered call) or the allowance reaches past the remembered walk, it
walks again, reusing the remembered units that still match by identity.

A message longer than ``max_message_tokens`` is shortened in the prompt only, with a
marker (docs/design-notes.md, History window and long content): text keeps its head,
tool results keep head
and tail, where errors and totals usually are. If the newest unit alone does not
fit, or fits but not beside the user message a cut window opens with, its long parts
are shortened until it does, so the latest exchange is not lost to one oversized
tool result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any

from .._errors import InvalidMessageError
from ..model._messages import Message
from ..model._units import Unit, iter_units_backwards
from ..tokens._count import TokenCounter
from ..tokens._frame import DEFAULT_OVERHEAD, MessageOverhead, count_message
from ._shorten import ShortenCache, opener_placeholder, shorten_message, turn_opener
from ._window_memo import Quick, Run, Step, WindowMemo, measure

__all__ = ["WindowMemo", "WindowResult", "narrow_window", "select_window"]


@dataclass
class WindowResult:
    """What `select_window` kept, and why it stopped."""

    messages: list[Message] = field(default_factory=list)  # oldest first
    tokens: int = 0
    start: int = 0  # index in the history of the oldest kept message
    units: int = 0
    shortened: int = 0
    broken: list[tuple[Unit, str]] = field(default_factory=list)
    stopped: str = "start of history"
    considered_end: int = 0  # the window stopped after looking at history[considered_end:]
    taken: list[Step] = field(default_factory=list, repr=False)  # newest first, before trimming
    squeezed: bool = False  # the newest unit was shortened to fit
    # the user message put first because the window starts inside a turn: the
    # turn's opening message (verbatim) or its placeholder; also messages[0]
    opener: Message | None = None
    opener_verbatim: bool = False
    next_cost: int | None = None  # cost of the newest unit left out, when measured
    # ``taken`` as a range of the memo's running sums, when a build derived it from them
    run: Run | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What `_finish` needs to find and measure a turn's opening message."""

    history: Sequence[Message]
    counter: TokenCounter
    overhead: MessageOverhead
    max_message_tokens: int | None
    cache: ShortenCache | None
    stop: int

    def opener(self, index: int | None) -> list[tuple[Message, int, bool]]:
        """(message, cost, verbatim) choices for the opener, best first."""
        out: list[tuple[Message, int, bool]] = []
        original = self.history[index] if index is not None else None
        if original is not None:
            m = original
            c = count_message(self.counter, m, self.overhead)
            limit = self.max_message_tokens
            if limit is not None and c > limit:
                m = shorten_message(m, limit, self.counter, self.overhead, self.cache)
                c = count_message(self.counter, m, self.overhead)
            out.append((m, c, True))
        ph = opener_placeholder(original, self.counter, self.overhead, self.cache)
        out.append((ph, count_message(self.counter, ph, self.overhead), False))
        return out


def _steps(
    history: Sequence[Message],
    stop: int,
    counter: TokenCounter,
    overhead: MessageOverhead,
    max_message_tokens: int | None,
    cache: ShortenCache | None,
    memo: WindowMemo | None,
    out: list[Step],
) -> Iterator[Step]:
    """The units of ``history[stop:]``, newest first, measured; each also appended to ``out``.

    Reuses ``memo``'s steps after walking the messages appended since its walk.
    """
    key = (id(counter), overhead, max_message_tokens)
    reuse = memo.reusable(history, key, stop) if memo is not None else None
    end = len(history)
    if reuse is not None:
        offset, old, fresh_from = reuse
        if fresh_from <= stop:
            old = []  # nothing before ``stop`` is walked
        fresh_from = max(fresh_from, stop)
        for unit in iter_units_backwards(history, fresh_from, end):
            step = measure(history, unit, counter, overhead, max_message_tokens, cache)
            out.append(step)
            yield step
        end = fresh_from
        for step in old:
            start, stop_at = step.unit.start + offset, step.unit.end + offset
            if stop_at != end or start < stop:
                break
            if not all(map(is_, history[start:stop_at], step.originals)):
                break
            moved = step if not offset else Step(
                Unit(start, stop_at, step.unit.kind), step.messages, step.cost, step.shortened,
                step.originals,
            )  # fmt: skip
            out.append(moved)
            yield moved
            end = start
    for unit in iter_units_backwards(history, stop, end):
        step = measure(history, unit, counter, overhead, max_message_tokens, cache)
        out.append(step)
        yield step


def select_window(
    history: Sequence[Message],
    allowance: int,
    counter: TokenCounter,
    *,
    overhead: MessageOverhead = DEFAULT_OVERHEAD,
    max_message_tokens: int | None = None,
    max_units: int | None = None,
    stop: int = 0,
    cache: ShortenCache | None = None,
    memo: WindowMemo | None = None,
) -> WindowResult:
    """The newest units of ``history[stop:]`` that fit in ``allowance`` tokens.

    Only the messages the walk reaches are looked at; one that is not a `Message`
    raises `InvalidMessageError` naming its index. ``memo`` remembers the walk for
    the next build over the same, grown, history (see the module docstring).
    """
    try:
        return _select(
            history, allowance, counter, overhead, max_message_tokens, max_units, stop, cache,
            memo,
        )  # fmt: skip
    except AttributeError:
        for i, m in enumerate(history):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"history[{i}]", f"must be a Message, got {type(m).__name__}"
                ) from None
        raise


def _select(
    history: Sequence[Message],
    allowance: int,
    counter: TokenCounter,
    overhead: MessageOverhead,
    max_message_tokens: int | None,
    max_units: int | None,
    stop: int,
    cache: ShortenCache | None,
    memo: WindowMemo | None,
) -> WindowResult:
    ctx = _Ctx(history, counter, overhead, max_message_tokens, cache, stop)
    key = (id(counter), overhead, max_message_tokens)
    if memo is not None and max_units is None:
        quick = memo.quick(
            history, allowance, key, stop, counter, overhead, max_message_tokens, cache
        )
        if quick is not None:
            return _finish(_from_run(quick, len(history)), quick.run.count, ctx, allowance)
    result = WindowResult(start=len(history), considered_end=len(history))
    remaining = allowance
    seen: list[Step] = []
    walk = _steps(history, stop, counter, overhead, max_message_tokens, cache, memo, seen)
    for step in walk:
        unit = step.unit
        result.considered_end = unit.start
        if not unit.ok:
            why = (
                "tool result without its tool call"
                if unit.kind == "orphan_result"
                else "tool call without all of its results"
            )
            result.broken.append((unit, why))
            continue
        if max_units is not None and len(result.taken) >= max_units:
            result.stopped = f"window size ({max_units} units)"
            result.considered_end = unit.end
            result.next_cost = step.cost
            break
        if step.cost > remaining and not result.taken and remaining > 0:
            # the newest unit alone is too big: shorten its long parts to fit,
            # leaving room for a placeholder of its turn's opening message
            room = remaining
            if step.messages and step.messages[0].role != "user" and unit.start > stop:
                u = turn_opener(history, unit.start, stop)
                room -= ctx.opener(u)[-1][1]
            if room > 0:
                step = _squeeze(step, room, ctx)
                result.squeezed = True
        if step.cost > remaining:
            result.stopped = "budget"
            result.considered_end = unit.end
            result.next_cost = step.cost
            break
        result.taken.append(step)  # the measured step itself: nothing is copied per build
        remaining -= step.cost
    if memo is not None:
        memo.save(key, history, seen, stop)
    return _finish(result, len(result.taken), ctx, allowance)


def _from_run(quick: Quick, size: int) -> WindowResult:
    """The walk's result (before `_finish`) that a remembered run stands for."""
    run, stopper = quick.run, quick.stopper
    taken = run.chain.steps[run.top - run.count : run.top][::-1]
    if stopper is None:
        return WindowResult(start=size, considered_end=taken[-1].unit.start, taken=taken, run=run)
    return WindowResult(
        start=size, stopped="budget", considered_end=stopper.unit.end, taken=taken,
        next_cost=stopper.cost, run=run,
    )  # fmt: skip


def _squeeze(step: Step, room: int, ctx: _Ctx) -> Step:
    """``step`` with its long parts shortened so that it costs about ``room`` at most.

    The room is shared evenly between the unit's messages; a message already
    within its share is kept. Shortening is approximate (merges at the cuts), so
    an overshoot is taken off the room and the cut made again, a few times.
    """
    counter, overhead = ctx.counter, ctx.overhead
    target = room
    for _ in range(4):
        per = max(1, target // max(1, len(step.messages)))
        msgs = [shorten_message(m, per, counter, overhead, ctx.cache) for m in step.messages]
        cost = sum(count_message(counter, m, overhead) for m in msgs)
        if cost <= room or per == 1:
            break
        target -= cost - room
    shortened = sum(1 for m in msgs if "shortened_from" in m.metadata)
    return Step(step.unit, msgs, cost, shortened, step.originals)


def _finish(result: WindowResult, keep: int, ctx: _Ctx, allowance: int) -> WindowResult:
    """Fill in the kept messages and totals from the first ``keep`` taken units."""
    chunks = result.taken[:keep]
    run = result.run
    total = run.cost(keep) if run is not None else sum(c.cost for c in chunks)
    opener: tuple[Message, int, bool] | None = None
    if result.stopped != "start of history":
        # A cut window starts with a user message: an answer without its question
        # confuses the model, and Anthropic rejects a conversation that opens
        # with an assistant turn. Inside a turn, the turn's opening message (or
        # its placeholder) goes first; a unit goes only if not even that fits.
        while chunks and chunks[-1].messages[0].role != "user":
            u = turn_opener(ctx.history, chunks[-1].unit.start, ctx.stop)
            choices = ctx.opener(u)
            opener = next((o for o in choices if total + o[1] <= allowance), None)
            if opener is not None:
                break
            if len(chunks) == 1:
                # The newest unit fits alone but not beside its opener: shorten
                # it to leave the opener room, as when it does not fit alone,
                # rather than lose the latest exchange.
                room = allowance - min(o[1] for o in choices)
                if room > 0:
                    short = _squeeze(chunks[0], room, ctx)
                    opener = next((o for o in choices if short.cost + o[1] <= allowance), None)
                    if opener is not None:
                        chunks, total, result.squeezed = [short], short.cost, True
                        run = None
                        break
            total -= chunks[-1].cost
            chunks = chunks[:-1]
    if len(chunks) < len(result.taken):
        result.next_cost = result.taken[len(chunks)].cost
    if run is not None:
        result.messages = run.messages(len(chunks))
        result.shortened = run.shortened(len(chunks))
    else:
        result.messages = [m for chunk in reversed(chunks) for m in chunk.messages]
        result.shortened = sum(c.shortened for c in chunks)
    result.opener, result.opener_verbatim = None, False
    if opener is not None:
        result.messages.insert(0, opener[0])
        result.opener, result.opener_verbatim = opener[0], opener[2]
        total += opener[1]
    result.tokens = total
    result.units = len(chunks)
    result.start = chunks[-1].unit.start if chunks else result.considered_end
    return result


def narrow_window(
    probe: WindowResult,
    allowance: int,
    history: Sequence[Message],
    counter: TokenCounter,
    **kw: Any,
) -> WindowResult:
    """The window for a smaller ``allowance``, derived from a wider ``probe``.

    The units the probe took (newest first) and their costs are reused: the
    narrower window is their longest prefix that fits, so the history is walked
    once per build, not once per allocation pass. Only when the probe had to
    squeeze its newest unit is the walk redone.
    """
    if probe.tokens <= allowance and probe.stopped != "budget":
        return probe
    ctx = _Ctx(
        history, counter, kw.get("overhead", DEFAULT_OVERHEAD), kw.get("max_message_tokens"),
        kw.get("cache"), kw.get("stop", 0),
    )  # fmt: skip
    if probe.squeezed:
        return select_window(history, allowance, counter, **kw)
    run = probe.run
    if run is not None:
        keep = run.fit(allowance)
    else:
        keep, total = 0, 0
        for chunk in probe.taken:
            if total + chunk.cost > allowance:
                break
            total += chunk.cost
            keep += 1
    if keep == len(probe.taken) and probe.stopped != "budget":
        return probe
    if keep == 0 and probe.taken and allowance > 0:
        return select_window(history, allowance, counter, **kw)  # squeeze the newest unit
    narrowed = WindowResult(
        taken=probe.taken,
        broken=[b for b in probe.broken if b[0].start >= probe.taken[keep - 1].unit.start]
        if keep
        else [],
        stopped="budget",
        considered_end=probe.taken[keep].unit.end
        if keep < len(probe.taken)
        else probe.considered_end,
        next_cost=probe.next_cost,
        run=run,
    )
    return _finish(narrowed, keep, ctx, allowance)
