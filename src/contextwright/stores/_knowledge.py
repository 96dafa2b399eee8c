"""Knowledge retrieval: the contract the knowledge and experience sources read through.

A `KnowledgeStore` answers ``search(query, limit)`` with `KnowledgeHit`s: a passage,
where it came from, and how similar it is in 0..1 (the prompt shows source and
similarity: docs/design-notes.md, Built-in sources). System experiences use the same
contract with
``category`` set and an ``active`` flag; an inactive passage is never returned.
Knowledge is shared by the users of a tenant (it is not per user), but never across
tenants. `InMemoryKnowledgeStore` is a small lexical implementation for tests and
demos; `SQLiteKnowledgeStore` ingests documents into the hybrid index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..text._scores import lexical_score
from ..text._terms import terms

__all__ = ["InMemoryKnowledgeStore", "KnowledgeHit", "KnowledgeStore", "Passage"]


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of a document (or an experience): its text and where it came from.

    ``heading_path`` is the chain of headings above it in its document; ``meta``
    holds the rest (chunk index, line, the ingest's own metadata).
    """

    content: str
    source: str = ""
    category: str = ""
    active: bool = True
    heading_path: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def title(self) -> str:
        """``source › heading › subheading``: what a prompt names as the source.

        A top heading that only repeats the source name (a document's title) is left out.
        """
        path = list(self.heading_path)
        if path and path[0] == self.source:
            path.pop(0)
        return " › ".join([self.source or "-", *path])


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    passage: Passage
    score: float  # similarity in 0..1


@runtime_checkable
class KnowledgeStore(Protocol):
    async def search(self, query: str, limit: int) -> Sequence[KnowledgeHit]:
        """Passages relevant to ``query``, best first, inactive ones left out."""
        ...


class InMemoryKnowledgeStore:
    """A `KnowledgeStore` over a list of passages, scored lexically and scaled to 0..1."""

    def __init__(self, passages: Sequence[Passage] = ()) -> None:
        self.passages: list[Passage] = list(passages)

    def add(
        self, content: str, source: str = "", category: str = "", active: bool = True
    ) -> Passage:
        p = Passage(content, source, category, active)
        self.passages.append(p)
        return p

    async def search(self, query: str, limit: int) -> Sequence[KnowledgeHit]:
        q = terms(query)
        if not q:
            return []
        scored = [
            (lexical_score(q, p.content + " " + p.source), p) for p in self.passages if p.active
        ]
        best = max((s for s, _ in scored), default=0.0)
        hits = [KnowledgeHit(p, round(s / best, 2)) for s, p in scored if s > 0 and best > 0]
        hits.sort(key=lambda h: -h.score)
        return hits[:limit]
