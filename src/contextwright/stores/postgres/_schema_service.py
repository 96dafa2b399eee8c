"""DDL of the service's tables (migrations m008 and m009): see `_migrations.py` for the rules.

The tables mirror the SQLite store's m010 (``sqlite/_schema.py``):

- ``receipts`` — the receipt (`ContextReport.to_dict`, JSON as text, as the
  other JSON columns: verbatim, and a NUL is refused before it is sent) of recent
  builds, keyed by the ``(tenant, conversation)`` strings, not a ``cid``: a build
  of a conversation that is not stored has one too. ``id`` grows across
  conversations; ``receipts_by_conversation`` serves the newest-first read and
  the pruning to the newest N that each new receipt does in its transaction.
- ``api_keys`` — one row per key by its public ``key_id``: its tenant, a name,
  the hex SHA-256 of its secret (never the secret), when it was made and, once
  revoked, when. ``made`` orders keys made at the same ``created_at``.

Deleting a conversation needs no DDL here: every table of m002 hangs off
``conversations`` with ``ON DELETE CASCADE``, the search vectors (and m007's
scoped GIN entries) are columns of ``messages``, and a ``cid`` is an identity,
never given out twice.

m009 (as the SQLite m011) keeps versions counting across a delete:
``retired_versions`` holds per ``(tenant, id)`` of a deleted conversation its last
``version`` (a number, nothing of its content), and ``conversations.first_version``
the version a conversation's creation left (`ConversationInfo.first_version`): 1,
or one above the retired version. Rows made before m009 get 1.
"""

M008_SERVICE = """
CREATE TABLE receipts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant text NOT NULL,
    conversation text NOT NULL,
    at double precision NOT NULL,
    receipt text NOT NULL
);
CREATE INDEX receipts_by_conversation ON receipts (tenant, conversation, id);

CREATE TABLE api_keys (
    key_id text PRIMARY KEY,
    tenant text NOT NULL,
    name text NOT NULL,
    secret_hash text NOT NULL,
    created_at double precision NOT NULL,
    revoked_at double precision,
    made bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at, made);
"""

M009_RETIRED_VERSIONS = """
CREATE TABLE retired_versions (
    tenant text NOT NULL,
    id text NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (tenant, id)
);
ALTER TABLE conversations ADD COLUMN first_version bigint NOT NULL DEFAULT 1;
"""
