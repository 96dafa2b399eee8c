"""``contextwright migrate``: bring a database's schema up to date, or check it.

``--db`` takes a path, ``sqlite:///path`` or ``postgresql://…`` (else
``$CONTEXTWRIGHT_DB``, else the per-user data file). On PostgreSQL the migrations
run under an advisory lock, so a deployment may run this from every worker at start;
a database migrated by a newer contextwright is refused (exit 2, one line saying so).
``--check`` changes nothing and exits 1 when migrations are pending.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ...stores import SQLiteStore, default_db_path
from ...stores._url import parse_db

__all__ = ["add_parsers", "run"]


def add_parsers(sub: Any) -> None:
    m = sub.add_parser("migrate", help="apply the database schema's pending migrations")
    m.add_argument(
        "--db",
        default=None,
        help="path, sqlite:///path or postgresql://… (default: $CONTEXTWRIGHT_DB or a per-user file)",
    )
    m.add_argument("--check", action="store_true", help="change nothing; exit 1 if any is pending")
    m.add_argument("--json", action="store_true")


def db_setting(value: str | None) -> str:
    """``--db`` as given, else ``$CONTEXTWRIGHT_DB``, else the per-user data file."""
    return value or os.environ.get("CONTEXTWRIGHT_DB") or str(default_db_path())


def run(args: argparse.Namespace, out: Any) -> int:
    target = parse_db(db_setting(args.db))
    if target.kind == "postgres":
        from ...stores.postgres._connect import check_url, psycopg, redact, translated
        from ...stores.postgres._migrations import check_schema, migrate

        url = check_url(target.url)
        with (
            translated(f"migrating {redact(url)}"),
            psycopg().connect(url, autocommit=True, connect_timeout=10) as conn,
        ):
            pending = check_schema(conn)
            applied = [] if args.check else migrate(conn)
        where = redact(url)
    else:
        from ...stores.sqlite._migrations import pending_migrations

        if args.check:
            pending, applied = pending_migrations(target.path), []
        else:
            before = pending_migrations(target.path)
            SQLiteStore(target.path).close()  # opening applies them
            pending, applied = before, before
        where = target.path
    result = {"db": where, "pending": pending if args.check else [], "applied": applied}
    if args.json:
        out.write(json.dumps(result) + "\n")
    elif args.check:
        out.write(
            f"{where}: {len(pending)} pending"
            + (f": {', '.join(pending)}" if pending else "")
            + "\n"
        )
    else:
        out.write(
            f"{where}: applied {len(applied)}"
            + (f": {', '.join(applied)}" if applied else " (up to date)")
            + "\n"
        )
    return 1 if args.check and pending else 0
