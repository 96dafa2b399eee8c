"""Versioned schema migrations for PostgreSQL, applied once under an advisory lock.

`MIGRATIONS` is the ordered list; each is a name and its SQL, recorded in
``contextwright.migrations`` in the same transaction that applies it. `migrate`
takes a transaction-scoped advisory lock first, so when several workers start at
once against a new database one applies everything and the others, once the lock
is theirs, find nothing left to do. A database that records a migration this
version does not know was migrated by a newer contextwright: `check_schema` (run
by every backend on open) refuses it with a `SchemaError` rather than guess.
Released migrations are never edited; a change of schema is a new entry.

m001 creates the schema and needs the pgvector extension: if the server does not
have it, the error says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._errors import SchemaError
from ._connect import SCHEMA, check_url, psycopg, redact, translated
from ._schema_jobs import M003_JOBS
from ._schema_log import M002_CONVERSATIONS, M007_MESSAGE_SEARCH_SCOPE
from ._schema_memory import M004_MEMORY, M005_KNOWLEDGE, M006_MEMORY_FILLFACTOR
from ._schema_service import M008_SERVICE, M009_RETIRED_VERSIONS

__all__ = ["MIGRATIONS", "PgMigration", "check_schema", "migrate", "migrate_url"]

# pg_advisory_xact_lock key: the bytes of "cw-migr" as an int (any constant works,
# it only has to be the same in every worker and unlikely to be used by others)
_LOCK_KEY = 0x63772D6D69677201


@dataclass(frozen=True, slots=True)
class PgMigration:
    name: str
    sql: str


M001_SCHEMA = f"CREATE SCHEMA IF NOT EXISTS {SCHEMA};"

MIGRATIONS: tuple[PgMigration, ...] = (
    PgMigration("m001_schema", M001_SCHEMA),
    PgMigration("m002_conversations", M002_CONVERSATIONS),
    PgMigration("m003_jobs", M003_JOBS),
    PgMigration("m004_memory", M004_MEMORY),
    PgMigration("m005_knowledge", M005_KNOWLEDGE),
    PgMigration("m006_memory_fillfactor", M006_MEMORY_FILLFACTOR),
    PgMigration("m007_message_search_scope", M007_MESSAGE_SEARCH_SCOPE),
    PgMigration("m008_service", M008_SERVICE),
    PgMigration("m009_versions_across_deletes", M009_RETIRED_VERSIONS),
)

_NO_VECTOR = (
    "the PostgreSQL server has no pgvector extension: install it on the server "
    "(Debian: apt-get install postgresql-<version>-pgvector; or run the pgvector/pgvector "
    "image) and let a superuser run CREATE EXTENSION vector"
)


def _ensure_vector(conn: Any) -> None:
    pg = psycopg()
    have = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    if have:
        return
    available = conn.execute(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
    ).fetchone()
    if not available:
        raise SchemaError(_NO_VECTOR)
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except pg.errors.InsufficientPrivilege as exc:
        raise SchemaError(
            "pgvector is installed on the server but not enabled in this database, and this "
            "user may not enable it: let a superuser run CREATE EXTENSION vector"
        ) from exc


def _applied(conn: Any) -> list[str]:
    exists = conn.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'migrations'",
        (SCHEMA,),
    ).fetchone()
    if not exists:
        return []
    return [r[0] for r in conn.execute(f"SELECT name FROM {SCHEMA}.migrations ORDER BY position")]


def _check_known(applied: Sequence[str], migrations: Sequence[PgMigration]) -> None:
    known = {m.name for m in migrations}
    newer = [n for n in applied if n not in known]
    if newer:
        raise SchemaError(
            f"the database schema is newer than this contextwright knows (it has "
            f"{', '.join(newer)}): upgrade contextwright, or use another database"
        )


def migrate(conn: Any, migrations: Sequence[PgMigration] = MIGRATIONS) -> list[str]:
    """Apply, in one transaction under the advisory lock, the migrations not yet recorded.

    ``conn`` is a sync psycopg connection in autocommit mode. Returns the names
    applied now (empty when the database was current).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        applied = _applied(conn)
        _check_known(applied, migrations)
        todo = [m for m in migrations if m.name not in applied]
        if not todo:
            return []
        _ensure_vector(conn)
        conn.execute(M001_SCHEMA)
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations ("
            "name text PRIMARY KEY, position int NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(f"SET LOCAL search_path TO {SCHEMA}, public")
        position = len(applied)
        for m in todo:
            conn.execute(m.sql)
            position += 1
            conn.execute(
                f"INSERT INTO {SCHEMA}.migrations (name, position) VALUES (%s, %s)",
                (m.name, position),
            )
        return [m.name for m in todo]


def check_schema(conn: Any, migrations: Sequence[PgMigration] = MIGRATIONS) -> list[str]:
    """The migrations still to apply; `SchemaError` if the database's schema is newer."""
    applied = _applied(conn)
    _check_known(applied, migrations)
    return [m.name for m in migrations if m.name not in applied]


def migrate_url(url: str, *, connect_timeout: float = 10.0) -> list[str]:
    """`migrate` the database at ``url`` (what ``contextwright migrate --db URL`` runs)."""
    url = check_url(url)
    pg = psycopg()
    timeout = max(1, int(connect_timeout))
    with (
        translated(f"migrating {redact(url)}"),
        pg.connect(url, autocommit=True, connect_timeout=timeout) as conn,
    ):
        return migrate(conn)
