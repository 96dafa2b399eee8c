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
- **Messages**: ``--conversations`` x ``--messages`` (see `load_messages`).

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
