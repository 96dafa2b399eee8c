"""`ProviderCompactor`: a summary the provider makes (OpenAI ``/responses/compact``), rules behind.

A `Summarizer` whose draft carries two things: the rule summary (``content``,
from ``fallback``, default `RuleSummarizer`), which every other provider reads,
and the provider's own compaction of the same messages (``stand_in``: the user
messages ``/responses/compact`` returns verbatim, then the assistant message
holding the ``compaction`` item), which the stateful layer stores with the
summary and sends in its place to that provider (docs/providers.md, "Asking the
provider to compact"). It is incremental like every summariser: it gets the
previous compaction (``stand_in=``) and sends it ahead of the new messages, so
the provider folds the old summary into the new one (with no previous compaction,
a previous rule summary is sent as a system message instead).

The provider call runs under ``deadline``; a timeout, an error, an answer that
does not parse leaves ``stand_in`` empty and says so in ``method`` (``rules
(fallback: ...)``): the rule summary then stands in for every provider
(docs/design-notes.md: model-made summaries are opt-in and fall back to rules).
The client is anything with ``name``, ``provider`` and ``async compact(items) ->
output items`` (`llm.ResponsesCompactClient`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from .._errors import ConfigError
from ..adapters._openai_responses import from_responses, render_responses
from ..llm import describe_error
from ..model._messages import Message
from ..model._native import is_compaction
from ..tokens._count import TokenCounter
from ._summary import RuleSummarizer, Summarizer, SummaryDraft

__all__ = ["CompactsConversations", "ProviderCompactor"]


class CompactsConversations(Protocol):
    """A provider's compaction endpoint: Responses items in, the compacted window out."""

    name: str
    provider: str

    async def compact(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]: ...


class ProviderCompactor:
    """Summaries that the provider compacts, with the rule summary for everyone else.

    ``client`` is the provider's compaction endpoint (`ResponsesCompactClient`);
    only the OpenAI Responses protocol has one (``provider == "responses"``).
    """

    def __init__(
        self,
        client: CompactsConversations,
        counter: TokenCounter,
        *,
        deadline: float = 30.0,
        fallback: Summarizer | None = None,
    ) -> None:
        if deadline <= 0:
            raise ConfigError(f"ProviderCompactor deadline must be > 0 seconds, got {deadline}")
        if getattr(client, "provider", None) != "responses":
            raise ConfigError(
                "ProviderCompactor compacts through OpenAI's /responses/compact; "
                f"got a client for {getattr(client, 'provider', None)!r}"
            )
        self.client = client
        self.counter = counter
        self.deadline = deadline
        self.fallback: Summarizer = fallback or RuleSummarizer(counter)
        self.provider = "responses"
        self.name = f"provider:{client.name}"

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
        stand_in: Sequence[Message] = (),
    ) -> SummaryDraft:
        """The rule summary of ``messages``, and the provider's compaction of them.

        ``stand_in`` is the previous compaction (what the previous draft's
        ``stand_in`` was), sent ahead of ``messages``; with none, the ``previous``
        summary text is (as a system message), so that the new compaction covers
        everything the rule summary does.
        """
        draft = await self.fallback.summarize(
            messages, previous=previous, max_tokens=max_tokens, locale=locale
        )
        # A previous summary the provider did not compact (a fallback) goes ahead as text
        ahead = tuple(stand_in) or ((Message.system(previous),) if previous else ())
        try:
            items = render_responses([*ahead, *messages], validate=False)
            output = await asyncio.wait_for(self.client.compact(items), self.deadline)
            window = tuple(from_responses(output))
            if not window or not any(is_compaction(p) for p in window[-1].parts):
                raise ValueError("the answer does not end with the compaction item")
        except asyncio.TimeoutError:
            reason = f"timeout after {self.deadline:g}s"
        except Exception as exc:  # any failure of the provider falls back to the rules
            reason = describe_error(exc, 160)
        else:
            return replace(
                draft, method=f"{self.name} (rules for other providers)", stand_in=window
            )
        return replace(draft, method=f"{draft.method} (fallback: {reason})")
