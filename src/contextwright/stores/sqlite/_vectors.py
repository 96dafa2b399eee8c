"""Vectors in a store: one embedding space per index, and the per-scope vector cache.

Cosines between vectors of two models mean nothing, and vectors of two dimensions
cannot even be compared, so an index (``memory``, ``knowledge``) accepts the
vectors of one model only. The first vector written records the model's name and
dimension in ``embedding_spaces``; opening the store with another embedder raises
`ConfigError` naming both (the way out: another file, or a fresh index).

`SpaceGuard` also embeds for its store: it checks every batch's shape and keeps a
small LRU cache of recent texts' vectors, because one turn asks the same question
of several stores and sources (user memory top + search, knowledge, experiences)
and `find_similar` before `add` embeds the same text twice.

`VectorCache` keeps each scope's vectors in memory as a `VectorIndex`, loaded once
inside a read transaction and then kept current by the store's own writes
(`after_write`). Each scope row carries a ``version`` that every such write bumps;
a cached index whose version differs from the database's was written to by someone
else (another process, another store object) and is reloaded. At most
``cache_rows`` rows are cached, the least recently used scopes dropped first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._errors import ConfigError
from ...llm._embed import Embedder, Vectors, normalize_rows
from ...text._vectors import VectorIndex
from .. import SQLiteStore

__all__ = ["SpaceGuard", "VectorCache"]

_ANY_TENANT = "_"  # embedding_spaces is per file, not per tenant; _tx wants a name


class SpaceGuard:
    """The embedding space of index ``kind`` in ``db``, enforced for ``embedder``."""

    def __init__(
        self, db: SQLiteStore, kind: str, embedder: Embedder | None, *, cache_size: int = 256
    ) -> None:
        self.db = db
        self.kind = kind
        self.embedder = embedder
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        with db._tx(False, _ANY_TENANT) as conn:
            self.recorded = self._read(conn)
        self._wanted: tuple[str, int] | None = None
        if embedder is not None:
            name, dim = embedder.name, embedder.dimension
            if not isinstance(name, str) or not name:
                raise ConfigError(f"embedder {embedder!r} has no name")
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
                raise ConfigError(f"embedder {name} has no usable dimension: {dim!r}")
            self._wanted = (name, dim)
            self._check(self.recorded)

    def _read(self, conn: Any) -> tuple[str, int] | None:
        row = conn.execute(
            "SELECT model, dimension FROM embedding_spaces WHERE kind = ?", (self.kind,)
        ).fetchone()
        return None if row is None else (row[0], int(row[1]))

    def _check(self, recorded: tuple[str, int] | None) -> None:
        if recorded is not None and self._wanted is not None and recorded != self._wanted:
            raise ConfigError(
                f"the {self.kind} index of {self.db.path} holds vectors of {recorded[0]} "
                f"({recorded[1]} dimensions); refusing {self._wanted[0]} ({self._wanted[1]} "
                "dimensions): one index cannot mix embedding models. Use the same embedder, "
                "or another file."
            )

    @property
    def model(self) -> str | None:
        return self._wanted[0] if self._wanted else (self.recorded[0] if self.recorded else None)

    @property
    def dimension(self) -> int | None:
        return self._wanted[1] if self._wanted else (self.recorded[1] if self.recorded else None)

    def record(self, conn: Any) -> None:
        """Inside a write transaction: record this space unless done (re-checked under the lock)."""
        if self._wanted is None:
            return
        current = self._read(conn)
        self._check(current)
        if current is None:
            conn.execute(
                "INSERT INTO embedding_spaces (kind, model, dimension, created_at) "
                "VALUES (?, ?, ?, ?)",
                (self.kind, *self._wanted, time.time()),
            )
        self.recorded = self._wanted

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Vectors of ``texts`` by the embedder, shape-checked, served from the LRU when known."""
        assert self.embedder is not None
        assert self._wanted is not None
        if not texts:
            return np.zeros((0, self._wanted[1]), dtype=np.float32)
        with self._lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            made = normalize_rows(self.embedder.embed(todo), self._wanted[1], who=self._wanted[0])
            if len(made) != len(todo):
                raise ConfigError(
                    f"{self._wanted[0]} returned {len(made)} vectors for {len(todo)} texts"
                )
            with self._lock:
                for t, v in zip(todo, made, strict=True):
                    known[t] = v
                    if len(t) <= 2000:  # queries and memories, not documents
                        self._cache[t] = v
                        self._cache.move_to_end(t)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return np.stack([known[t] for t in texts])

    def query_vector(self, text: str) -> Vectors | None:
        """The vector of one text, or None without an embedder."""
        if self.embedder is None:
            return None
        vector: Vectors = self.embed([text])[0]
        return vector


class VectorCache:
    """Per-scope `VectorIndex`es of one index (see the module docstring).

    ``load_sql`` selects ``(id, category, superseded, active, vector)`` of one scope,
    by id ascending, with the scope key as its only parameter.
    """

    def __init__(
        self, space: SpaceGuard, load_sql: str, *, cache_rows: int, exact_max: int
    ) -> None:
        self.space = space
        self.load_sql = load_sql
        self.cache_rows = cache_rows
        self.exact_max = exact_max
        self._indexes: OrderedDict[int, VectorIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conn: Any, key: int, version: int) -> VectorIndex | None:
        """The scope's index, (re)loaded inside the caller's transaction if stale."""
        dim = self.space.dimension
        if dim is None:
            return None
        with self._lock:
            index = self._indexes.get(key)
            if index is not None and index.version == version and index.dimension == dim:
                self._indexes.move_to_end(key)
                return index
        rows = conn.execute(self.load_sql, (key,)).fetchall()
        index = VectorIndex(dim, version, exact_max=self.exact_max, capacity=max(64, len(rows)))
        if rows:
            matrix = np.frombuffer(b"".join(r[4] for r in rows), dtype=np.float32)
            index.append(
                [r[0] for r in rows],
                matrix.reshape(len(rows), dim),
                [r[1] for r in rows],
                superseded=[bool(r[2]) for r in rows],
                active=[bool(r[3]) for r in rows],
            )
        with self._lock:
            self._indexes[key] = index
            self._indexes.move_to_end(key)
            total = sum(i.n for i in self._indexes.values())
            while total > self.cache_rows and len(self._indexes) > 1:
                _, dropped = self._indexes.popitem(last=False)
                total -= dropped.n
        return index

    def after_write(
        self, key: int, before: int, after: int, change: Callable[[VectorIndex], None]
    ) -> None:
        """Apply a write of ours to a cached index that was current before it."""
        with self._lock:
            index = self._indexes.get(key)
            if index is None:
                return
            if index.version != before:
                del self._indexes[key]  # someone else wrote in between: reload on next use
                return
            change(index)
            index.version = after

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()
