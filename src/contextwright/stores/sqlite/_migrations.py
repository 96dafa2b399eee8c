"""Schema migrations for the SQLite store, as named functions recorded in a table.

Each migration is a function ``mNNN_what(conn)`` registered with `migration`, in
the order it must run. `apply_migrations` runs every one whose name is not yet in
the ``_migrations(name, applied_at)`` table, each inside its own ``BEGIN
IMMEDIATE`` transaction together with the row that records it, so a migration is
either applied and recorded or not at all, and two processes opening the same new
file at once apply it exactly once (the second re-checks under the write lock); a
file that records a migration this version does not know is refused (`SchemaError`).
Released migrations are never edited; a change is a new function (simonw/llm's way).
Since m010 a conversation can be deleted (`SQLiteStore.delete_conversation`, a
user's request to be forgotten), with everything stored under it; since m011 one
made again under its id continues above its last version.

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
count is stored. Messages are never updated (except their counts) nor deleted
but with their whole conversation (m010): compaction replaces them in the prompt
with a summary, never in the store.
``pk`` is ``AUTOINCREMENT`` so that it is never reused: should a future migration
delete messages (erasure on request, say), an index entry it fails to remove can
never be attributed to a later message.

``message_fts`` — a contentless FTS5 index (``content=''``: the text already
lives in ``messages``) of the searchable text, CJK runs pre-split into
overlapping bigrams (see ``_fts.py`` for why not the trigram tokenizer). Until
m004 its rowid was ``messages.pk`` and a ``scope`` column held one token per
conversation; since m004 the rowid is ``cid << 32 | seq``, so a conversation is
one rowid range, and tool results are in ``tool_result_fts`` (``_fts.py``).
Since m005 a message is indexed when its conversation is first searched after
it was stored, not when it is stored: ``conversations.fts_seq`` says how far.

``summaries`` (every version kept), ``compactions`` (append-only log),
``working_memory`` (``expires_at`` indexed for collection) and ``pinned`` hang
off ``cid`` with ``ON DELETE CASCADE``.

``m002_memory`` adds long-term memory (the ``memory`` part) to the same file, so one
database holds a user's conversations and what was learnt from them:

``memory_scopes`` — one row per (tenant, user, namespace) with a compact ``sid``,
the key of every memory row (the ``cid`` pattern: the three strings are stored
once, and a ``sid`` never leaves the store, so no memory is reachable without
naming its whole scope). ``version`` counts the writes that change what a search
may return; a process caching the scope's vectors compares it to notice writes by
others. ``size`` (rows stored) lets a search choose its FTS plan without counting.

``memories`` — one row per memory, never updated in content: a newer statement is
a new row, the old one gets ``superseded_by``/``superseded_at``. ``mid`` is
``AUTOINCREMENT`` (never reused: it is also the FTS and vector rowid, and the
vector cache relies on ids growing). ``fingerprint`` is a hash of the normalised
content, indexed, for exact-duplicate checks. ``memories_by_scope`` is on ``sid``
alone, so it lists a scope's rows in ``mid`` order (the rowid ends every index
entry): loading a scope's vectors in id order needs no sort (0.5 s instead of 1.3 s
for 100,000). ``memories_top`` is a partial index
holding only live memories in (importance, created_at) order, so "the n most
important" reads n index entries. ``key`` (a fact's name, such as "age") is indexed
for supersession. Small columns first, ``content`` last (see ``messages``).

``memory_fts`` — contentless FTS5 like ``message_fts``: ``scope`` holds one token
per scope (``s<sid>``), ``body`` the content with CJK runs split into bigrams.

``memory_vectors`` — the embedding of a memory as a float32 blob, rowid = ``mid``.
Apart from ``memories`` so that scans of memories never read past 1.5 KB of vector.

``embedding_spaces`` — per index (``memory``, ``knowledge``) the model name and
dimension of its vectors, written with the first vector; stores refuse another.

``m003_knowledge`` adds shared documents, scoped by tenant only: ``knowledge_scopes``
(``tid``, ``version`` and ``size`` per tenant), ``knowledge_chunks`` (one row per chunk of a
source; re-ingesting a source replaces its chunks), ``knowledge_fts`` and
``knowledge_vectors`` on the same plan as the memory tables.

The statements of m001-m003, m010 and m011 are in ``_schema.py``, with what m010's
tables (receipts, API keys, retired ``cid``s) and m011's (retired versions) are for.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..._errors import ConfigError, SchemaError
from ._schema import M001_INITIAL, M002_MEMORY, M003_KNOWLEDGE, M010_SERVICE, M011_RETIRED_VERSIONS

__all__ = [
    "MIGRATIONS",
    "Migration",
    "apply_migrations",
    "m001_initial",
    "m002_memory",
    "m003_knowledge",
    "m004_fts_by_conversation",
    "m005_index_when_searched",
    "m006_jobs",
    "m007_messages_by_name",
    "m008_conversation_version",
    "m009_user_count",
    "m010_service",
    "m011_versions_across_deletes",
    "migration",
]

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration; its ``__name__`` is what gets recorded."""
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    """Conversations, messages with their FTS index, summaries, compactions, working memory, pins."""
    # One execute per statement: executescript() would COMMIT the surrounding
    # transaction first, and the migration must commit together with its record.
    for statement in M001_INITIAL:
        conn.execute(statement)


@migration
def m002_memory(conn: sqlite3.Connection) -> None:
    """Long-term memories per scope, their FTS index and vectors, and the embedding spaces."""
    for statement in M002_MEMORY:
        conn.execute(statement)


@migration
def m003_knowledge(conn: sqlite3.Connection) -> None:
    """Knowledge chunks per tenant, their FTS index and vectors."""
    for statement in M003_KNOWLEDGE:
        conn.execute(statement)


_FTS = "content='', tokenize='porter unicode61 remove_diacritics 2'"


@migration
def m004_fts_by_conversation(conn: sqlite3.Connection) -> None:
    """Index messages by (conversation, seq) rowids, tool results in an index of their own.

    Rowid ``cid << 32 | seq`` makes a conversation one rowid range, replacing the
    ``scope`` token, whose doclist BM25 walked in full on every search; tool
    results, usually most of the text, no longer sit among the turns. See
    ``_fts.py``. The contentless index is rebuilt from the stored messages, in
    pages (about 20,000 messages a second).
    """
    from ._fts import write_index
    from ._rows import MSG_COLUMNS, message

    conn.execute("DROP TABLE message_fts")
    conn.execute(f"CREATE VIRTUAL TABLE message_fts USING fts5(body, {_FTS})")
    conn.execute(f"CREATE VIRTUAL TABLE tool_result_fts USING fts5(body, {_FTS})")
    cursor = conn.execute(f"SELECT m.cid, {MSG_COLUMNS} FROM messages m ORDER BY m.pk")
    while page := cursor.fetchmany(2000):
        write_index(conn, [(cid, message(stored)) for cid, *stored in page])


@migration
def m005_index_when_searched(conn: sqlite3.Connection) -> None:
    """Messages are indexed for full-text search when their conversation is first searched.

    ``conversations.fts_seq``: the messages up to this seq are in the full-text
    index. Appending no longer indexes (that was about 40 % of appending a
    message, and of a bulk import); a search first indexes the messages after
    ``fts_seq``, in a write transaction of its own (``SQLiteStore._indexed``).
    Files indexed eagerly until now are complete: their ``fts_seq`` is
    ``last_seq``.
    """
    conn.execute("ALTER TABLE conversations ADD COLUMN fts_seq INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE conversations SET fts_seq = last_seq")


@migration
def m006_jobs(conn: sqlite3.Connection) -> None:
    """Background jobs (summaries, memory writes) that any process may claim with a lease.

    ``jobs`` — one row per pending, running or failed job (a completed one is
    deleted; see ``_sqlite_jobs.py``). ``jobs_active`` is a partial unique index:
    at most one pending-or-running job per ``(tenant, kind, key)``, which is what
    makes enqueueing idempotent. ``jobs_due`` serves a claim: the oldest pending
    job due now, or a running one whose ``lease_until`` has passed. ``claim``
    counts the claims, the holder's fencing token. ``owner`` is the worker that
    enqueued the job: it gets the first claim, others only a lease after the job
    fell due (the owner may have died), so a job usually runs where the
    conversation's caches are warm.
    """
    conn.execute(
        """CREATE TABLE jobs (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            tenant      TEXT NOT NULL,
            kind        TEXT NOT NULL,
            key         TEXT NOT NULL,
            state       TEXT NOT NULL CHECK (state IN ('pending', 'running', 'failed')),
            attempts    INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            run_after   REAL NOT NULL,
            owner       TEXT,
            worker      TEXT,
            lease_until REAL,
            claim       INTEGER NOT NULL DEFAULT 0,
            error       TEXT,
            created_at  REAL NOT NULL,
            payload     TEXT NOT NULL
        )"""
    )
    conn.execute(
        "CREATE UNIQUE INDEX jobs_active ON jobs (tenant, kind, key) "
        "WHERE state IN ('pending', 'running')"
    )
    conn.execute("CREATE INDEX jobs_due ON jobs (kind, state, run_after)")


@migration
def m007_messages_by_name(conn: sqlite3.Connection) -> None:
    """An index of the named turns of each conversation (recall's speakers, `speaker_names`).

    Partial: messages without a name (most of an agent's thread) and tool
    results cost nothing.
    """
    conn.execute(
        "CREATE INDEX messages_by_name ON messages (cid, name, seq) "
        "WHERE name IS NOT NULL AND role IN ('user', 'assistant')"
    )


@migration
def m008_conversation_version(conn: sqlite3.Connection) -> None:
    """A per-conversation ``version``, bumped by every write to the conversation.

    Each write that changes a conversation's rows (its creation, appends, recounts,
    summaries, compaction log entries, working memory, pins) adds one to it in
    its own transaction, so any process can tell whether what it cached of a
    conversation is current by reading one integer off the primary key
    (`SQLiteStore.version`). Existing conversations start at their message count
    plus one if they hold messages, else 1: any value works as long as it only
    grows, and a non-zero one says "it exists".
    """
    conn.execute("ALTER TABLE conversations ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE conversations SET version = message_count + 1")


@migration
def m009_user_count(conn: sqlite3.Connection) -> None:
    """The count of a conversation's user messages, kept with it like ``message_count``.

    A conversation's first build in a process counts the user turns before its
    tail (the engine's turn number); counting them in ``messages`` read every
    row of the conversation (28 ms at 100,000 messages). `append` adds to it in
    the same transaction; existing conversations are counted once here.
    """
    conn.execute("ALTER TABLE conversations ADD COLUMN user_count INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE conversations SET user_count = "
        "(SELECT count(*) FROM messages m WHERE m.cid = conversations.cid AND m.role = 'user')"
    )


@migration
def m010_service(conn: sqlite3.Connection) -> None:
    """Build receipts, API keys, and the high-water mark of deleted conversations' ``cid``.

    What the HTTP service and the inspector keep (`Receipts`, `ApiKeys`), and
    ``retired_cids`` for `SQLiteStore.delete_conversation`: a new conversation
    takes a ``cid`` above every one ever given out. See ``_schema.py``.
    """
    for statement in M010_SERVICE:
        conn.execute(statement)


@migration
def m011_versions_across_deletes(conn: sqlite3.Connection) -> None:
    """A deleted conversation's last version, kept by id, above which one made again starts.

    ``retired_versions`` and ``conversations.first_version`` (see ``_schema.py``):
    without them a conversation made again after a delete restarted at version 1,
    and a process whose cache of the deleted one was current at the version the
    new one reached took that cache for current. Existing conversations keep their
    versions and get ``first_version`` 1.
    """
    for statement in M011_RETIRED_VERSIONS:
        conn.execute(statement)


def _applied(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM _migrations")}


def pending_migrations(path: str, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """The names not yet applied to the file at ``path`` (read only; all for a new file)."""
    names = [m.__name__ for m in migrations]
    if path == ":memory:" or not Path(path).exists():
        return names
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE name = '_migrations'").fetchone()
        done = _applied(conn) if has else set()
    return [n for n in names if n not in done]


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
    if newer := sorted(done - set(names)):
        raise SchemaError(
            f"the database schema is newer than this contextwright knows (it has "
            f"{', '.join(newer)}): upgrade contextwright, or use another database"
        )
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
