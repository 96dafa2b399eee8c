"""Recall: exact old turns relevant to the current message, back from the store.

Once a turn has left the window it survives in the prompt only through the
summary, which keeps the gist and loses the wording. `RecallSource` searches the
conversation's stored messages (full-text, English and Chinese: the store's
FTS5 index) for the ones that match the new message and are older than the
history the window draws from, and offers them as a block with its own priority
and token allowance. Each recalled turn is shown with its position, speaker and
time, and its text as stored (escaped only where it would forge a tag).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._blocks import Block, Priority
from ..sources._base import FetchResult, SourceBase
from ..sources._state import Turn
from ..storage import SearchHit

__all__ = ["RecallSource", "SearchesMessages"]


class SearchesMessages(Protocol):
    """What recall needs from a store: `AsyncStore.search`."""

    def search(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] = ("user", "assistant"),
    ) -> Awaitable[list[SearchHit]]: ...


_HEADER = {
    "en": "Earlier turns of this conversation that match the current message (verbatim):",
    "zh": "本次对话中与当前消息相关的较早原话:",
}


@dataclass
class RecallSource(SourceBase):
    """Stored turns older than the window that match the query, best first."""

    store: Any = None  # SearchesMessages
    limit: int = 6
    min_score: float = 0.0
    name: str = "recalled_turns"
    priority: int = Priority.P1
    deadline: float = 0.5

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.store is None or not turn.query.strip():
            return None
        oldest = next((m.seq for m in turn.history if m.seq is not None), None)
        hits = await self.store.search(
            turn.conversation, turn.query, tenant=turn.tenant, limit=self.limit, before_seq=oldest
        )
        hits = [h for h in hits if h.score >= self.min_score]
        if not hits:
            return None
        lines = [_HEADER.get(turn.locale[:2], _HEADER["en"])]
        for h in sorted(hits, key=lambda h: h.message.seq or 0):
            m = h.message
            when = ""
            if m.created_at is not None:
                when = " · " + time.strftime("%Y-%m-%d %H:%M", time.gmtime(m.created_at))
            lines.append(f"[#{m.seq} · {m.role}{when}] {m.text}")
        seqs = ",".join(str(h.message.seq) for h in hits)
        return Block(self.name, "\n".join(lines), self.priority, provenance=f"store:{seqs}")
