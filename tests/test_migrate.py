"""PostgreSQL migrations: applied once when several workers start at once, refused when newer.

And the errors a user meets first: a malformed URL, an unreachable server, a server
without pgvector — each one line, typed, naming the fix, no password in it.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from contextwright import ConfigError, SchemaError, StoreUnavailableError
from contextwright.stores.postgres._connect import redact
from contextwright.stores.postgres._migrations import (
    MIGRATIONS,
    PgMigration,
    check_schema,
    migrate,
    migrate_url,
)


def test_migrate_applies_every_migration_once(pg_url: str) -> None:
    assert migrate_url(pg_url) == [m.name for m in MIGRATIONS]
    assert migrate_url(pg_url) == []
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, position FROM contextwright.migrations ORDER BY position"
        ).fetchall()
        assert rows == [(m.name, i + 1) for i, m in enumerate(MIGRATIONS)]
        assert check_schema(conn) == []


def test_workers_starting_at_once_migrate_exactly_once(pg_url: str) -> None:
    code = (
        "import sys; from contextwright.stores.postgres._migrations import migrate_url; "
        "print(len(migrate_url(sys.argv[1])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-500:] for o in outs]
    applied = sorted(int(o[0]) for o in outs)
    # one worker applied everything, the others found nothing left to do
    assert applied == [0, 0, 0, len(MIGRATIONS)]


def test_a_newer_schema_is_refused_with_the_fix(pg_url: str) -> None:
    newer = (*MIGRATIONS, PgMigration("m999_future", "SELECT 1"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert migrate(conn, newer)[-1] == "m999_future"
        with pytest.raises(SchemaError, match=r"newer.*m999_future.*upgrade contextwright"):
            check_schema(conn)
        with pytest.raises(SchemaError, match="m999_future"):
            migrate(conn)
        # the refusal wrote nothing
        n = conn.execute("SELECT count(*) FROM contextwright.migrations").fetchone()
        assert n == (len(newer),)


def test_an_older_schema_is_brought_up_to_date(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert len(migrate(conn, MIGRATIONS[:2])) == 2
        assert check_schema(conn) == [m.name for m in MIGRATIONS[2:]]
        assert migrate(conn) == [m.name for m in MIGRATIONS[2:]]


def test_a_database_from_before_m009_keeps_its_versions_and_counts_on(pg_url: str) -> None:
    """m009 (versions across deletes) on a database with conversations: each keeps its
    version and gets ``first_version`` 1; deleted and made again, one continues above."""
    import asyncio

    from contextwright import Message
    from contextwright.stores.postgres import PostgresBackend

    before = [m.name for m in MIGRATIONS].index("m009_versions_across_deletes")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert len(migrate(conn, MIGRATIONS[:before])) == before
        conn.execute(
            "INSERT INTO contextwright.conversations (tenant, id, owner, created_at, "
            "updated_at, version) VALUES ('t', 'c', 'u', 0, 0, 7)"
        )
        assert check_schema(conn) == ["m009_versions_across_deletes"]
        assert migrate(conn) == ["m009_versions_across_deletes"]

    async def main() -> None:
        b = PostgresBackend(pg_url)
        info = await b.get_conversation("c", tenant="t")
        assert info is not None
        assert (info.version, info.first_version) == (7, 1)
        assert await b.delete_conversation("c", tenant="t") is True
        again = await b.append("c", [Message.user("again")], tenant="t", user="v")
        assert again.version == 8
        await b.aclose()

    asyncio.run(main())


def test_a_failing_migration_leaves_nothing_behind(pg_url: str) -> None:
    broken = (*MIGRATIONS, PgMigration("m998_broken", "CREATE TABLE x (a int); SELECT 1/0"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            migrate(conn, broken)
        # all or nothing: not even the migrations before it are recorded
        assert check_schema(conn) == [m.name for m in MIGRATIONS]
    assert len(migrate_url(pg_url)) == len(MIGRATIONS)


def test_a_server_without_pgvector_names_the_fix() -> None:
    # these machines' system PostgreSQL has no pgvector (skip where it is not running)
    url = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name='vector'").fetchone():
            pytest.skip("this server has pgvector")
    with pytest.raises(SchemaError, match=r"no pgvector extension.*CREATE EXTENSION vector"):
        migrate_url(url)


def test_an_unreachable_server_is_unavailable_and_the_password_stays_secret() -> None:
    url = "postgresql://app:s3cret-pw@127.0.0.1:9/contextwright"
    with pytest.raises(StoreUnavailableError) as err:
        migrate_url(url, connect_timeout=2)
    assert "s3cret-pw" not in str(err.value)
    assert "app:***@127.0.0.1:9" in str(err.value)
    assert "s3cret" not in redact(url)


@pytest.mark.parametrize("url", ["mysql://x/y", "", "postgresql://host:notaport/db?sslmode=x y"])
def test_a_malformed_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="db:"):
        migrate_url(url)


# -- the migrate command, both backends ----------------------------------------------------


def test_migrate_command_on_postgresql(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from contextwright.interfaces.cli import main

    assert main(["migrate", "--db", pg_url, "--check"]) == 1
    assert f"{len(MIGRATIONS)} pending" in capsys.readouterr().out
    assert main(["migrate", "--db", pg_url]) == 0
    assert f"applied {len(MIGRATIONS)}: m001_schema" in capsys.readouterr().out
    assert main(["migrate", "--db", pg_url, "--json"]) == 0
    assert '"applied": []' in capsys.readouterr().out
    assert main(["migrate", "--db", pg_url, "--check"]) == 0


def test_migrate_command_on_sqlite(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from contextwright.interfaces.cli import main
    from contextwright.stores import MIGRATIONS as SQLITE

    db = f"sqlite:///{tmp_path}/m.db"
    assert main(["migrate", "--db", db, "--check"]) == 1
    assert not (tmp_path / "m.db").exists()  # --check changes nothing
    assert main(["migrate", "--db", db]) == 0
    assert f"applied {len(SQLITE)}" in capsys.readouterr().out
    assert main(["migrate", "--db", str(tmp_path / "m.db"), "--check"]) == 0


def test_sqlite_refuses_a_newer_schema(tmp_path) -> None:
    import sqlite3

    from contextwright.stores import MIGRATIONS as SQLITE
    from contextwright.stores import SQLiteStore

    def m999_future(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE future (x)")

    SQLiteStore(tmp_path / "n.db", migrations=[*SQLITE, m999_future]).close()
    with pytest.raises(SchemaError, match=r"newer.*m999_future.*upgrade contextwright"):
        SQLiteStore(tmp_path / "n.db")


def test_an_unknown_scheme_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from contextwright.interfaces.cli import main

    assert main(["migrate", "--db", "mysql://h/db"]) == 2
    assert "unknown database URL scheme 'mysql://'" in capsys.readouterr().err


def test_contextwright_db_may_be_a_sqlite_url(tmp_path, monkeypatch) -> None:
    from contextwright import ConfigError as Config
    from contextwright.stores import default_db_path

    monkeypatch.setenv("CONTEXTWRIGHT_DB", f"sqlite:///{tmp_path}/env.db")
    assert default_db_path() == tmp_path / "env.db"
    monkeypatch.setenv("CONTEXTWRIGHT_DB", "postgresql://h/db")
    with pytest.raises(Config, match="names a PostgreSQL database"):
        default_db_path()
