"""DDL of the SQLite store's tables, by migration: see ``_migrations.py`` for why each looks so.

``_migrations.py`` registers the migrations and says what each one's tables are
for; the statements of the larger ones live here, one string per statement
(``executescript`` would commit the migration's transaction early). Released
statements are never edited: a change of schema is a new migration.

``M010_SERVICE`` (``m010_service``) adds what the HTTP service and the inspector
keep beside the conversations:

``receipts`` — the receipt (`ContextReport.to_dict`, JSON text) of recent
builds, keyed by ``(tenant, conversation)`` strings rather than a ``cid``: a
build of a conversation that is not stored (``store_message=False`` of a new id)
has one too. ``id`` is ``AUTOINCREMENT``, growing across conversations, and
``receipts_by_conversation`` on ``(tenant, conversation, id)`` serves both the
newest-first read and the pruning to the newest N that each new receipt does in
its own transaction.

``api_keys`` — one row per key, by its public ``key_id``: the tenant it serves,
a name, the hex SHA-256 of its secret (never the secret), when it was made and,
once revoked, when. ``api_keys_by_tenant`` lists a tenant's keys oldest first.

``retired_cids`` — the highest ``cid`` of a deleted conversation, so that a
``cid`` is never given out twice: the full-text index's rowids carry it
(``_fts.py``), and an index entry that outlived its conversation could never be
attributed to another one.

``M011_RETIRED_VERSIONS`` (``m011_versions_across_deletes``) makes a
conversation's versions keep counting across a delete:

``retired_versions`` — per ``(tenant, id)`` of a deleted conversation, its last
``version`` (a number, nothing of its content). A conversation made again under
that id starts above it, so no version of an id is given out twice and a cache
of the deleted conversation, in any process, is never taken for current.

``conversations.first_version`` — the version the conversation's creation left
(`ConversationInfo.first_version`): 1, or one above the retired version. Rows
made before m011 get 1 (their ids had versions from 1 too).
"""

from __future__ import annotations

__all__ = ["M001_INITIAL", "M002_MEMORY", "M003_KNOWLEDGE", "M010_SERVICE", "M011_RETIRED_VERSIONS"]

M001_INITIAL = (
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

M002_MEMORY = (
    """
    CREATE TABLE memory_scopes (
        sid       INTEGER PRIMARY KEY,
        tenant    TEXT NOT NULL,
        user      TEXT NOT NULL,
        namespace TEXT NOT NULL,
        version   INTEGER NOT NULL DEFAULT 0,
        size      INTEGER NOT NULL DEFAULT 0,
        UNIQUE (tenant, user, namespace)
    )
    """,
    """
    CREATE TABLE memories (
        mid             INTEGER PRIMARY KEY AUTOINCREMENT,
        sid             INTEGER NOT NULL REFERENCES memory_scopes (sid),
        id              TEXT NOT NULL UNIQUE,
        category        TEXT NOT NULL,
        key             TEXT,
        importance      INTEGER NOT NULL,
        active          INTEGER NOT NULL DEFAULT 1,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        accessed_at     REAL,
        access_count    INTEGER NOT NULL DEFAULT 0,
        superseded_by   TEXT,
        superseded_at   REAL,
        embedding_model TEXT,
        fingerprint     TEXT NOT NULL,
        source_ids      TEXT NOT NULL DEFAULT '[]',
        meta            TEXT NOT NULL DEFAULT '{}',
        content         TEXT NOT NULL
    )
    """,
    "CREATE INDEX memories_by_scope ON memories (sid)",
    """
    CREATE INDEX memories_top ON memories (sid, importance DESC, created_at DESC)
    WHERE superseded_by IS NULL AND active = 1
    """,
    "CREATE INDEX memories_by_key ON memories (sid, category, key) WHERE key IS NOT NULL",
    "CREATE INDEX memories_by_fingerprint ON memories (sid, fingerprint)",
    """
    CREATE VIRTUAL TABLE memory_fts USING fts5(
        scope, body, content='', tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TABLE memory_vectors (
        mid    INTEGER PRIMARY KEY REFERENCES memories (mid) ON DELETE CASCADE,
        vector BLOB NOT NULL
    )
    """,
    """
    CREATE TABLE embedding_spaces (
        kind       TEXT PRIMARY KEY,
        model      TEXT NOT NULL,
        dimension  INTEGER NOT NULL,
        created_at REAL NOT NULL
    )
    """,
)

M003_KNOWLEDGE = (
    """
    CREATE TABLE knowledge_scopes (
        tid     INTEGER PRIMARY KEY,
        tenant  TEXT NOT NULL UNIQUE,
        version INTEGER NOT NULL DEFAULT 0,
        size    INTEGER NOT NULL DEFAULT 0
    )
    """,
    """
    CREATE TABLE knowledge_chunks (
        kid             INTEGER PRIMARY KEY AUTOINCREMENT,
        tid             INTEGER NOT NULL REFERENCES knowledge_scopes (tid),
        source          TEXT NOT NULL,
        idx             INTEGER NOT NULL,
        category        TEXT NOT NULL DEFAULT '',
        active          INTEGER NOT NULL DEFAULT 1,
        created_at      REAL NOT NULL,
        embedding_model TEXT,
        heading_path    TEXT NOT NULL DEFAULT '[]',
        meta            TEXT NOT NULL DEFAULT '{}',
        content         TEXT NOT NULL,
        UNIQUE (tid, source, idx)
    )
    """,
    "CREATE INDEX knowledge_by_tenant ON knowledge_chunks (tid)",
    """
    CREATE VIRTUAL TABLE knowledge_fts USING fts5(
        scope, body, content='', tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TABLE knowledge_vectors (
        kid    INTEGER PRIMARY KEY REFERENCES knowledge_chunks (kid) ON DELETE CASCADE,
        vector BLOB NOT NULL
    )
    """,
)

M010_SERVICE = (
    """
    CREATE TABLE receipts (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant       TEXT NOT NULL,
        conversation TEXT NOT NULL,
        at           REAL NOT NULL,
        receipt      TEXT NOT NULL
    )
    """,
    "CREATE INDEX receipts_by_conversation ON receipts (tenant, conversation, id)",
    """
    CREATE TABLE api_keys (
        key_id      TEXT PRIMARY KEY,
        tenant      TEXT NOT NULL,
        name        TEXT NOT NULL,
        secret_hash TEXT NOT NULL,
        created_at  REAL NOT NULL,
        revoked_at  REAL
    )
    """,
    "CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at)",
    "CREATE TABLE retired_cids (cid INTEGER PRIMARY KEY)",
)

M011_RETIRED_VERSIONS = (
    """
    CREATE TABLE retired_versions (
        tenant  TEXT NOT NULL,
        id      TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (tenant, id)
    ) WITHOUT ROWID
    """,
    "ALTER TABLE conversations ADD COLUMN first_version INTEGER NOT NULL DEFAULT 1",
)
