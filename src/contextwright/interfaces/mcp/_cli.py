"""``contextwright mcp``: the command-line entry of the MCP server (its parser and its run).

``contextwright mcp [--db URL] [--transport stdio|http] [--host 127.0.0.1]
[--port 8765] [--tenant T] [--model M] [--budget N]``. Over stdio (the default, what
Claude Desktop and Claude Code launch) the server is local and acts for one
tenant, ``--tenant`` (default ``default``). Over streamable HTTP every request
must carry ``Authorization: Bearer KEY`` (a key from ``contextwright keys
create``); its tenant comes from the key alone, so ``--tenant`` is refused there.
The MCP SDK is imported only when the command runs (extra ``contextwright[mcp]``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..._errors import UserError
from ..cli._history import counter_for

__all__ = ["add_parsers", "run"]

DEFAULT_PORT = 8765
DEFAULT_BUDGET = 8000  # as the stored-conversation commands (`inspect`, `compact`)


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="run the MCP server (stdio for a local client, or streamable HTTP with keys)",
        description="Serve contextwright's tools (build_context, append_messages, recall, "
        "search_memory, add_memory, compact, list_conversations) and resources (a "
        "conversation's summary and latest receipt) to MCP clients. stdio (the default) "
        "serves one local client as --tenant; http serves streamable HTTP at /mcp, every "
        "request with 'Authorization: Bearer KEY' (contextwright keys create), its tenant "
        "from the key.",
    )
    p.add_argument(
        "--db",
        default=None,
        help="path, sqlite:///path or postgresql://… (default: $CONTEXTWRIGHT_DB or a per-user file)",
    )
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="http: the address to listen on")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"http: default {DEFAULT_PORT}")
    p.add_argument(
        "--tenant",
        default=None,
        help="stdio: the tenant to act for (default 'default'); over http it comes from each key",
    )
    p.add_argument("--model", default=None, help="model name: picks the tokenizer and window")
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help=f"default input tokens of a build (default: the --model's, else {DEFAULT_BUDGET})",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until the client disconnects (stdio) or the process is stopped (http)."""
    if args.transport == "http" and args.tenant is not None:
        raise UserError(
            "--tenant: over http the tenant comes from each request's key; use it with stdio only"
        )
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    counter_for(args.model)  # an unknown --model fails here, in one line, not in the server
    from ._server import Settings, serve

    settings = Settings(
        db=args.db,
        model=args.model,
        budget=args.budget if args.budget is not None or args.model else DEFAULT_BUDGET,
        tenant=args.tenant or "default",
        transport=args.transport,
        host=args.host,
        port=args.port,
    )
    try:
        serve(settings)
    except KeyboardInterrupt:  # Ctrl-C on a terminal: a normal way to stop
        print("contextwright mcp: stopped", file=sys.stderr)
    return 0
