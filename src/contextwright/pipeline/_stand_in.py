"""A provider's compaction in the history stands in for the turns before it, as a summary.

Anthropic's server-side compaction returns a ``compaction`` block, OpenAI's a
``compaction`` item (`/responses/compact`, or ``context_management``): an opaque
summary that carries the conversation before it, which the provider reads back
on the next request (docs/providers.md, "Provider compaction"). An imported or
stored history may hold one. `stand_in` treats the newest such message the way
the engine treats its own summary:

* the message (the compaction and whatever the assistant said after it in the
  same message) takes the summary's place, charged to the summary section, and
  the window walks only the messages after it; the messages before it stay in
  the history (and the store) untouched, searchable and recoverable. OpenAI's
  ``/responses/compact`` returns the user messages of the compacted window
  verbatim, then the compaction item (which replaces the assistant and tool
  items): the user messages right before a Responses compaction go with it;
* the engine's own summary text, if one was given, is not also sent: the
  provider's compaction stands in for the same turns (a receipt line says so).

This holds when the build is rendered for the compaction's own provider, or for
no provider in particular (``provider=None``: the conversation's own). For
another provider the compaction cannot be read: the history is walked whole, the
engine's own summary is used, and the renderer leaves the compaction out with a
note.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model._messages import Message
from ..model._native import ProviderPart, is_compaction
from ._receipt import BlockReport

__all__ = ["compaction_line", "has_compaction", "stand_in"]


def _compaction(message: Message, provider: str | None) -> ProviderPart | None:
    for p in message.parts:
        if is_compaction(p) and (provider is None or p.provider == provider):  # type: ignore[union-attr]
            return p  # type: ignore[return-value]
    return None


def has_compaction(message: Message) -> bool:
    """Whether ``message`` holds a provider's compaction (of any provider)."""
    return any(is_compaction(p) for p in message.parts)


def stand_in(
    history: Sequence[Message], summary: str | None, provider: str | None, last: int
) -> tuple[Sequence[Message], str | tuple[Message, ...] | None, list[BlockReport]]:
    """``(history after the newest compaction, what stands in as the summary, receipt lines)``.

    ``last`` is the index of the newest message holding a compaction (-1: none), as
    the engine's incremental scan of the history found it. What stands in is the
    engine's summary text, or the messages of that compaction when ``provider`` can
    read it; otherwise ``(history, summary, [])``.
    """
    if 0 <= last < len(history):
        i, m = last, history[last]
        found = _compaction(m, provider)
        if found is None:
            return history, summary, []
        lines = []
        if summary:
            lines.append(BlockReport(
                "summary", "summary", "summary", 1, "skipped", 0,
                f"the {found.provider} compaction in the history stands in for the same turns",
            ))  # fmt: skip
        start = i
        while found.provider == "responses" and start > 0 and history[start - 1].role == "user":
            start -= 1
        return history[i + 1 :], tuple(history[start : i + 1]), lines
    return history, summary, []


def compaction_line(
    kept: Sequence[Message] | None, compaction: Sequence[Message], tokens: int
) -> BlockReport:
    """The receipt line of a provider's compaction standing in for the summary."""
    found = _compaction(compaction[-1], None)
    who = found.provider if found is not None else "provider"
    if kept is None:
        return BlockReport(
            "provider_compaction", "history", "summary", 1, "dropped", 0,
            f"the {who} compaction ({tokens} tokens) did not fit the summary's share; "
            "it cannot be cut",
        )  # fmt: skip
    return BlockReport(
        "provider_compaction", "history", "summary", 1, "included", tokens,
        f"the {who} compaction stands in for the turns before it (kept in the history)",
    )  # fmt: skip
