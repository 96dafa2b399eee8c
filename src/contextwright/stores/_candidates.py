"""What one hybrid query found, and how its candidates are scored: shared by the backends.

`Candidates` is the pure half of the hybrid search (no connection, no SQL): the
lexical candidates in rank order, the vector ones best first, every candidate's
cosine and the query units' IDFs; `Candidates.scored` fuses them into a relevance
(``text/_scores.py``). The SQLite stores (``sqlite/_hybrid.py``) and the PostgreSQL
ones (``postgres/_hybrid.py``) find candidates their own way and score them here,
so a relevance means the same on every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..text._query import Unit
from ..text._scores import SearchWeights, coverage

__all__ = ["Candidates"]


@dataclass(frozen=True, slots=True)
class Candidates:
    """What one query found: the lexical candidates (BM25 where computed, in rank
    order), the vector ones (best first), every candidate's cosine, the units' IDFs."""

    units: list[Unit]
    idfs: list[float]
    lexical: dict[int, float | None]
    vector: list[tuple[int, float]]
    cosines: dict[int, float]

    @property
    def ids(self) -> set[int]:
        return {*self.lexical, *self.cosines}

    def scored(
        self,
        rows: Iterable[Any],
        weights: SearchWeights,
        text_of: Callable[[Any], str],
        floor: float,
    ) -> list[tuple[float, Any]]:
        """``(relevance, row)`` of the rows (ids first) relevant and at least ``floor``, in order."""
        lex_rank = {i: r for r, i in enumerate(self.lexical)}
        vec_rank = {i: r for r, (i, _) in enumerate(self.vector)}
        out: list[tuple[float, Any]] = []
        for row in rows:
            rel = weights.relevance(
                coverage(self.units, self.idfs, text_of(row)), self.cosines.get(row[0]),
                lexical_rank=lex_rank.get(row[0]), vector_rank=vec_rank.get(row[0]),
            )  # fmt: skip
            if rel > 0.0 and rel >= floor:
                out.append((rel, row))
        return out
