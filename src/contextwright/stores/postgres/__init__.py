"""The PostgreSQL backend: the same contract as SQLite, for many workers on one server.

Needs the ``postgres`` extra (psycopg 3, psycopg_pool, pgvector). Select it by
URL: ``Conversations(engine, "postgresql://…")``. Tables live in the
``contextwright`` schema, created by versioned migrations (`migrate`) under an
advisory lock, so several workers starting at once apply each exactly once.
`PostgresBackend` (``_backend.py``) provides every role of the store contract;
psycopg is imported only when one is opened.
"""

from ._backend import PostgresBackend

__all__ = ["PostgresBackend"]
