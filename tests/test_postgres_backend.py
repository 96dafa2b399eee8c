"""What the PostgreSQL conversation backend adds to the contract suites.

Lost connections (``pg_terminate_backend`` from another connection while a run
of appends goes on: every append retried with the same message ids until it
succeeds stores nothing twice and loses nothing acknowledged), search in
English and Chinese against the SQLite backend on the same turns, selection by
URL, a newer schema refused, an unreachable server reported as such,
strings PostgreSQL cannot hold refused as bad input, a delete that waits for
an append in flight and leaves no row of the conversation behind, and versions
that no write gets twice while appends and deletes of one conversation race.
"""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
from contextwright._errors import (
    InvalidMessageError,
    SchemaError,
    StoreError,
    StoreUnavailableError,
)
from contextwright.stores import SQLiteBackend
from contextwright.stores.postgres import PostgresBackend


def run_bounded(coro, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    """Run ``coro`` on a fresh loop, bounded in time; not `asyncio.run`.

    Once, in a loaded CI run, `asyncio.run`'s final cancellation of leftover tasks
    waited forever after connections had been killed mid-append (a pool task of
    psycopg waiting on a dead server connection); the data checks had passed.
    The stores' own correctness is what these tests check, so leftover tasks are
    left to the loop's close here, and a hang fails the test instead of the run.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))
    finally:
        loop.close()


def test_appends_retried_after_killed_connections_store_each_message_once(pg_url):
    stop = threading.Event()
    kills = [0]

    def killer() -> None:  # terminates every other connection to the database, 25 times
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for _ in range(25):
                if stop.is_set():
                    break
                got = conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                ).fetchone()
                kills[0] += got[0] if got else 0
                time.sleep(0.02)

    async def main() -> tuple[list[Message], int]:
        b = PostgresBackend(pg_url, max_size=2, retry_for=0)  # the caller retries, not the store
        await b.version("c", tenant="t")  # migrated and connected before the killing starts
        thread = threading.Thread(target=killer)
        thread.start()
        failures = 0
        try:
            try:
                for k in range(150):
                    batch = [Message.user(f"turn {k} part {j}", id=f"m{k}.{j}") for j in range(2)]
                    while True:
                        try:
                            done = await b.append("c", batch, tenant="t", user="u")
                            break
                        except (StoreUnavailableError, StoreError):
                            failures += 1  # not acknowledged: retried with the same ids
                    assert [m.id for m in done.value] == [m.id for m in batch]
            finally:
                stop.set()
                thread.join()
            stored = await b.read("c", tenant="t")
        finally:
            await b.aclose()
        return stored, failures

    stored, failures = run_bounded(main())
    assert kills[0] > 0  # connections really were lost mid-run
    assert failures > 0
    assert [m.seq for m in stored] == list(range(1, 301))
    assert [m.id for m in stored] == [f"m{k}.{j}" for k in range(150) for j in range(2)]


TURNS = [
    Message.user("I am running the budget review tomorrow"),
    Message.assistant("The runners finished the marathon in Shanghai"),
    Message.user("我今年35岁，在上海工作"),
    Message.assistant("上海的天气怎么样"),
    Message.user("北京和上海都很大"),
    Message.assistant("Café crème at the café"),
]
QUERIES = ["run", "budget", "上海", "上海工作", "上", "北京", "cafe", "marathons shanghai", "天气"]


def _hits(b: object, queries: list[str]) -> dict[str, list[int]]:
    async def main() -> dict[str, list[int]]:
        backend = b  # a PostgresBackend or SQLiteBackend
        await backend.append("c", TURNS, tenant="t", user="u")  # type: ignore[attr-defined]
        found = {}
        for q in queries:
            hits = await backend.search_seqs("c", q, tenant="t", roles=None)  # type: ignore[attr-defined]
            found[q] = sorted(seq for seq, _ in hits)
        await backend.aclose()  # type: ignore[attr-defined]
        return found

    return asyncio.run(main())


def test_search_finds_what_sqlite_finds_in_english_and_chinese(pg_url, tmp_path):
    on_pg = _hits(PostgresBackend(pg_url), QUERIES)
    on_sqlite = _hits(SQLiteBackend(tmp_path / "s.db"), QUERIES)
    assert on_pg == on_sqlite
    assert on_pg["上海"] == [3, 4, 5]
    assert on_pg["上海工作"] == [3, 4, 5]  # the phrase, and each bigram
    assert on_pg["run"] == [1]  # stemmed: running (runners stays runner, as Porter has it)
    assert on_pg["cafe"] == [6]  # diacritics removed, as unicode61 does


def test_conversations_open_a_backend_by_url(pg_url, tmp_path):
    engine = ContextEngine(counter=HeuristicCounter(), budget=4000)
    for db in (pg_url, f"sqlite:///{tmp_path / 'c.db'}"):
        with Conversations(engine, db) as convs:
            convs.append_sync("c", [Message.user("remember the zebra")], tenant="t", user="u")
            built = convs.build_sync("c", "what animal?", tenant="t", user="u")
            assert "zebra" in "\n".join(m.text for m in built.messages)
        with Conversations(engine, db) as again:  # stored, not in process
            stored = again.messages_sync("c", tenant="t", user="u")
            assert [m.text for m in stored] == ["remember the zebra", "what animal?"]
    assert (tmp_path / "c.db").exists()
    with Conversations(engine, pg_url) as convs:
        assert type(convs.backend.conversations).__name__ == "PostgresBackend"
        assert convs.backend.jobs is not None


def test_a_newer_schema_is_refused(pg_url):
    async def first() -> None:
        b = PostgresBackend(pg_url)
        await b.version("c", tenant="t")
        await b.aclose()

    asyncio.run(first())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO contextwright.migrations (name, position) VALUES ('m999_future', 999)"
        )

    async def second() -> None:
        b = PostgresBackend(pg_url)
        try:
            with pytest.raises(SchemaError, match="newer"):
                await b.version("c", tenant="t")
        finally:
            await b.aclose()

    asyncio.run(second())


def test_an_unreachable_server_is_unavailable_and_hides_the_password():
    async def main() -> None:
        b = PostgresBackend("postgresql://cw:secret@127.0.0.1:1/nothing")
        try:
            with pytest.raises(StoreUnavailableError) as caught:
                await b.version("c", tenant="t")
            assert "secret" not in str(caught.value)
        finally:
            await b.aclose()

    asyncio.run(main())


def test_strings_postgresql_cannot_hold_are_bad_input(pg_url):
    async def main() -> None:
        b = PostgresBackend(pg_url)
        await b.append("c", [Message.user("kept \x00 nul")], tenant="t", user="u")  # JSON-escaped
        v = await b.version("c", tenant="t")
        for bad in (Message.user("x", name="n\x00ul"), Message.user("x", id="i\x00d")):
            with pytest.raises(InvalidMessageError):
                await b.append("c", [bad], tenant="t", user="u")
        assert await b.version("c", tenant="t") == v
        assert [m.text for m in await b.read("c", tenant="t")] == ["kept \x00 nul"]
        await b.aclose()

    asyncio.run(main())


def test_a_delete_waits_for_an_append_in_flight_and_leaves_no_row(pg_url):
    """The delete takes the conversation's row lock, so what an append commits first goes
    with it; every table hanging off the conversation, and m007's scoped search, is empty."""
    tables = ("messages", "summaries", "compactions", "working_memory", "pinned")

    async def main() -> None:
        b = PostgresBackend(pg_url)
        await b.append("c", [Message.user("zebra one"), Message.user("two")], tenant="t", user="u")
        await b.pin("c", "p", tenant="t")
        await b.put_working("c", "k", "v", tenant="t", ttl=60)
        await b.record_receipt("c", {"n": 1}, tenant="t")
        await b.append("c", [Message.user("zebra elsewhere")], tenant="o", user="u")
        with psycopg.connect(pg_url, autocommit=True) as raw:
            raw.execute("SET search_path TO contextwright")
            (cid,) = raw.execute("SELECT cid FROM conversations WHERE tenant = 't'").fetchone()
            with raw.transaction():  # an append in flight: the row locked, a message added
                raw.execute("SELECT 1 FROM conversations WHERE cid = %s FOR UPDATE", (cid,))
                deleting = asyncio.ensure_future(b.delete_conversation("c", tenant="t"))
                deadline = time.monotonic() + 30
                while not raw.execute(  # the delete waits for our lock
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone():
                    assert time.monotonic() < deadline, "the delete never waited for the lock"
                    await asyncio.sleep(0.01)
                raw.execute(
                    "INSERT INTO messages (cid, seq, id, role, created_at, size, parts, tsv) "
                    "VALUES (%s, 3, 'm3', 'user', 0, 5, '[]', to_tsvector('zebra'))",
                    (cid,),
                )
            assert await deleting is True
            for table in tables:
                got = raw.execute(f"SELECT count(*) FROM {table} WHERE cid = %s", (cid,))
                assert got.fetchone() == (0,), table
            scoped = raw.execute(
                "SELECT count(*) FROM messages WHERE tsv IS NOT NULL AND "
                "cw_scoped(cid, role, tsv) @@ to_tsquery('contextwright.cw_text', 'zebra')"
            ).fetchone()
            assert scoped == (1,)  # the other tenant's
            assert raw.execute("SELECT count(*) FROM receipts").fetchone() == (0,)
        assert await b.version("c", tenant="t") == 0
        assert [h.message.text for h in await b.search("c", "zebra", tenant="o")] == [
            "zebra elsewhere"
        ]
        await b.aclose()

    run_bounded(main())


def test_appends_and_deletes_at_once_never_give_a_version_out_twice(pg_url):
    """Rounds of six appends at once, each on its own connection, racing to make the
    conversation again after the delete that ended the round before (every other round
    with a delete among them): no two writes of the id ever get the same version (m009)."""

    async def main() -> None:
        b = PostgresBackend(pg_url, max_size=8)
        versions: list[int] = []
        deleted = 0
        for r in range(8):
            ops = [
                b.append("c", [Message.user(f"round {r} writer {w}")], tenant="t", user="u")
                for w in range(6)
            ]
            if r % 2:
                ops.insert(3, b.delete_conversation("c", tenant="t"))
            for done in await asyncio.gather(*ops):
                if isinstance(done, bool):
                    deleted += done
                else:
                    versions.append(done.version)
            deleted += await b.delete_conversation("c", tenant="t")
        assert deleted >= 8  # each round ends deleted: the next one makes it again
        assert len(versions) == 6 * 8
        assert len(set(versions)) == len(versions), sorted(versions)
        await b.aclose()

    run_bounded(main())


def test_a_backend_serves_several_event_loops(pg_url):
    b = PostgresBackend(pg_url)
    # each asyncio.run is a new loop (a sync facade's, a runner thread's): each gets a pool
    for k in range(3):
        asyncio.run(b.append("c", [Message.user(f"m{k}")], tenant="t", user="u"))
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(asyncio.run(b.version("c", tenant="t"))))
    t.start()
    t.join()
    assert seen == [3]
    asyncio.run(b.aclose())
    with pytest.raises(StoreError):
        asyncio.run(b.version("c", tenant="t"))


def test_runners_are_woken_by_the_queue_or_by_redis(pg_url):
    """On PostgreSQL the summary runner listens on the queue's LISTEN/NOTIFY; redis:// swaps in pub/sub."""
    from contextwright.stores.postgres._wakeup import PostgresWakeup
    from contextwright.stores.redis import RedisWakeup
    from tests.rediskit import shared_url

    engine = ContextEngine(counter=HeuristicCounter(), budget=2000)
    with Conversations(engine, pg_url) as convs:
        assert convs.backend.jobs is not None
        assert isinstance(convs._runner.wakeup, PostgresWakeup)
        assert convs._runner.wakeup is convs.backend.jobs.wakeup  # type: ignore[attr-defined]
    with Conversations(engine, pg_url, wakeup=shared_url()) as convs:
        assert isinstance(convs._runner.wakeup, RedisWakeup)
        convs.append_sync("c", [Message.user("hello")], tenant="t", user="u")
        assert [m.text for m in convs.messages_sync("c", tenant="t", user="u")] == ["hello"]


def test_a_server_restart_during_appends_loses_and_doubles_nothing():
    """PostgreSQL restarted twice under a run of appends: every append returns (retried
    while the server is away), and the store holds each message once, in order."""
    import os
    import tempfile

    pgserver = pytest.importorskip("pgserver")
    from pgserver._commands import pg_ctl

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="cw-xdg-"))
    # Not under pytest's tmp_path: every pytest start makes /tmp/pytest-of-<user> 0700
    # again, and pg_ctl runs as pgserver's own user (when root), so a second pytest
    # started meanwhile left the restart unable to reach its data directory.
    server = pgserver.get_server(tempfile.mkdtemp(prefix="cw-pg-restart-"), cleanup_mode="delete")
    try:
        url = server.get_uri()

        def started() -> object:
            with psycopg.connect(url) as conn:
                return conn.execute("SELECT pg_postmaster_start_time()").fetchone()

        starts = [started()]
        # set when that many appends are acknowledged: the restarter's signals
        reached = {40: threading.Event(), 110: threading.Event()}

        def restarter() -> None:
            for event in reached.values():
                event.wait()
                # -t: pg_ctl's own wait (60 s by default) ran out once on a machine
                # loaded by other jobs (load average 8 on 2 cores)
                pg_ctl(["-w", "-t", "180", "-m", "fast", "restart"], pgdata=server.pgdata,
                       user=server.system_user, timeout=200)  # fmt: skip
                starts.append(started())

        async def main() -> list[Message]:
            b = PostgresBackend(url, max_size=2, retry_for=60)
            await b.version("c", tenant="t")  # migrated before the restarts start
            thread = threading.Thread(target=restarter)
            thread.start()
            try:
                for k in range(200):
                    batch = [Message.user(f"turn {k} part {j}", id=f"r{k}.{j}") for j in range(2)]
                    saved = await b.append("c", batch, tenant="t", user="u")
                    assert [m.id for m in saved.value] == [m.id for m in batch]
                    if k + 1 in reached:
                        reached[k + 1].set()
            finally:
                for event in reached.values():  # the restarter never waits past the appends
                    event.set()
                thread.join()
            stored = await b.read("c", tenant="t")
            await b.aclose()
            return stored

        stored = run_bounded(main(), 300)
        assert len(set(starts)) == 3, starts  # the server really restarted, twice
        assert [m.seq for m in stored] == list(range(1, 401))
        assert [m.id for m in stored] == [f"r{k}.{j}" for k in range(200) for j in range(2)]
    finally:
        server.cleanup()
