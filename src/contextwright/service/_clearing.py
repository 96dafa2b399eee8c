"""Cache-aware clearing in the stateful mode: when a routine summary is due, and where it cuts.

A routine summary moves the start of the prompt's history, and the provider's
prompt cache is written again from there (docs/design-notes.md, Prompt cache).
With ``CompactionConfig.clear_at_least`` on (the default) a stored conversation's
prompt is therefore the summary and *every* message after it, append-only from
one build to the next, until the live history no longer fits the window: then one
summary clears at least ``clear_at_least`` tokens (`clearing_cut`), so that the
next ones have room to grow. `cache_aware` says whether that can hold (not when the
newest messages a summary must keep fill the window alone: the window slides
whatever is summarised, and the summary triggers of ``CompactionConfig`` apply, as
with ``clear_at_least_tokens=0``). `routine_cut` is where the summary ends;
`summarise_after` schedules it after a build, also when the build's own window had
to cut the history (the sections around it left less than the allowance:
`window_after`), aiming then at the room the history really had.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..budget._budget import Budget
from ..history import CompactionCheck, CompactionConfig, clearing_cut, summary_boundary
from ..pipeline._receipt import ContextReport
from ..stores import MessageOutline
from ._tail import Tail

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["cache_aware", "routine_cut", "summarise_after", "window_after"]

Fill = Callable[[int, int], Awaitable[None]]


def cache_aware(config: CompactionConfig, kept: int, window: int) -> int:
    """``clear_at_least`` for a history window of ``window`` tokens whose newest
    ``keep_recent_messages`` cost ``kept``; 0 when clearing cannot be cache-aware
    (off, or those messages leave the window less than that much room)."""
    at_least = config.clear_at_least(window)
    return at_least if at_least and kept + at_least <= window else 0


async def routine_cut(
    conv: Conversations,
    outline: Sequence[MessageOutline],
    costs: list[int | None],
    fill: Fill,
    window: int,
) -> int:
    """How many of the unsummarised messages (``outline``, oldest first) a routine summary covers.

    The newest messages that fit in ``window`` stay — less ``clear_at_least`` when
    cache-aware, so that the history has that much room to grow before the next
    summary — and at least ``keep_recent_messages``. Only the costs a decision
    needs are counted (``fill``, newest first: a bulk import stores the rest
    uncounted). Cache-aware, a summary that would clear less than ``clear_at_least``
    tokens covers nothing (0).
    """
    config = conv.compaction
    keep_recent = config.keep_recent_messages
    n = len(outline)
    # newest first, as far as the window reaches: how many fit, what the kept cost
    acc, keep, i = 0, 0, n
    kept: int | None = 0 if keep_recent == 0 else None
    while i > 0:
        i -= 1
        if costs[i] is None:
            await fill(max(0, i - 63), i + 1)
        acc += costs[i] or 0
        if acc > window:
            break
        keep += 1
        if keep == keep_recent:
            kept = acc
    at_least = cache_aware(config, acc if kept is None else kept, window)
    if at_least:
        return clearing_cut(
            outline, costs, keep_tokens=window - at_least, at_least=at_least,
            keep_recent=keep_recent,
        )  # fmt: skip
    return summary_boundary(outline, max(keep, keep_recent))


def window_after(conv: Conversations, tail: Tail, report: ContextReport, window: int) -> int | None:
    """The room the history had in a build whose window cut it, if less than ``window``.

    Cache-aware only: a build's sections (a large current step, retrieved blocks)
    can leave the history less than the allowance the routine summaries aim at,
    and the window then slides one unit per turn. The summary scheduled after such
    a build aims at the room the window really had (its grant). None: the window
    held all the history, or clearing cannot be cache-aware.
    """
    if report.history_messages >= report.history_total:
        return None
    recent = report.sections.get("recent")
    got = min(window, recent.allotted if recent is not None else window)
    with tail.lock:
        costs = list(tail.costs)
    kept = sum(costs[max(0, len(costs) - conv.compaction.keep_recent_messages) :])
    return got if got > 0 and cache_aware(conv.compaction, kept, got) else None


async def summarise_after(
    conv: Conversations, tail: Tail, urgency: CompactionCheck, report: ContextReport,
    budget: Budget | int | None, conversation: str, tenant: str, user: str,
) -> None:  # fmt: skip
    """After a build: schedule the background summary that is due (its ``urgency``,
    checked before the build), or the one its cut window calls for (`window_after`).

    A soft compaction that could not free ``clear_at_least`` yet (the newest
    ``keep_recent_messages`` hold most of the live history) is not scheduled: it
    would wait (`plan_compaction`), one job per build.
    """
    window = conv._window_allowance(budget)
    cut = window_after(conv, tail, report, window)
    soft = urgency.urgency == "soft"
    if soft and not urgency.summary_due and cut is None:
        at_least = conv.compaction.clear_at_least(window)
        with tail.lock:
            costs = list(tail.costs)
            live = tail.unsummarized_tokens
        kept = sum(costs[max(0, len(costs) - conv.compaction.keep_recent_messages) :])
        soft = live - kept >= at_least
    if urgency.summary_due or soft or cut is not None:
        routine = urgency.urgency == "none"
        await conv._compactor.schedule(conversation, tenant, user, routine=routine, window=cut)
