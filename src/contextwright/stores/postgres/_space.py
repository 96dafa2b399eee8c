"""The embedding space of a PostgreSQL index, and the HNSW index it creates on first use.

The rule is SQLite's (``sqlite/_vectors.py`` `SpaceGuard`, whose embedding side —
shape checks and the small LRU of recent texts' vectors — this class inherits):
one model and dimension per kind (``memory``, ``knowledge``) per database, recorded
by the first vector written; a store opened with another embedder raises
`ConfigError` naming both.

What PostgreSQL adds: pgvector's HNSW index needs a fixed dimension, and the
column is an untyped ``vector`` because only the embedder knows it. So recording
the space also creates ``<table>_hnsw``, a partial expression index on
``(embedding::vector(d))`` with ``vector_cosine_ops``, in the same transaction as
the first vector. Concurrent first writers are serialised by a transaction-scoped
advisory lock, so the space is recorded and the index created exactly once.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import OrderedDict
from typing import Any

import numpy as np

from ..._errors import ConfigError
from ...llm._embed import Embedder, Vectors
from ..sqlite._vectors import SpaceGuard

__all__ = ["PgSpace", "vector_literal"]


def vector_literal(vector: Vectors | None) -> str | None:
    """A float32 vector as pgvector's text form (exact: float32 → float64 repr)."""
    if vector is None:
        return None
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float32).tolist())) + "]"


class PgSpace(SpaceGuard):
    """The embedding space of ``kind`` (rows in ``table``) in the database of ``pool``."""

    def __init__(
        self, pool: Any, kind: str, table: str, embedder: Embedder | None, *, cache_size: int = 256
    ) -> None:
        self.kind = kind
        self.table = table
        self.embedder = embedder
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self._lock_key = zlib.crc32(f"cw-space-{kind}".encode())
        with pool.connection() as conn:
            self.recorded = self._read(conn)
        self._wanted: tuple[str, int] | None = None
        if embedder is not None:
            name, dim = embedder.name, embedder.dimension
            if not isinstance(name, str) or not name:
                raise ConfigError(f"embedder {embedder!r} has no name")
            if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= 2000:
                raise ConfigError(
                    f"embedder {name} has no usable dimension (pgvector's HNSW: 1..2000): {dim!r}"
                )
            self._wanted = (name, dim)
            self._check(self.recorded)

    def _read(self, conn: Any) -> tuple[str, int] | None:
        row = conn.execute(
            "SELECT model, dimension FROM embedding_spaces WHERE kind = %s", (self.kind,)
        ).fetchone()
        return None if row is None else (row[0], int(row[1]))

    def _check(self, recorded: tuple[str, int] | None) -> None:
        if recorded is not None and self._wanted is not None and recorded != self._wanted:
            raise ConfigError(
                f"the {self.kind} index of this database holds vectors of {recorded[0]} "
                f"({recorded[1]} dimensions); refusing {self._wanted[0]} ({self._wanted[1]} "
                "dimensions): one index cannot mix embedding models. Use the same embedder, "
                "or another database."
            )

    @property
    def cast(self) -> str:
        """``::vector(d)`` for the recorded dimension (what the HNSW index is built on)."""
        return f"::vector({self.dimension})"

    def record(self, conn: Any) -> None:
        """Inside a write transaction: record the space and create its HNSW index, once.

        The caller calls `confirm` once the transaction has committed (a rolled-back
        one recorded nothing, and the next write records again).
        """
        if self._wanted is None or self.recorded == self._wanted:
            return
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
        current = self._read(conn)
        self._check(current)
        if current is None:
            dim = self._wanted[1]
            conn.execute(
                "INSERT INTO embedding_spaces (kind, model, dimension, created_at) "
                "VALUES (%s, %s, %s, %s)",
                (self.kind, *self._wanted, time.time()),
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {self.table}_hnsw ON {self.table} USING hnsw "
                f"((embedding::vector({dim})) vector_cosine_ops) WHERE embedding IS NOT NULL"
            )

    def confirm(self) -> None:
        """After the transaction that called `record` committed: the space is recorded."""
        if self._wanted is not None:
            self.recorded = self._wanted
