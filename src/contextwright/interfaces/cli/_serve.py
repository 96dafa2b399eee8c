"""``contextwright serve`` (the HTTP service) and ``contextwright keys`` (its tenant keys).

``serve`` runs the FastAPI app on uvicorn (the ``server`` extra). With
``--workers N`` above 1, uvicorn starts each worker from an import string
(`app_from_env`) with the settings in ``$CONTEXTWRIGHT_SERVE``, and Prometheus
samples go through a fresh ``$PROMETHEUS_MULTIPROC_DIR`` so that ``/metrics``
adds up every worker's. uvicorn's access log names method, path and status,
never a header: no key reaches a log.

``keys create --tenant T [--name N]`` prints the new key once, alone on the last
line (only its hash is stored); ``keys list`` shows ids, tenants, names and
revocations, never a secret; ``keys revoke KEY_ID`` makes a key fail from the
next request on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from datetime import datetime, timezone
from typing import Any

from ..._errors import ConfigError, MissingDependencyError, UserError
from ...stores import Backend, SQLiteBackend, SQLiteStore
from ...stores._url import parse_db
from .._keys import new_key
from ._db import db_setting

__all__ = ["add_parsers", "commands", "run"]

DB_HELP = "path, sqlite:///path or postgresql://… (default: $CONTEXTWRIGHT_DB or a per-user file)"


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("serve", help="run the HTTP service (FastAPI on uvicorn)")
    s.add_argument("--db", default=None, help=DB_HELP)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    s.add_argument(
        "--max-body", type=int, default=4 << 20, help="largest request body in bytes (413 above)"
    )
    s.add_argument("--model", default=None, help="default model of builds: tokenizer and window")
    s.add_argument("--budget", type=int, default=None, help="default input budget of builds")
    s.add_argument("--system-prompt", default="", help="the system prompt of every build")
    s.add_argument("--cache", default=None, help="redis://… shared block cache (optional)")
    s.add_argument(
        "--insecure-single-tenant",
        action="store_true",
        help="NO AUTHENTICATION: every request is tenant 'default' (local use only)",
    )
    k = sub.add_parser("keys", help="API keys of the service: create, list, revoke")
    ks = k.add_subparsers(dest="keys_command", required=True)
    c = ks.add_parser("create", help="make a key for a tenant; printed once, on the last line")
    c.add_argument("--tenant", required=True)
    c.add_argument("--name", default="")
    c.add_argument("--db", default=None, help=DB_HELP)
    li = ks.add_parser("list", help="the keys (ids, tenants, names, revocations; no secrets)")
    li.add_argument("--tenant", default=None)
    li.add_argument("--db", default=None, help=DB_HELP)
    li.add_argument("--json", action="store_true")
    r = ks.add_parser("revoke", help="revoke a key by its id (the part after cw_)")
    r.add_argument("key_id")
    r.add_argument("--db", default=None, help=DB_HELP)


def commands() -> tuple[str, ...]:
    return ("serve", "keys")


def run(args: argparse.Namespace, out: Any) -> int:
    if args.command == "serve":
        return _serve(args)
    return asyncio.run(_keys(args, out))


# -- serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..http import Settings, create_app
        from ..http._settings import ENV
    except ImportError as exc:
        if isinstance(exc, MissingDependencyError):
            raise
        raise MissingDependencyError(exc.name or "uvicorn", "server", "serve") from None
    settings = Settings(
        db=args.db, host=args.host, port=args.port, workers=args.workers,
        max_body=args.max_body, model=args.model, budget=args.budget,
        system_prompt=args.system_prompt, insecure_single_tenant=args.insecure_single_tenant,
        cache=args.cache,
    )  # fmt: skip
    common: dict[str, Any] = {
        "host": settings.host, "port": settings.port, "log_level": "info",
        "proxy_headers": False, "server_header": False,
    }  # fmt: skip
    if settings.workers == 1:
        uvicorn.run(create_app(settings), **common)
        return 0
    os.environ[ENV] = settings.to_env()
    with tempfile.TemporaryDirectory(prefix="contextwright-metrics-") as prom:
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", prom)
        uvicorn.run(
            "contextwright.interfaces.http:app_from_env", factory=True,
            workers=settings.workers, **common,
        )  # fmt: skip
    return 0


# -- keys ----------------------------------------------------------------------------------


def _open_backend(db: str | None) -> Backend:
    target = parse_db(db_setting(db))
    if target.kind == "postgres":
        from ...stores.postgres import PostgresBackend

        return PostgresBackend(target.url).backend()
    store = SQLiteStore(target.path) if db or os.environ.get("CONTEXTWRIGHT_DB") else SQLiteStore()
    return SQLiteBackend(store).backend()


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


async def _keys(args: argparse.Namespace, out: Any) -> int:
    backend = _open_backend(args.db)
    try:
        keys = backend.keys
        if keys is None:
            raise ConfigError("this store has no API keys role")
        if args.keys_command == "create":
            key, record = new_key(args.tenant, args.name)
            await keys.create_key(record)
            out.write(
                f"key {record.key_id} for tenant {record.tenant!r} created; it is shown "
                "once, on the next line: keep it secret\n"
            )
            out.write(key + "\n")
            return 0
        if args.keys_command == "list":
            found = await keys.list_keys(tenant=args.tenant)
            rows: list[dict[str, Any]] = [
                {"key_id": r.key_id, "tenant": r.tenant, "name": r.name,
                 "created_at": r.created_at, "revoked_at": r.revoked_at}
                for r in found
            ]  # fmt: skip
            if args.json:
                out.write(json.dumps(rows, ensure_ascii=False) + "\n")
                return 0
            for row in rows:
                state = "revoked " + _when(row["revoked_at"]) if row["revoked_at"] else "active"
                out.write(
                    f"{row['key_id']}  {row['tenant']}  {row['name'] or '-'}  "
                    f"created {_when(row['created_at'])}  {state}\n"
                )
            if not rows:
                out.write("no keys\n")
            return 0
        key_id = args.key_id.removeprefix("cw_").split("_", 1)[0]
        if not await keys.revoke_key(key_id):
            raise UserError(f"no active key {key_id!r}")
        out.write(f"key {key_id} revoked\n")
        return 0
    finally:
        await backend.aclose()
