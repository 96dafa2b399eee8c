"""Schema migrations for the SQLite store, as named functions recorded in a table.

Each migration is a function ``mNNN_what(conn)`` registered with `migration`, in
the order it must run. `apply_migrations` runs every one whose name is not yet in
the ``_migrations(name, applied_at)`` table, each inside its own ``BEGIN
IMMEDIATE`` transaction together with the row that records it, so a migration is
either applied and recorded or not at all, and two processes opening the same new
file at once apply it exactly once (the second re-checks under the write lock).
Migrations are never edited once released; a change of schema is a new function
(the pattern of simonw/llm's ``migrations.py``).

The schema ``m001_initial`` creates (why each table looks the way it does):

``conversations`` — keyed by ``(tenant, id)``: ids are only unique within a
tenant. ``cid`` is a compact integer alias used as the foreign key of every other
table, so child rows and their indexes do not repeat two strings per row. The row
carries the running totals (``last_seq``, ``message_count``, ``token_total``) that
`append` updates in the same transaction as the messages, so "how long is this
conversation" is one indexed lookup.

``messages`` — one row per message, ``UNIQUE(cid, seq)`` (reading a range or the
tail walks this index) and ``UNIQUE(cid, id)`` (idempotent retries). The parts
are stored as JSON in the neutral form of `Message.to_dict`, verbatim. Small
columns come first and ``parts`` last: SQLite reads a row's columns in order and
only follows overflow pages when asked for a column stored in them, so walking
``tokens`` over big tool results stays cheap. ``tokens``/``counter`` hold the
count and the name of the counter it came from (NULL when not counted); ``size``
is the length of the searchable text, the basis of an estimate when no usable
count is stored. Messages are never updated (except their counts) nor deleted:
compaction replaces them in the prompt with a summary, never in the store.
``pk`` is ``AUTOINCREMENT`` so that it is never reused: should a future migration
delete messages (erasure on request, say), an index entry it fails to remove can
never be attributed to a later message.

``message_fts`` — a contentless FTS5 index (``content=''``: the text already
lives in ``messages``), rowid = ``messages.pk``. Column ``scope`` holds one token
per conversation so a search intersects with that conversation's postings
instead of filtering every match in the database; ``body`` holds the searchable
text with CJK runs pre-split into overlapping bigrams (see ``_fts.py`` for why
not the trigram tokenizer).

``summaries`` (every version kept), ``compactions`` (append-only log),
``working_memory`` (``expires_at`` indexed for collection) and ``pinned`` hang
off ``cid`` with ``ON DELETE CASCADE``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from .._errors import ConfigError

__all__ = ["MIGRATIONS", "Migration", "apply_migrations", "m001_initial", "migration"]

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration; its ``__name__`` is what gets recorded."""
    MIGRATIONS.append(fn)
    return fn


_M001 = (
    """
    CREATE TABLE conversations (
        tenant        TEXT NOT NULL,
        id            TEXT NOT NULL,
        cid           INTEGER NOT NULL UNIQUE,
        user          TEXT NOT NULL,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        last_seq      INTEGER NOT NULL DEFAULT 0,
        message_count INTEGER NOT NULL DEFAULT 0,
        token_total   INTEGER NOT NULL DEFAULT 0,
        metadata      TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (tenant, id)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX conversations_by_user ON conversations (tenant, user, updated_at)",
    """
    CREATE TABLE messages (
        pk         INTEGER PRIMARY KEY AUTOINCREMENT,
        cid        INTEGER NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        tokens     INTEGER,
        counter    TEXT NOT NULL DEFAULT '',
        size       INTEGER NOT NULL DEFAULT 0,
        id         TEXT NOT NULL,
        role       TEXT NOT NULL,
        created_at REAL NOT NULL,
        name       TEXT,
        metadata   TEXT,
        parts      TEXT NOT NULL
    )
    """,
    "CREATE UNIQUE INDEX messages_by_seq ON messages (cid, seq)",
    "CREATE UNIQUE INDEX messages_by_id ON messages (cid, id)",
    """
    CREATE VIRTUAL TABLE message_fts USING fts5(
        scope, body, content='', tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TABLE summaries (
        cid        INTEGER NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
        version    INTEGER NOT NULL,
        from_seq   INTEGER NOT NULL,
        upto_seq   INTEGER NOT NULL,
        tokens     INTEGER NOT NULL,
        method     TEXT NOT NULL,
        created_at REAL NOT NULL,
        meta       TEXT NOT NULL,
        content    TEXT NOT NULL,
        PRIMARY KEY (cid, version)
    )
    """,
    """
    CREATE TABLE compactions (
        id              INTEGER PRIMARY KEY,
        cid             INTEGER NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
        at              REAL NOT NULL,
        urgency         TEXT NOT NULL,
        applied         INTEGER NOT NULL,
        tokens_before   INTEGER NOT NULL,
        tokens_after    INTEGER NOT NULL,
        summary_version INTEGER,
        upto_seq        INTEGER NOT NULL,
        strategies      TEXT NOT NULL,
        detail          TEXT NOT NULL
    )
    """,
    "CREATE INDEX compactions_by_conversation ON compactions (cid, id)",
    """
    CREATE TABLE working_memory (
        cid        INTEGER NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
        key        TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        meta       TEXT NOT NULL,
        content    TEXT NOT NULL,
        PRIMARY KEY (cid, key)
    )
    """,
    "CREATE INDEX working_memory_by_expiry ON working_memory (expires_at)",
    """
    CREATE TABLE pinned (
        id         INTEGER PRIMARY KEY,
        cid        INTEGER NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
        priority   INTEGER NOT NULL,
        created_at REAL NOT NULL,
        content    TEXT NOT NULL
    )
    """,
    "CREATE INDEX pinned_by_conversation ON pinned (cid, priority, id)",
)


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    """Conversations, messages with their FTS index, summaries, compactions, working memory, pins."""
    # One execute per statement: executescript() would COMMIT the surrounding
    # transaction first, and the migration must commit together with its record.
    for statement in _M001:
        conn.execute(statement)


def _applied(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM _migrations")}


def apply_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """Apply, in order, the migrations not yet recorded; return the names applied now.

    ``conn`` must be in autocommit mode (``isolation_level=None``): transactions
    are managed here, one per migration.
    """
    names = [m.__name__ for m in migrations]
    if len(set(names)) != len(names):
        raise ConfigError(f"migration names must be unique, got {names}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    done = _applied(conn)
    ran: list[str] = []
    for fn in migrations:
        if fn.__name__ in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it between our read and the lock.
            if fn.__name__ not in _applied(conn):
                fn(conn)
                conn.execute(
                    "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
                    (fn.__name__, time.time()),
                )
                ran.append(fn.__name__)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
    return ran
