"""Cache-aware clearing: where a summary cuts so that the provider's prompt cache pays.

Providers cache a request's prefix (Anthropic: up to each ``cache_control`` mark;
OpenAI: automatically). Everything after the first change is written to the cache
again, at a premium (Anthropic: 1.25 times the input price, against 0.1 for a
read). A summary that moves the prompt's start changes the prefix right after the
system prompt, so the whole history is written again: worth it only when it frees
enough to last a while. `clearing_cut` is that rule for the stateful mode's routine
summaries (docs/design-notes.md, Prompt cache): it keeps the newest messages that fit
in ``keep_tokens`` (the window less the room to grow, ``clear_at_least``), cuts at a
unit boundary, and frees at least ``at_least`` tokens or nothing at all. Between two
such summaries the history in the prompt is append-only, so each request is the
previous one's cached prefix plus what is new.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._compaction import Planned

__all__ = ["clearing_cut"]


def _unit_start_before(messages: Sequence[Planned], cut: int) -> int:
    """The start of the unit holding ``messages[cut]`` (a tool result's call, or its run)."""
    j = cut
    while j > 0 and messages[j].role == "tool":
        j -= 1
    if messages[j].role == "tool":
        return 0
    if messages[j].role == "assistant" and messages[j].tool_calls:
        return j
    return j + 1


def clearing_cut(
    messages: Sequence[Planned],
    costs: Sequence[int | None],
    *,
    keep_tokens: int,
    at_least: int,
    keep_recent: int,
) -> int:
    """How many of the oldest ``messages`` (unsummarised, oldest first) a summary covers.

    The newest messages whose ``costs`` fit in ``keep_tokens`` stay, and at least
    ``keep_recent`` of them. The cut never splits a tool-call unit: it moves forward
    past the unit's results (freeing more), or back to the unit's start when moving
    forward would leave fewer than ``keep_recent`` messages. A cost of None (a
    message stored without a count, by a bulk import) ends the kept messages and
    counts as more than any threshold once covered. Returns 0 — clear nothing — when
    the cut would free fewer than ``at_least`` tokens.
    """
    n = len(messages)
    if len(costs) != n:
        raise ValueError("clearing_cut: messages and costs differ in length")
    cut, acc = n, 0
    while cut > 0:
        cost = costs[cut - 1]
        if cost is None or acc + cost > keep_tokens:
            break
        acc += cost
        cut -= 1
    cut = min(cut, max(0, n - keep_recent))
    if 0 < cut < n and messages[cut].role == "tool":
        forward = cut
        while forward < n and messages[forward].role == "tool":
            forward += 1
        cut = forward if n - forward >= keep_recent else _unit_start_before(messages, cut)
    if cut <= 0:
        return 0
    covered = costs[:cut]
    if any(c is None for c in covered):
        return cut  # uncounted messages: a bulk import's, surely more than a threshold
    return cut if sum(c or 0 for c in covered) >= at_least else 0
