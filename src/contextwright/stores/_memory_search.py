"""What the SQLite and PostgreSQL memory stores' reads do the same way: ranking and near-duplicates.

`SQLiteMemoryStore` (``sqlite/_memory.py``) and `PostgresMemoryStore`
(``postgres/_memory.py``) find candidates each in its own way (an FTS5 index and
a process-local vector cache; tsvector and pgvector). What they do with the
candidates is the same and lives here once, so a search ranks alike on both:
relevance weighted by importance and recency (`weighted_score`), access
statistics for the hits, and `find_similar`'s trigram-or-cosine similarity.

``search_sync`` and ``find_similar`` are module-level functions of the store,
listed in each class body (as ``sqlite/_store.py`` lists its methods). A store
provides ``space.query_vector``, ``clock``, ``weights``,
``_candidates(scope, units, qvec, k, categories, include_superseded)``
(rows and their `Candidates`, or None for a scope that never held a memory),
``_touch(mids, when)`` and ``_same_fingerprint(scope, content, categories)``.
Arguments are checked in one order on both: the query or content, the scope, the rest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._errors import InvalidMessageError
from ..text._query import Unit, query_units
from ..text._scores import SearchWeights, shingle_similarity, weighted_score
from ._candidates import Candidates
from ._memory import (
    Memory,
    MemoryHit,
    Scope,
    check_category,
    check_content,
    check_limit,
    check_scope,
    check_score,
    check_search,
)
from ._memory_input import memory_from_row

__all__ = ["find_similar", "search_sync"]


class _Store(Protocol):
    space: Any
    clock: Callable[[], float]
    weights: SearchWeights

    def _candidates(
        self,
        scope: Scope,
        units: list[Unit],
        qvec: Any,
        k: int,
        categories: Sequence[str] | None,
        include_superseded: bool,
    ) -> tuple[list[Any], Candidates] | None: ...

    def _touch(self, mids: list[int], when: float) -> None: ...

    def _same_fingerprint(
        self, scope: Scope, content: str, categories: Sequence[str] | None
    ) -> list[Any]: ...


def search_sync(
    self: _Store,
    scope: Scope,
    query: str,
    *,
    limit: int = 5,
    categories: Sequence[str] | None = None,
    min_score: float = 0.0,
    include_superseded: bool = False,
    now: float | None = None,
) -> list[MemoryHit]:
    """The memories of ``scope`` most relevant to ``query``, best first (hybrid).

    ``min_score`` applies to the relevance (lexical/semantic similarity, 0..1),
    before importance and recency weigh in; ``score`` is the weighted value.
    """
    if not isinstance(query, str):
        raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
    check_scope(scope)
    args = check_search(query, limit, min_score)
    if args is None:
        return []
    n, floor = args
    qvec = self.space.query_vector(query)
    units = query_units(query)
    found = self._candidates(scope, units, qvec, max(4 * n, 32), categories, include_superseded)
    if found is None:
        return []
    rows, cands = found
    when = self.clock() if now is None else now
    # Memory objects only for the hits: 100 json.loads cost 0.4 ms
    scored = [
        (weighted_score(rel, row[7], when - row[9], self.weights), rel, row[0], row)
        for rel, row in cands.scored(rows, self.weights, lambda r: r[18], floor)
    ]
    scored.sort(key=lambda h: (-h[0], -h[2]))
    hits = [(s, r, mid, memory_from_row(row)) for s, r, mid, row in scored[:n]]
    self._touch([h[2] for h in hits], when)
    return [
        MemoryHit(dataclasses.replace(m, accessed_at=when, access_count=m.access_count + 1), s, r)
        for s, r, _, m in hits
    ]


def find_similar(
    self: _Store,
    scope: Scope,
    content: str,
    *,
    category: str | None = None,
    threshold: float = 0.85,
    limit: int = 5,
) -> list[MemoryHit]:
    """Live memories of ``scope`` that say nearly the same as ``content``, most similar first.

    Cheap enough to run before any LLM call: the same normalised text scores 1.0;
    otherwise the similarity is the larger of the character-trigram Jaccard
    similarity and, with an embedder, the cosine. Only those >= ``threshold``.
    """
    check_content(content)
    check_scope(scope)
    n = check_limit(limit)
    floor = check_score(threshold, "threshold")
    cats = None if category is None else [check_category(category)]
    qvec = self.space.query_vector(content)
    found = self._candidates(scope, query_units(content), qvec, max(4 * n, 20), cats, False)
    if found is None or n == 0:
        return []
    rows, cands = found
    cosines = cands.cosines
    rows += self._same_fingerprint(scope, content, cats)
    hits: dict[int, MemoryHit] = {}
    for row in rows:
        memory = memory_from_row(row)
        similarity = max(shingle_similarity(content, memory.content), cosines.get(row[0], 0.0))
        if similarity >= floor:
            hits[row[0]] = MemoryHit(memory, min(similarity, 1.0), min(similarity, 1.0))
    return sorted(hits.values(), key=lambda h: -h.score)[:n]


async def search(self: Any, scope: Scope, query: str, limit: int) -> list[MemoryHit]:
    """`search_sync` off the event loop, on the store's own threads (the `MemoryStore` role)."""
    return await self._run(functools.partial(self.search_sync, scope, query, limit=limit))  # type: ignore[no-any-return]


async def top(self: Any, scope: Scope, limit: int) -> list[Memory]:
    """``top_sync`` off the event loop, on the store's own threads (the `MemoryStore` role)."""
    return await self._run(functools.partial(self.top_sync, scope, limit))  # type: ignore[no-any-return]
