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
