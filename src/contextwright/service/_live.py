"""How big a stored conversation's live part is, and whether it is due a summary.

Read off its `Tail` in O(tail): the summary, everything after it (the running
totals, stored counts), the newest messages a summary must leave out, and what
lies outside the window that the budget gives the history. With cache-aware
clearing on (`CompactionConfig.clear_at_least`) a summary is due only once the
live history outgrows the window.
"""

from __future__ import annotations

from dataclasses import replace

from ..budget._budget import Budget
from ..history import CompactionCheck, CompactionConfig, check, summary_boundary
from ._clearing import cache_aware
from ._tail import Tail

__all__ = ["can_cut", "live_check", "window_allowance"]


def can_cut(tail: Tail, keep: int) -> bool:
    """Whether a first summary could cover anything (`summary_boundary` > 0).

    A tail that does not start at the conversation's first message has older
    messages before it, which a summary covers; one that does holds the whole
    conversation, and the boundary is computed on it. One unit a summary cannot
    cut (a call with all its results) then costs no compaction per build.
    """
    with tail.lock:
        if not tail.messages or (tail.messages[0].seq or 0) > 1:
            return bool(tail.messages)
        messages = list(tail.messages)
    return summary_boundary(messages, keep) > 0


def live_check(config: CompactionConfig, tail: Tail, window: int) -> CompactionCheck:
    """How big the live conversation is (summary + everything after it), O(tail).

    No emergency zone here: the window already keeps every build within its
    budget; the zone (95 % of the budget) is for callers who send whole histories.
    """
    keep = config.keep_recent_messages
    acc = kept = 0
    in_window: int | None = None
    with tail.lock:  # newest first, past the window and the kept ones (no copy)
        summary = tail.summary
        n = len(tail.messages)
        last = tail.last_seq
        for k, cost in enumerate(reversed(tail.costs)):
            acc += cost
            if k < keep:
                kept = acc  # the newest messages, which a summary must leave out
            if in_window is None and acc > window:
                in_window = k
            if in_window is not None and k + 1 >= keep:
                break
    summary_tokens = summary.tokens if summary else 0
    unsummarized = tail.unsummarized_tokens
    # The summary triggers count what lies outside the window and a summary may
    # cover: not the newest ``keep_recent_messages``, even where the window
    # cannot show them all (else every build found a summary due that could
    # cover almost nothing). By seq (gapless), so that messages older than the
    # tail count too, uncounted ones (a bulk import) included.
    pending = max(0, last - (summary.upto_seq if summary else 0))
    coverable = max(0, pending - keep)
    outside_msgs = min(max(0, pending - (n if in_window is None else in_window)), coverable)
    if n >= min(keep, pending):
        coverable_tokens = max(0, unsummarized - kept)
    else:  # the kept messages reach back past the tail: share the tokens evenly
        coverable_tokens = unsummarized * coverable // pending
    outside = min(max(0, unsummarized - window), coverable_tokens)
    result = check(
        config, live_tokens=summary_tokens + unsummarized,
        unsummarized_messages=outside_msgs, unsummarized_tokens=outside,
    )  # fmt: skip
    at_least = cache_aware(config, kept, window)
    if at_least and pending <= n:
        # Cache-aware (docs/design-notes.md, Prompt cache): no summary while the live
        # history fits the window, so the prompt only grows at its end; one as soon
        # as it does not, which clears at least ``clear_at_least`` (`clearing_cut`).
        # (The usual triggers when the tail does not hold all the live history.)
        due = unsummarized > window and coverable_tokens >= at_least
        if due != result.summary_due:
            result = replace(result, summary_due=due)
    return result


def window_allowance(
    default: Budget | None, window_tokens: int, budget: Budget | int | None
) -> int:
    """The tokens the history window gets under ``budget`` (else the engine's ``default``)."""
    if isinstance(budget, int):
        total: int | None = budget
    elif isinstance(budget, Budget):
        total = budget.input_tokens
    else:
        total = default.input_tokens if default else None
    total = total or window_tokens
    b = budget if isinstance(budget, Budget) else default or Budget(total)
    return int(total * b.weights()["recent"])
