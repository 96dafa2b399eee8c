"""A real PostgreSQL with pgvector for the tests, and a fresh database per test.

``CONTEXTWRIGHT_TEST_DSN`` names a server to use (its user must be able to create
databases, and the server must have pgvector); without it the tests start one from
the ``pgserver`` package (PostgreSQL 16 + pgvector, a Unix socket in a temporary
directory), once per test session. The PostgreSQL on 127.0.0.1:5432 of the
development machines has no pgvector, so it is not used by default.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
import uuid
from urllib.parse import urlsplit, urlunsplit

_lock = threading.Lock()
_server_url: str | None = None


def server_url() -> str:
    """The URL of the test server (started on first use), connected to its admin database."""
    global _server_url
    with _lock:
        if _server_url is None:
            dsn = os.environ.get("CONTEXTWRIGHT_TEST_DSN")
            if dsn:
                _server_url = dsn
            else:
                # pgserver's platformdirs warns when there is no XDG_RUNTIME_DIR (CI, root)
                os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="cw-xdg-"))
                import pgserver

                data = tempfile.mkdtemp(prefix="cw-pg-")
                server = pgserver.get_server(data, cleanup_mode="delete")
                atexit.register(server.cleanup)
                _server_url = server.get_uri()
        return _server_url


def with_database(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname`` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def create_database(prefix: str = "cw") -> str:
    """A new empty database on the test server; returns its URL."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url(), name)


def drop_database(url: str) -> None:
    """Drop the database ``url`` names (closing whatever is still connected to it)."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- migrated databases, made fast ------------------------------------------------------------
# Creating and migrating a database takes a few hundred milliseconds; the contract
# suites open one per test (and per hypothesis example). A migrated template is made
# once per session and copied (CREATE DATABASE … TEMPLATE), and a finished database
# is emptied and reused rather than dropped (TRUNCATE is much cheaper than either).

_template: str | None = None
_free: list[str] = []
_mine = threading.Lock()  # not `_lock`: server_url takes that one


def _template_url() -> str:
    global _template
    with _mine:
        if _template is None:
            import psycopg

            from contextwright.stores.postgres._migrations import migrate_url

            url = create_database("cwtemplate")
            migrate_url(url)
            name = urlsplit(url).path.lstrip("/")
            with psycopg.connect(server_url(), autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true')
            _template = name
            atexit.register(_drop_all)
        return _template


def fresh_database() -> str:
    """A migrated, empty database on the test server (reused after `recycle_database`)."""
    with _mine:
        if _free:
            return _free.pop()
    import psycopg

    template = _template_url()
    name = f"cw_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return with_database(server_url(), name)


def recycle_database(url: str) -> None:
    """Empty a database of `fresh_database` (every table of our schema) for the next test."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'contextwright' "
                "AND tablename <> 'migrations'"
            )
        ]
        if tables:
            listed = ", ".join(f"contextwright.{t}" for t in tables)
            conn.execute(f"TRUNCATE {listed} RESTART IDENTITY CASCADE")
    with _mine:
        _free.append(url)


def _drop_all() -> None:  # pragma: no cover - at exit
    import psycopg

    with _mine:
        urls, _free[:] = list(_free), []
    try:
        with psycopg.connect(server_url(), autocommit=True) as conn:
            for url in urls:
                name = urlsplit(url).path.lstrip("/")
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if _template is not None:
                conn.execute(f'ALTER DATABASE "{_template}" WITH IS_TEMPLATE false')
                conn.execute(f'DROP DATABASE IF EXISTS "{_template}"')
    except Exception:
        pass
