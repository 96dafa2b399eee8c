"""Knowledge retrieval: the contract the knowledge and experience sources read through.

A `KnowledgeStore` answers ``search(query, limit)`` with `KnowledgeHit`s: a passage,
where it came from, and how similar it is (seed 000 §4.5 renders source and
similarity). System experiences (seed 000 §4.6) use the same contract with
``category`` set and an ``active`` flag. `InMemoryKnowledgeStore` is a real lexical
implementation; document ingestion and the hybrid index come with the memory issue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ._lexical import lexical_score, terms

__all__ = ["InMemoryKnowledgeStore", "KnowledgeHit", "KnowledgeStore", "Passage"]


@dataclass(frozen=True, slots=True)
class Passage:
    content: str
    source: str = ""
    category: str = ""
    active: bool = True


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

    def add(self, content: str, source: str = "", category: str = "", active: bool = True) -> Passage:
        p = Passage(content, source, category, active)
        self.passages.append(p)
        return p

    async def search(self, query: str, limit: int) -> Sequence[KnowledgeHit]:
        q = terms(query)
        if not q:
            return []
        scored = [(lexical_score(q, p.content + " " + p.source), p) for p in self.passages if p.active]
        best = max((s for s, _ in scored), default=0.0)
        hits = [KnowledgeHit(p, round(s / best, 2)) for s, p in scored if s > 0 and best > 0]
        hits.sort(key=lambda h: -h.score)
        return hits[:limit]
