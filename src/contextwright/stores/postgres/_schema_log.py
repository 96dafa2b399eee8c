"""DDL of the conversation tables (migration m002): see `_migrations.py` for the rules.

The tables mirror the SQLite store's (``sqlite/_migrations.py``), so that both
backends keep the same things the same way:

- ``conversations`` keyed by ``(tenant, id)`` with an internal ``cid`` that never
  leaves the store; ``last_seq`` and the running totals (``message_count``,
  ``user_count``, ``token_total``) and ``version`` are updated in the write's
  own transaction, under the row's lock (which serialises the appenders of one
  conversation, and nobody else). ``owner`` is the user who first wrote to it
  (``user`` is a reserved word in PostgreSQL). ``text_docs``/``text_len`` and
  ``tool_docs``/``tool_len`` are the search index's statistics (how many indexed
  messages, how many terms in all) for BM25's average length.
- ``messages`` UNIQUE ``(cid, seq)`` (the primary key) and UNIQUE ``(cid, id)``
  (an idempotent retry by message id). ``parts`` and ``metadata`` are text, not
  jsonb: the verbatim JSON `_rows.parts_json` writes, compared byte for byte on a
  retry (jsonb would reorder keys and refuse ``\\u0000``). ``tsv`` is the search
  vector of the segmented text (``_text.py``), ``dl`` its number of terms.
- ``summaries`` (every version), ``compactions``, ``working_memory`` (with
  ``expires_at``), ``pinned``: each row hangs off its conversation.

Search: a text search configuration ``cw_text`` whose words go through an English
Snowball stemmer *without* stop words (FTS5's ``porter unicode61`` drops none);
CJK never reaches PostgreSQL's parser unsegmented (``_text.py``).
"""

M002_CONVERSATIONS = """
CREATE TEXT SEARCH DICTIONARY cw_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION cw_text (COPY = pg_catalog.simple);
ALTER TEXT SEARCH CONFIGURATION cw_text
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
    WITH cw_stem;

CREATE TABLE conversations (
    cid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant text NOT NULL,
    id text NOT NULL,
    owner text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    last_seq bigint NOT NULL DEFAULT 0,
    message_count bigint NOT NULL DEFAULT 0,
    user_count bigint NOT NULL DEFAULT 0,
    token_total bigint NOT NULL DEFAULT 0,
    metadata text NOT NULL DEFAULT '{}',
    version bigint NOT NULL DEFAULT 0,
    text_docs bigint NOT NULL DEFAULT 0,
    text_len bigint NOT NULL DEFAULT 0,
    tool_docs bigint NOT NULL DEFAULT 0,
    tool_len bigint NOT NULL DEFAULT 0,
    UNIQUE (tenant, id)
);
CREATE INDEX conversations_by_update ON conversations (tenant, updated_at DESC, id);

CREATE TABLE messages (
    cid bigint NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
    seq bigint NOT NULL,
    id text NOT NULL,
    role text NOT NULL,
    name text,
    created_at double precision NOT NULL,
    tokens bigint,
    counter text NOT NULL DEFAULT '',
    size bigint NOT NULL,
    metadata text,
    parts text NOT NULL,
    dl integer NOT NULL DEFAULT 0,
    tsv tsvector,
    PRIMARY KEY (cid, seq),
    UNIQUE (cid, id)
);
CREATE INDEX messages_search ON messages USING gin (tsv);
CREATE INDEX messages_by_name ON messages (cid, name)
    WHERE name IS NOT NULL AND role IN ('user', 'assistant');

CREATE TABLE summaries (
    cid bigint NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
    version integer NOT NULL,
    from_seq bigint NOT NULL,
    upto_seq bigint NOT NULL,
    tokens bigint NOT NULL,
    method text NOT NULL,
    created_at double precision NOT NULL,
    meta text NOT NULL,
    content text NOT NULL,
    PRIMARY KEY (cid, version)
);

CREATE TABLE compactions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cid bigint NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
    at double precision NOT NULL,
    urgency text NOT NULL,
    applied boolean NOT NULL,
    tokens_before bigint NOT NULL,
    tokens_after bigint NOT NULL,
    summary_version integer,
    upto_seq bigint NOT NULL,
    strategies text NOT NULL,
    detail text NOT NULL
);
CREATE INDEX compactions_by_conversation ON compactions (cid, id);

CREATE TABLE working_memory (
    cid bigint NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
    key text NOT NULL,
    created_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    meta text NOT NULL,
    content text NOT NULL,
    PRIMARY KEY (cid, key)
);
CREATE INDEX working_memory_by_expiry ON working_memory (expires_at);

CREATE TABLE pinned (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cid bigint NOT NULL REFERENCES conversations (cid) ON DELETE CASCADE,
    priority bigint NOT NULL,
    created_at double precision NOT NULL,
    content text NOT NULL
);
CREATE INDEX pinned_by_conversation ON pinned (cid, priority, id);
"""

# m007: the search index answers (conversation, role, term) — see ``_search.py``.
# btree_gin (a GIN over (cid, tsv)) is contrib and not in every build (pgserver
# has none), so the conversation and role ride in the indexed value instead: one
# extra lexeme "<cid> <role>", which the parser never produces (it holds a
# space). A term's matches in one conversation are then the intersection of two
# posting lists, which GIN walks from the rarer one; the table-wide index on
# ``tsv`` alone made the planner read every message of the conversation.
# fastupdate off: a pending list is scanned whole by every index scan, and a
# survey runs one scan per query term.
M007_MESSAGE_SEARCH_SCOPE = """
CREATE FUNCTION cw_scoped(cid bigint, role text, tsv tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT tsv || array_to_tsvector(ARRAY[cid::text || ' ' || role]) $$;
CREATE INDEX messages_scoped_search ON messages USING gin (cw_scoped(cid, role, tsv))
    WITH (fastupdate = off) WHERE tsv IS NOT NULL;
DROP INDEX messages_search;
"""
