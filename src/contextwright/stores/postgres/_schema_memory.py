"""DDL of long-term memory and knowledge (migrations m004, m005): see `_migrations.py`.

The plan of the SQLite tables (``stores/sqlite/_migrations.py`` m002/m003), with
PostgreSQL's own index kinds:

- ``memory_scopes`` / ``knowledge_scopes``: one row per (tenant, user, namespace) or
  per tenant, with a compact ``sid`` / ``tid`` and ``size`` (rows ever kept, the
  vector search picks its plan by it). A write locks its scope row (``INSERT … ON
  CONFLICT DO UPDATE``), so writes to one scope are serialised as SQLite's
  ``BEGIN IMMEDIATE`` serialises them, and two workers superseding one key cannot
  both leave a live memory.
- ``memories`` / ``knowledge_chunks``: the rows, with ``tsv``, the text as
  ``to_tsvector('english', segment(text))`` (CJK runs as overlapping bigrams, as the
  FTS5 tables hold them), under a GIN index; and ``embedding``, an *untyped*
  pgvector ``vector``. An HNSW index needs a fixed dimension, which only the
  embedder knows: the first vector written records the space (``embedding_spaces``,
  one model and dimension per kind, as in SQLite) and creates the partial
  expression index ``… USING hnsw ((embedding::vector(d)) vector_cosine_ops) WHERE
  embedding IS NOT NULL`` (``_space.py``). One space per kind means one such index.
- ``embedding_spaces``: per kind (``memory``, ``knowledge``) the model and dimension.
"""

M004_MEMORY = """
CREATE TABLE embedding_spaces (
    kind        text PRIMARY KEY,
    model       text NOT NULL,
    dimension   integer NOT NULL CHECK (dimension > 0),
    created_at  double precision NOT NULL
);
CREATE TABLE memory_scopes (
    sid         bigserial PRIMARY KEY,
    tenant      text NOT NULL,
    "user"      text NOT NULL,
    namespace   text NOT NULL,
    size        bigint NOT NULL DEFAULT 0,
    UNIQUE (tenant, "user", namespace)
);
CREATE TABLE memories (
    mid             bigserial PRIMARY KEY,
    sid             bigint NOT NULL REFERENCES memory_scopes (sid),
    id              text NOT NULL UNIQUE,
    category        text NOT NULL,
    key             text,
    importance      integer NOT NULL CHECK (importance BETWEEN 0 AND 100),
    active          boolean NOT NULL DEFAULT true,
    created_at      double precision NOT NULL,
    updated_at      double precision NOT NULL,
    accessed_at     double precision,
    access_count    integer NOT NULL DEFAULT 0,
    superseded_by   text,
    superseded_at   double precision,
    embedding_model text,
    fingerprint     text NOT NULL,
    source_ids      text NOT NULL,
    meta            text NOT NULL,
    content         text NOT NULL,
    tsv             tsvector NOT NULL,
    embedding       vector
);
CREATE INDEX memories_by_scope ON memories (sid, importance DESC, created_at DESC);
CREATE INDEX memories_by_key ON memories (sid, category, key) WHERE superseded_by IS NULL;
CREATE INDEX memories_by_fingerprint ON memories (sid, fingerprint);
CREATE INDEX memories_tsv ON memories USING gin (tsv);
"""

M005_KNOWLEDGE = """
CREATE TABLE knowledge_scopes (
    tid         bigserial PRIMARY KEY,
    tenant      text NOT NULL UNIQUE,
    size        bigint NOT NULL DEFAULT 0
);
CREATE TABLE knowledge_chunks (
    kid             bigserial PRIMARY KEY,
    tid             bigint NOT NULL REFERENCES knowledge_scopes (tid),
    source          text NOT NULL,
    idx             integer NOT NULL,
    category        text NOT NULL,
    active          boolean NOT NULL DEFAULT true,
    created_at      double precision NOT NULL,
    embedding_model text,
    heading_path    text NOT NULL,
    meta            text NOT NULL,
    content         text NOT NULL,
    tsv             tsvector NOT NULL,
    embedding       vector
);
CREATE INDEX knowledge_by_source ON knowledge_chunks (tid, source);
CREATE INDEX knowledge_tsv ON knowledge_chunks USING gin (tsv);
"""

# m006: room on every page of ``memories`` for a HOT update. A search's access
# statistics (`PostgresMemoryStore._touch`) update two unindexed columns; on a full
# page the new version goes elsewhere and every index gets an entry for it — the
# HNSW graph's insert alone cost 1.2 ms p50 / 6.9 ms p95 at 200,000 rows (0.3 / 1.4
# ms at 2,000). A row with its 384-d vector is about 2 kB, so a quarter of each
# page stays free for one more version (tables written before keep their pages
# until rewritten: ``VACUUM FULL memories``).
M006_MEMORY_FILLFACTOR = """
ALTER TABLE memories SET (fillfactor = 70);
"""
