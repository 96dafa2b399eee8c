"""A provider's compaction kept with the summary: stored by `Compactor`, sent by `Conversations.build`.

With a `ProviderCompactor` as the summariser, a summary's draft carries the
provider's compaction of the same messages (``SummaryDraft.stand_in``: the user
messages ``/responses/compact`` returned, then the message holding the
``compaction`` item). It is saved in the summary's ``meta["stand_in"]`` (as
`Message.to_dict` dicts), in the same transaction as the summary: the stored
messages themselves are never touched. Here:

* `previous_kw` gives the summariser the previous compaction, so that the next
  one folds it in (incremental, as the rule summary is);
* `stand_in_meta` is what goes into the new summary's ``meta``;
* `with_stand_in` puts the compaction ahead of the history for a build rendered
  for its provider (``provider="responses"``): the engine's pass-through
  (`pipeline._stand_in`) then sends it in the summary's place and leaves the rule
  summary out. Any other build (another provider, or none named) keeps the rule
  summary, with a receipt line saying why.
"""

from __future__ import annotations

from typing import Any

from ..history import ProviderCompactor, Summarizer, SummaryDraft
from ..model._messages import Message
from ..pipeline._receipt import BlockReport
from ..stores import Summary

__all__ = ["previous_kw", "stand_in_meta", "with_stand_in"]


def _stored(summary: Summary | None) -> list[Any]:
    raw = summary.meta.get("stand_in") if summary is not None else None
    return raw if isinstance(raw, list) else []


def previous_kw(summarizer: Summarizer, summary: Summary | None) -> dict[str, Any]:
    """The extra keyword for ``summarizer.summarize``: the previous compaction, if it takes one."""
    if not isinstance(summarizer, ProviderCompactor):
        return {}
    return {"stand_in": tuple(Message.from_dict(d) for d in _stored(summary))}


def stand_in_meta(draft: SummaryDraft) -> dict[str, Any]:
    """What the new summary's ``meta`` keeps of the draft's provider compaction."""
    return {"stand_in": [m.to_dict() for m in draft.stand_in]} if draft.stand_in else {}


def with_stand_in(
    summary: Summary | None, history: list[Message], provider: str | None
) -> tuple[list[Message], str | None, list[BlockReport]]:
    """``(history, summary text, receipt lines)`` for a build rendered for ``provider``.

    The history has the summary's provider compaction ahead of it when ``provider``
    reads it (the engine then leaves the summary text out, with its own receipt line).
    """
    text = summary.content if summary is not None else None
    stored = _stored(summary)
    if summary is None or not stored:
        return history, text, []
    if provider == "responses":
        return [*(Message.from_dict(d) for d in stored), *history], text, []
    who = "no provider named" if provider is None else provider
    return history, text, [
        BlockReport(
            "provider_compaction", "history", "summary", 1, "skipped", 0,
            f"summary version {summary.version} has a responses compaction; built for "
            f"{who}, the rule summary stands in (only a build for 'responses' sends it)",
        )
    ]  # fmt: skip
