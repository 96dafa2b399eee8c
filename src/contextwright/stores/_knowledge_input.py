"""What the SQLite and PostgreSQL knowledge stores do the same way: input and results.

`SQLiteKnowledgeStore` (``sqlite/_knowledge.py``) and `PostgresKnowledgeStore`
(``postgres/_knowledge.py``) differ only in how they store, index and fetch
chunks. Everything before that (checking and chunking what is ingested, checking
and serialising metadata, checking a search's arguments) and after it (ranking
the scored rows into hits, rendering them for a prompt) lives here once, so the
two cannot drift apart. The store methods are module-level functions of the store
(``ingest``, ``ingest_file``, ``add``, ``retrieve_for_prompt``) that each class
lists in its body, one line each, as ``sqlite/_store.py`` does; the rest are
plain helpers. A store provides ``counter``, ``search_sync`` and
``_write(source, chunks, category, active, meta, extra)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from .._errors import ConfigError, InvalidMessageError
from ..model._checks import check_unicode, dump_json, unicode_problem
from ..text._chunk import Chunk, chunk_document
from ..text._scores import SearchWeights
from ..tokens._count import TokenCounter
from ._candidates import Candidates
from ._knowledge import KnowledgeHit, Passage
from ._knowledge_render import render_passages
from ._memory import check_limit, check_search

__all__ = [
    "COLUMNS", "add", "check_category", "dump_metas", "indexed", "ingest", "ingest_file",
    "passage", "ranked_hits", "retrieve_for_prompt", "row_text", "search_args",
]  # fmt: skip

# The columns a search reads, in the order `row_text` and `passage` expect.
COLUMNS = "c.kid, c.source, c.idx, c.category, c.active, c.heading_path, c.meta, c.content"


class _Store(Protocol):
    counter: TokenCounter

    def _write(
        self,
        source: str,
        chunks: Sequence[Chunk],
        category: str,
        active: bool,
        meta: Mapping[str, Any] | None,
        extra: Mapping[str, Any],
    ) -> int: ...

    def search_sync(
        self,
        query: str,
        *,
        limit: int = 5,
        categories: Sequence[str] | None = None,
        min_score: float = 0.0,
    ) -> list[KnowledgeHit]: ...


def check_category(category: object) -> str:
    if not isinstance(category, str) or len(category) > 64 or not category.isprintable():
        raise ConfigError(f"category must be a printable string of <= 64, got {category!r}")
    return category


def indexed(heading_path: Sequence[str], content: str) -> str:
    """What the index holds for a chunk: its headings, then its text."""
    return "\n".join([*heading_path, content])


def row_text(row: Sequence[Any]) -> str:
    """What the index holds for a row of `COLUMNS`."""
    return indexed(json.loads(row[5]), row[7])


def passage(row: Sequence[Any]) -> Passage:
    meta = {**json.loads(row[6]), "index": row[2]}
    return Passage(row[7], row[1], row[3], bool(row[4]), tuple(json.loads(row[5])), meta)


# -- writes ------------------------------------------------------------------------------------


def ingest(
    self: _Store,
    text: str,
    *,
    source: str,
    format: Literal["markdown", "text"] = "markdown",
    category: str = "",
    active: bool = True,
    meta: Mapping[str, Any] | None = None,
    max_tokens: int = 300,
    overlap_tokens: int = 40,
) -> int:
    """Chunk ``text`` and store it as ``source`` (replacing that source); returns the chunk count."""
    chunks = chunk_document(
        text, source=source, format=format, max_tokens=max_tokens,
        overlap_tokens=overlap_tokens, counter=self.counter,
    )  # fmt: skip
    return self._write(source, chunks, check_category(category), active, meta, {"format": format})


def ingest_file(
    self: _Store,
    path: str | os.PathLike[str],
    *,
    source: str | None = None,
    format: Literal["markdown", "text"] | None = None,
    category: str = "",
    active: bool = True,
    meta: Mapping[str, Any] | None = None,
    encoding: str = "utf-8",
    max_tokens: int = 300,
    overlap_tokens: int = 40,
) -> int:
    """`ingest` a file: markdown for ``.md``/``.markdown``, else text; source = the file name."""
    p = Path(path)
    try:
        text = p.read_text(encoding=encoding)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {p}: {exc}") from exc
    fmt = format or ("markdown" if p.suffix.lower() in (".md", ".markdown") else "text")
    return ingest(
        self, text, source=source or p.name, format=fmt, category=category, active=active,
        meta={"path": str(p), **(meta or {})}, max_tokens=max_tokens,
        overlap_tokens=overlap_tokens,
    )  # fmt: skip


def add(
    self: _Store,
    content: str,
    *,
    source: str,
    category: str = "experience",
    active: bool = True,
    meta: Mapping[str, Any] | None = None,
) -> int:
    """Store one passage as is (an experience, a FAQ answer) as ``source``, replacing it."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidMessageError("content", "must be a non-empty string")
    check_unicode(content, "content")
    if not isinstance(source, str) or not source:
        raise ConfigError(f"source must be a non-empty string, got {source!r}")
    if (problem := unicode_problem(source)) is not None:
        raise ConfigError(f"source {problem}")
    chunk = Chunk(content, source, (), 0, {})
    return self._write(source, [chunk], check_category(category), active, meta, {})


def dump_metas(
    chunks: Sequence[Chunk], meta: Mapping[str, Any] | None, extra: Mapping[str, Any]
) -> list[str]:
    """Each chunk's metadata as JSON (the ingest's, then ``extra``, then the chunk's own).

    Standard JSON (`dump_json`): a value that is not JSON, a NaN or an infinity,
    is a `ConfigError` naming its path under ``meta``, before anything is written.
    """
    base = dict(meta or {})
    try:
        return [dump_json({**base, **extra, **c.meta}, "meta") for c in chunks]
    except InvalidMessageError as exc:  # meta is an argument of the ingest: ConfigError
        raise ConfigError(str(exc)) from None


# -- reads -------------------------------------------------------------------------------------


def search_args(
    query: str, limit: int, min_score: float, categories: Sequence[str] | None
) -> tuple[int, float, list[str] | None] | None:
    """``(limit, floor, categories)`` checked, or None when the search finds nothing anyway."""
    checked = check_search(query, limit, min_score)
    if checked is None:
        return None
    n, floor = checked
    if isinstance(categories, str):
        raise ConfigError("categories must be a sequence of names, not one string")
    return n, floor, None if categories is None else [check_category(c) for c in categories]


def ranked_hits(
    cands: Candidates, rows: Sequence[Any], weights: SearchWeights, floor: float, n: int
) -> list[KnowledgeHit]:
    """The ``n`` best rows as hits, a passage's score its relevance capped at 1."""
    found: list[tuple[float, Any]] = cands.scored(rows, weights, row_text, floor)
    scored = [(min(rel, 1.0), row) for rel, row in found]
    scored.sort(key=lambda s: (-s[0], s[1][0]))
    return [KnowledgeHit(passage(row), score) for score, row in scored[:n]]


def retrieve_for_prompt(
    self: _Store,
    query: str,
    budget_tokens: int,
    *,
    counter: TokenCounter | None = None,
    limit: int = 5,
    locale: str = "en",
    categories: Sequence[str] | None = None,
    min_score: float = 0.0,
) -> str:
    """The best passages rendered with source and similarity, within ``budget_tokens``."""
    budget = check_limit(budget_tokens, "budget_tokens")
    hits = self.search_sync(query, limit=limit, categories=categories, min_score=min_score)
    return render_passages(hits, budget, counter or self.counter, locale=locale)
