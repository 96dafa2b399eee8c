"""Fill a PostgreSQL database with the scale data set of issue #20, by COPY, in minutes.

    python bench/make_scale_pg.py postgresql://…/db                 # full size
    python bench/make_scale_pg.py URL --conversations 100 --memories 2000

The database is migrated (`migrate_url`) and must be empty. Two halves:

- **Memories**: ``--memories`` (default 200,000) over ``--memories / --per-scope``
  users of tenant ``acme`` (default 2,000 users x 100), the texts of
  ``bench_memory.memory_texts`` (English and Chinese, one unique tail each),
  embedded by `ScaleEmbedder` (``_scale_embed.py``, 384-d, deterministic: the bench
  embeds its queries with it) through the store's `PgSpace.embed` (its checks and
  normalisation). Every column is computed by the store's own
  functions (`prepare_item` for the JSON columns, `fingerprint`, `segment` and
  ``to_tsvector(TS_CONFIG, …)`` for the search column, vectors as float32 exactly
  as `vector_literal` writes them), loaded by binary COPY into an unlogged
  staging table and moved into ``memories`` in one ``INSERT … SELECT`` with the
  table's own indexes dropped and then recreated from their saved definitions.
  The embedding space row and the HNSW index are made by the store's own
  `PgSpace.record`, after the rows are in (one index build instead of 200,000
  inserts into it), with ``maintenance_work_mem`` raised for the build.
- **Messages**: ``--conversations`` (10,000) x ``--messages`` (100) in tenant
  ``acme``, conversation ``c{k}`` owned by user ``u{k % 2000}``: windows of two long
  seeded threads (``_scale_threads.py``: English, and Chinese for every tenth).
  Each distinct message is prepared once by the service's and the store's own
  functions, as one `Conversations.append` of it would store it (`load_messages`),
  its tsvector made once by the store's own SQL expression; then the per-message
  rows are one ``INSERT … SELECT`` from a (conversation, seq, message) map with
  the table's plain indexes dropped and recreated.

Each phase prints its time; at the end the database size and the HNSW index size.
The generator cannot drift from the schema unnoticed: tests/test_scale_gen.py
builds the same data through the public API into another database and compares.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scale_embed import ScaleEmbedder
from bench_memory import memory_texts
from contextwright.memory import Scope
from contextwright.stores._memory import CATEGORIES
from contextwright.stores.postgres._connect import SCHEMA, open_sync_pool
from contextwright.stores.postgres._hybrid import TS_CONFIG
from contextwright.stores.postgres._memory_rows import prepare_item
from contextwright.stores.postgres._migrations import migrate_url
from contextwright.stores.postgres._space import PgSpace
from contextwright.text._scores import fingerprint
from contextwright.text._terms import segment

warnings.filterwarnings("ignore", category=DeprecationWarning)

TENANT = "acme"
T0 = 1_700_000_000.0
MEMORY_SEED = 7

Log = Callable[[str], None]


def memory_scope(k: int) -> Scope:
    """The scope of user ``k`` (the same in every database the generator makes)."""
    return Scope(TENANT, f"u{k}")


def memory_items(users: int, per_scope: int, seed: int = MEMORY_SEED) -> list[list[dict[str, Any]]]:
    """Per user, its ``per_scope`` memories as `add` arguments plus ``created_at``.

    Prefix-stable: user ``k``'s memories are the same whatever ``users`` is, so a
    scope measured in the full database and in the 1/100 one holds the same rows.
    """
    texts = memory_texts(users * per_scope, seed=seed)
    rng = random.Random(seed)
    out = []
    for k in range(users):
        items = []
        for j in range(per_scope):
            items.append({
                "content": texts[k * per_scope + j],
                "category": rng.choice(CATEGORIES),
                "importance": rng.randint(10, 90),
                "created_at": T0 + 3600.0 * j + k,
            })  # fmt: skip
        out.append(items)
    return out


# -- indexes around a bulk load ----------------------------------------------------------------


def plain_indexes(conn: Any, table: str) -> list[tuple[str, str]]:
    """(name, definition) of ``table``'s indexes that back no constraint."""
    rows = conn.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = %s AND t.relname = %s "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid) "
        "ORDER BY i.relname",
        (SCHEMA, table),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


class IndexesDropped:
    """Drop ``table``'s plain indexes on entry; recreate them from their definitions on exit."""

    def __init__(self, conn: Any, table: str) -> None:
        self.conn, self.table = conn, table
        self.saved: list[tuple[str, str]] = []

    def __enter__(self) -> IndexesDropped:
        self.saved = plain_indexes(self.conn, self.table)
        for name, _ in self.saved:
            self.conn.execute(f'DROP INDEX {SCHEMA}."{name}"')
        return self

    def __exit__(self, *exc: object) -> None:
        for _, definition in self.saved:
            self.conn.execute(definition)


# -- memories ----------------------------------------------------------------------------------

_STAGE_MEMORIES = """
CREATE UNLOGGED TABLE scale_stage_memories (
    ord bigint, sid bigint, id text, category text, key text, importance integer,
    created_at double precision, updated_at double precision, embedding_model text,
    fingerprint text, source_ids text, meta text, content text, seg text, embedding vector
)"""
_STAGE_TYPES = [
    "int8", "int8", "text", "text", "text", "int4", "float8", "float8", "text",
    "text", "text", "text", "text", "text", "vector",
]  # fmt: skip
_MEMORY_COLUMNS = (
    "sid, id, category, key, importance, created_at, updated_at, embedding_model, "
    "fingerprint, source_ids, meta, content"
)


def _require_empty(conn: Any, table: str) -> None:
    if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
        raise SystemExit(f"table {table} is not empty: make_scale_pg fills a new database")


def load_memories(
    url: str,
    *,
    users: int,
    per_scope: int,
    embedder: ScaleEmbedder | None = None,
    log: Log = print,
) -> dict[str, float]:
    """Load ``users`` x ``per_scope`` memories into the (migrated, empty) database ``url``.

    Returns the seconds of each phase.
    """
    from pgvector.psycopg import register_vector

    embedder = embedder or ScaleEmbedder()
    took: dict[str, float] = {}
    pool = open_sync_pool(url, max_size=1)
    try:
        t = time.perf_counter()
        space = PgSpace(pool, "memory", "memories", embedder)
        per_user = memory_items(users, per_scope)
        flat = [item for items in per_user for item in items]
        vectors = space.embed([item["content"] for item in flat])  # the store's own checks
        took["memories: texts + vectors"] = time.perf_counter() - t
        log(f"  {len(flat):,} memory texts and vectors: {took['memories: texts + vectors']:.1f} s")
        with pool.connection() as conn:
            _require_empty(conn, "memories")
            _require_empty(conn, "memory_scopes")
            register_vector(conn)
            t = time.perf_counter()
            with conn.transaction():
                with conn.cursor().copy(
                    'COPY memory_scopes (tenant, "user", namespace, size) FROM STDIN'
                ) as copy:
                    for k, items in enumerate(per_user):
                        s = memory_scope(k)
                        copy.write_row((s.tenant, s.user, s.namespace, len(items)))
                sids = dict(conn.execute('SELECT "user", sid FROM memory_scopes').fetchall())
                conn.execute(_STAGE_MEMORIES)
                cur = conn.cursor()
                with cur.copy("COPY scale_stage_memories FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(_STAGE_TYPES)
                    ord_ = 0
                    for k, items in enumerate(per_user):
                        sid = sids[memory_scope(k).user]
                        for item in items:
                            p = prepare_item(0, {x: item[x] for x in item if x != "created_at"})
                            copy.write_row((
                                ord_, sid, "m_" + _uuid_hex(ord_), p["category"], p["key"],
                                p["importance"], item["created_at"], item["created_at"],
                                embedder.name, fingerprint(p["content"]), p["source_json"],
                                p["meta_json"], p["content"], segment(p["content"]),
                                vectors[ord_],
                            ))  # fmt: skip
                            ord_ += 1
                took["memories: COPY"] = time.perf_counter() - t
                log(f"  COPY into staging: {took['memories: COPY']:.1f} s")
                t = time.perf_counter()
                with IndexesDropped(conn, "memories"):
                    conn.execute(
                        f"INSERT INTO memories ({_MEMORY_COLUMNS}, tsv, embedding) "
                        f"SELECT {_MEMORY_COLUMNS}, to_tsvector('{TS_CONFIG}', seg), embedding "
                        "FROM scale_stage_memories ORDER BY ord"
                    )
                    took["memories: insert + tsvector"] = time.perf_counter() - t
                    log(f"  rows + tsvector: {took['memories: insert + tsvector']:.1f} s")
                    t = time.perf_counter()
                conn.execute("DROP TABLE scale_stage_memories")
            took["memories: indexes"] = time.perf_counter() - t
            log(f"  btree + GIN indexes: {took['memories: indexes']:.1f} s")
        t = time.perf_counter()
        with pool.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            space.record(conn)
        space.confirm()
        took["memories: HNSW"] = time.perf_counter() - t
        log(f"  embedding space + HNSW index: {took['memories: HNSW']:.1f} s")
        with pool.connection() as conn:
            conn.execute("ANALYZE memory_scopes")
            conn.execute("ANALYZE memories")
    finally:
        pool.close()
    return took


def _uuid_hex(n: int) -> str:
    """A deterministic 32-hex-digit id (the store's ids are ``uuid4().hex``: same shape)."""
    return f"{random.Random(n).getrandbits(128):032x}"


# -- messages ----------------------------------------------------------------------------------

OWNERS = 2_000  # conversation c{k} belongs to user u{k % OWNERS} of tenant acme


def conversation_owner(k: int) -> str:
    return f"u{k % OWNERS}"


def _prepared_pool(indexes: set[tuple[bool, int]], engine: Any) -> dict[tuple[bool, int], Any]:
    """What an append stores for each thread message that some window holds, computed
    once per message by the service's and the store's own functions: the prompt view
    and its count (`Writes.prepare`), the row values (`prepare_messages`), the search
    text (`index_terms`) and the read-back keys of its offloaded tool result."""
    from _scale_threads import pool
    from contextwright import Conversations
    from contextwright.stores.postgres._text import index_terms
    from contextwright.stores.sqlite import _rows

    conv = Conversations(engine, recall=False)  # its write path only (no store is touched)
    out: dict[tuple[bool, int], Any] = {}
    try:
        for chinese, j in sorted(indexes):
            m = pool(chinese)[j]
            batch, views, tokens = conv._writes.prepare([m])
            p = _rows.prepare_messages(batch, tokens)[0]
            refs = _rows.readback_refs(
                [(0, call, key, ttl) for key, call, _, ttl in views[0][1]], [p]
            )
            body, dl = index_terms(p.message)
            out[chinese, j] = (p, body, dl, dict.fromkeys((c, k, t) for _, c, k, t in refs))
    finally:
        conv.close()
    return out


_STAGE_POOL = """
CREATE UNLOGGED TABLE scale_stage_pool (
    pidx bigint PRIMARY KEY, id text, role text, name text, created_at double precision,
    tokens bigint, counter text, size bigint, metadata text, parts text, dl integer, body text
)"""
_MESSAGE_COLUMNS = "id, role, name, created_at, tokens, counter, size, metadata, parts, dl"


def load_messages(
    url: str, *, conversations: int, per_conversation: int, log: Log = print
) -> dict[str, float]:
    """Load ``conversations`` x ``per_conversation`` messages into the database ``url``.

    As if each message had been appended alone through `Conversations.append` with
    the bench's engine (cl100k, budget 8,000) at its own time: seqs 1..n, version n,
    the conversation's totals and search statistics, each message's count of its
    prompt view under the engine's counter name, the tsvector of its segmented
    search text, and the read-back keys of its compressed tool results. Returns the
    seconds of each phase.
    """
    from _scale_threads import POOL, window
    from bench_history import make_engine
    from contextwright.stores.postgres._log import TSV, ref_meta
    from contextwright.stores.sqlite import _rows

    took: dict[str, float] = {}
    t = time.perf_counter()
    engine = make_engine(T0)
    counter = engine.count_key
    windows = [window(k, per_conversation) for k in range(conversations)]
    used = {(zh, first + i) for zh, first in windows for i in range(per_conversation)}
    prepared = _prepared_pool(used, engine)
    took["messages: prepare"] = time.perf_counter() - t
    log(f"  {len(prepared):,} distinct thread messages prepared: {took['messages: prepare']:.1f} s")
    pool_ = open_sync_pool(url, max_size=1)
    try:
        with pool_.connection() as conn, conn.transaction():
            _require_empty(conn, "messages")
            _require_empty(conn, "conversations")
            t = time.perf_counter()
            convs, refs = [], []
            for k, (zh, first) in enumerate(windows):
                total = users = text_docs = text_len = tool_docs = tool_len = 0
                for i in range(per_conversation):
                    p, _, dl, offloads = prepared[zh, first + i]
                    m = p.message
                    total += p.tokens or 0
                    users += m.role == "user"
                    if dl and m.role == "tool":
                        tool_docs, tool_len = tool_docs + 1, tool_len + dl
                    elif dl:
                        text_docs, text_len = text_docs + 1, text_len + dl
                    for call, key, ttl in offloads:
                        meta = _rows.dumps(ref_meta(i + 1, call), "meta")
                        refs.append((k, key, m.created_at, m.created_at + ttl, meta))
                head, last = (
                    prepared[zh, first][0].message,
                    prepared[zh, first + per_conversation - 1][0].message,
                )
                convs.append((TENANT, f"c{k}", conversation_owner(k), head.created_at,
                              last.created_at, per_conversation, per_conversation, users, total,
                              "{}", per_conversation, text_docs, text_len, tool_docs, tool_len))  # fmt: skip
            with conn.cursor().copy(
                "COPY conversations (tenant, id, owner, created_at, updated_at, last_seq, "
                "message_count, user_count, token_total, metadata, version, text_docs, text_len, "
                "tool_docs, tool_len) FROM STDIN"
            ) as copy:
                for row in convs:
                    copy.write_row(row)
            cids = dict(conn.execute("SELECT id, cid FROM conversations").fetchall())
            with conn.cursor().copy(
                "COPY working_memory (cid, key, created_at, expires_at, meta, content) FROM STDIN"
            ) as copy:
                for k, key, at, until, meta in refs:
                    copy.write_row((cids[f"c{k}"], key, at, until, meta, ""))
            conn.execute(_STAGE_POOL)
            with conn.cursor().copy("COPY scale_stage_pool FROM STDIN") as copy:
                for (zh, j), (p, body, dl, _) in prepared.items():
                    m = p.message
                    copy.write_row((POOL * zh + j, m.id, m.role, m.name, m.created_at, p.tokens,
                                    counter if p.tokens is not None else "", p.size, p.meta,
                                    p.parts, dl, body))  # fmt: skip
            conn.execute(
                "CREATE UNLOGGED TABLE scale_stage_tsv AS SELECT pidx, "
                f"{TSV.replace('%s', 'body')} AS tsv FROM scale_stage_pool"
            )
            conn.execute(
                "CREATE UNLOGGED TABLE scale_stage_map (cid bigint, seq bigint, pidx bigint)"
            )
            cur = conn.cursor()
            with cur.copy("COPY scale_stage_map FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "int8"])
                for k, (zh, first) in enumerate(windows):
                    cid = cids[f"c{k}"]
                    for i in range(per_conversation):
                        copy.write_row((cid, i + 1, POOL * zh + first + i))
            took["messages: COPY"] = time.perf_counter() - t
            log(
                f"  COPY (conversations, distinct messages + tsvector, map): {took['messages: COPY']:.1f} s"
            )
            t = time.perf_counter()
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            with IndexesDropped(conn, "messages"):
                cols = ", ".join(f"p.{c.strip()}" for c in _MESSAGE_COLUMNS.split(","))
                conn.execute(
                    f"INSERT INTO messages (cid, seq, {_MESSAGE_COLUMNS}, tsv) "
                    f"SELECT s.cid, s.seq, {cols}, v.tsv FROM scale_stage_map s "
                    "JOIN scale_stage_pool p ON p.pidx = s.pidx "
                    "JOIN scale_stage_tsv v ON v.pidx = s.pidx ORDER BY s.cid, s.seq"
                )
                took["messages: insert"] = time.perf_counter() - t
                log(
                    f"  {conversations * per_conversation:,} message rows: {took['messages: insert']:.1f} s"
                )
                t = time.perf_counter()
            for table in ("scale_stage_map", "scale_stage_tsv", "scale_stage_pool"):
                conn.execute(f"DROP TABLE {table}")
            took["messages: indexes"] = time.perf_counter() - t
            log(f"  GIN + btree indexes: {took['messages: indexes']:.1f} s")
        with pool_.connection() as conn:
            for table in ("conversations", "messages", "working_memory"):
                conn.execute(f"ANALYZE {table}")
    finally:
        pool_.close()
    return took


# -- sizes and the command line ----------------------------------------------------------------


def sizes(url: str) -> dict[str, int]:
    """The database's size and its largest relations' (bytes)."""
    pool = open_sync_pool(url, max_size=1)
    try:
        with pool.connection() as conn:
            out = {
                "database": conn.execute("SELECT pg_database_size(current_database())").fetchone()[
                    0
                ]
            }
            for rel in ("memories", "memories_hnsw", "memories_tsv", "messages", "messages_search"):
                row = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.{rel}",)).fetchone()
                if row[0] is not None:
                    out[rel] = conn.execute(
                        "SELECT pg_total_relation_size(%s::regclass)", (f"{SCHEMA}.{rel}",)
                    ).fetchone()[0]
    finally:
        pool.close()
    return out


def make(
    url: str, *, conversations: int, messages: int, memories: int, per_scope: int, log: Log = print
) -> dict[str, float]:
    """Migrate ``url`` and fill it; returns the seconds of each phase."""
    t = time.perf_counter()
    migrate_url(url)
    took = {"migrate": time.perf_counter() - t}
    if conversations and messages:
        log(f"messages: {conversations:,} conversations x {messages}")
        took |= load_messages(url, conversations=conversations, per_conversation=messages, log=log)
    if memories:
        log(f"memories: {memories:,} in scopes of {per_scope}")
        took |= load_memories(url, users=memories // per_scope, per_scope=per_scope, log=log)
    return took


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url", help="postgresql://… of an empty database (it is migrated)")
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=100, help="per conversation")
    ap.add_argument("--memories", type=int, default=200_000)
    ap.add_argument("--per-scope", type=int, default=100, help="memories per user")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    took = make(
        args.url, conversations=args.conversations, messages=args.messages,
        memories=args.memories, per_scope=args.per_scope,
    )  # fmt: skip
    total = time.perf_counter() - t
    for phase, s in took.items():
        print(f"{phase:32s} {s:8.1f} s")
    print(f"{'total':32s} {total:8.1f} s")
    for rel, n in sizes(args.url).items():
        print(f"size of {rel:24s} {n / 2**20:10.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
