"""The stored-conversation commands: ``import``, ``export``, ``inspect`` and ``compact``.

They work on the store ``--db`` names: a path or ``sqlite:///path`` (the embedded
default), or ``postgresql://…``; else ``$CONTEXTWRIGHT_DB``, else a per-user data
file (`default_db_path`, its folder created on first use).
``import`` reads a conversation in any format ``build`` reads and appends it in
batches with a progress bar. Importing is idempotent: each message of the file gets
an id derived from its position in the file and its content (`stable_ids`), so a
file imported again stores nothing twice, and a file that has grown since stores
only its new messages; a file that differs from what was imported from it before
(a message changed or inserted) is refused, nothing written;
``export`` writes the stored originals (``--format jsonl``: one `Message.to_dict`
per line, with ``seq``; ``openai``, ``anthropic``, ``responses``: a request body
that ``build`` and ``import`` read back); ``inspect`` shows the conversation, its summaries, its compaction log and the
receipt of a build for its last user message (nothing is written); ``compact``
compacts now, or with ``--preview`` shows what it would do without writing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ... import adapters
from ..._errors import ConfigError, UserError
from ...budget._budget import MODELS, model_info
from ...history import CompactionConfig, CompactionResult
from ...model._messages import Message
from ...pipeline._engine import ContextEngine
from ...service._conversations import Conversations
from ...stores import SQLiteStore
from ...stores._records import ConversationInfo, not_owner
from ...stores._url import parse_db
from ...stores.postgres._connect import redact
from ...tokens._count import HeuristicCounter, TokenCounter
from ...tokens._exact import default_counter, encoding_for_model
from ._db import db_setting
from ._files import load_conversation

__all__ = ["add_parsers", "counter_for", "export_text", "run", "stable_ids"]

BATCH = 1000
EXPORT_FORMATS = ("jsonl", "openai", "anthropic", "responses")


def add_parsers(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=None,
        help="path, sqlite:///path or postgresql://… (default: $CONTEXTWRIGHT_DB or a per-user file)",
    )
    common.add_argument("--tenant", default="default")
    common.add_argument("--model", default=None, help="model name: picks the tokenizer")
    common.add_argument(
        "--preset",
        default="production",
        help="compaction preset: development, production, large_context",
    )
    common.add_argument("--json", action="store_true")
    imp = sub.add_parser("import", parents=[common], help="append a conversation file to the store")
    imp.add_argument("file", type=Path)
    imp.add_argument("--conversation", required=True)
    imp.add_argument("--user", default="anonymous")
    owner = "act as this user (default: the conversation's owner); another user's is refused"
    ins = sub.add_parser("inspect", parents=[common], help="show a stored conversation")
    ins.add_argument("conversation")
    ins.add_argument("--user", default=None, help=owner)
    ins.add_argument("--budget", type=int, default=8000)
    ins.add_argument(
        "--query", default=None, help="build for this message (default: the last user message)"
    )
    exp = sub.add_parser("export", parents=[common], help="write a stored conversation out")
    exp.add_argument("conversation")
    exp.add_argument("--user", default=None, help=owner)
    exp.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="jsonl",
        help="jsonl: contextwright messages with their seq, one a line; openai, anthropic, "
        "responses: a request body of that provider (build and import read it back)",
    )
    exp.add_argument("--output", type=Path, default=None, help="write here (default: stdout)")
    com = sub.add_parser("compact", parents=[common], help="compact a stored conversation")
    com.add_argument("conversation")
    com.add_argument("--user", default=None, help=owner)
    com.add_argument("--preview", action="store_true", help="compute without writing")


def known_model(model: str) -> bool:
    """Whether ``model`` is in the model registry or has a known tiktoken encoding."""
    for lookup in (model_info, encoding_for_model):
        try:
            lookup(model)
        except ConfigError:
            continue
        return True
    return False


def counter_for(model: str | None, *, option: str = "--model") -> TokenCounter:
    """The counter for a model named on the command line.

    The exact tokenizer when the model has one and it is installed (tiktoken for
    OpenAI models), else the heuristic; no model, the heuristic. An unknown model
    raises `ConfigError`, as the library does (`model_info`).
    """
    if not model:
        return HeuristicCounter()
    if not known_model(model):
        raise ConfigError(
            f"{option}: unknown model {model!r}; known: {', '.join(sorted(MODELS))} "
            "(or any name starting with one of them)"
        )
    return default_counter(model)


def _open(args: argparse.Namespace, budget: int = 8000, model: str | None = None) -> Conversations:
    counter = counter_for(args.model or model)
    engine = ContextEngine(counter=counter, budget=budget)
    target = parse_db(db_setting(args.db))
    store: SQLiteStore | str
    if target.kind == "postgres":
        store = target.url
    else:  # SQLiteStore() makes the default path's folder; an explicit --db's must exist
        store = SQLiteStore(target.path) if args.db else SQLiteStore()
    return Conversations(engine, store, compaction=CompactionConfig.preset(args.preset))


def _where(args: argparse.Namespace) -> str:
    """The database the command works on, for messages (a URL's password hidden)."""
    db = db_setting(args.db)
    return redact(db) if parse_db(db).kind == "postgres" else db


def _info(convs: Conversations, args: argparse.Namespace) -> ConversationInfo | None:
    log = convs.backend.conversations
    return convs.run_sync(log.get_conversation(args.conversation, tenant=args.tenant))


def _read(convs: Conversations, args: argparse.Namespace, **kw: Any) -> list[Message]:
    log = convs.backend.conversations
    return convs.run_sync(log.read(args.conversation, tenant=args.tenant, **kw))


def _messages(path: Path) -> tuple[list[Message], str | None]:
    """The file's messages and the model it names (a saved request body's ``model``)."""
    conf = load_conversation(path)
    messages = adapters.read_messages(conf["messages"])
    model = conf.get("model")
    # the file's model picks the tokenizer when it is a known one (--model must be)
    return messages, model if isinstance(model, str) and known_model(model) else None


def stable_ids(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with ids derived from their position and content.

    The same file read again gives the same ids, so the store recognises what it
    already holds (`Store.append` skips a stored id). Role, parts, name and
    metadata are what the store compares for a stored id; the position keeps two
    identical messages ("ok", say) apart.
    """
    out = []
    for i, m in enumerate(messages):
        d = m.to_dict()
        content = {k: d[k] for k in ("role", "parts", "name", "metadata") if k in d}
        text = json.dumps([i, content], sort_keys=True, ensure_ascii=False, default=str)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        out.append(m.replace(id=f"import-{digest[:32]}"))
    return out


def _new_messages(
    convs: Conversations, args: argparse.Namespace, messages: list[Message]
) -> list[Message]:
    """Those of ``messages`` not stored yet; refuses a file that differs from an earlier import."""
    if _info(convs, args) is None:
        return messages
    stored = {m.id for m in _read(convs, args)}
    new = [m for m in messages if m.id not in stored]
    first_new = next((i for i, m in enumerate(messages) if m.id not in stored), len(messages))
    if any(m.id in stored for m in messages[first_new:]):
        raise UserError(
            f"message {first_new} of {args.file} differs from the one imported before into "
            f"{args.conversation!r}; import the file into a new --conversation"
        )
    return new


def _import(args: argparse.Namespace, out: Any) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    messages, model = _messages(args.file)
    messages = stable_ids(messages)
    convs = _open(args, model=model)
    try:
        new = _new_messages(convs, args, messages)
        with Progress(
            TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            disable=args.json or len(new) < BATCH,
        ) as bar:  # fmt: skip
            task = bar.add_task("import", total=len(new))
            stored = convs.import_sync(
                args.conversation, new, tenant=args.tenant, user=args.user,
                batch_size=BATCH, progress=lambda n: bar.advance(task, n), optimize_index=True,
            )  # fmt: skip
        info = _info(convs, args)
        result = {
            "conversation": args.conversation, "imported": len(stored),
            "skipped": len(messages) - len(new),
            "last_seq": info.last_seq if info else 0,
            "messages": info.message_count if info else 0,
            "tokens": info.token_total if info else 0,
        }  # fmt: skip
        _emit(result, args.json, out)
    finally:
        convs.close()


def _emit(payload: dict[str, Any], as_json: bool, out: Any) -> None:
    if as_json:
        out.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False)
    for k, v in payload.items():
        table.add_row(str(k), v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
    Console(file=out, width=120).print(table)


def _inspect(args: argparse.Namespace, out: Any) -> None:
    convs = _open(args, args.budget)
    try:
        info = _info(convs, args)
        if info is None:
            raise UserError(
                f"no conversation {args.conversation!r} for tenant {args.tenant!r} in {_where(args)}"
            )
        user = info.user if args.user is None else args.user
        if user != info.user:  # as `Conversations` refuses it, before anything is read
            raise not_owner(args.conversation, args.tenant, user)
        query = args.query
        if query is None:
            last_user = next(
                (m for m in _read(convs, args, newest_first=True, limit=200) if m.role == "user"),
                None,
            )
            query = (
                last_user.text if last_user is not None and last_user.text.strip() else "(inspect)"
            )
        built = convs.build_sync(
            args.conversation, query, tenant=args.tenant, user=user, store_message=False
        )
        b, conv, tenant = convs.backend, args.conversation, args.tenant
        summaries = convs.run_sync(b.summaries.summaries(conv, tenant=tenant))
        log = convs.run_sync(b.compactions.compactions(conv, tenant=tenant))
        # a bulk import leaves what it summarised at once uncounted (not in the total)
        outline = convs.run_sync(b.conversations.read_outline(conv, tenant=tenant))
        uncounted = sum(1 for o in outline if o.tokens is None)
        if args.json:
            payload = {
                "conversation": {"id": info.id, "tenant": info.tenant, "user": info.user, "messages": info.message_count,
                                 "last_seq": info.last_seq, "tokens": info.token_total,
                                 "uncounted_messages": uncounted},
                "summary": None if not summaries else {"version": summaries[-1].version, "from_seq": summaries[-1].from_seq,
                                                       "upto_seq": summaries[-1].upto_seq, "method": summaries[-1].method,
                                                       "tokens": summaries[-1].tokens, "content": summaries[-1].content},
                "summary_versions": [s.version for s in summaries],
                "compactions": [{"id": e.id, "at": e.at, "urgency": e.urgency, "applied": e.applied,
                                 "tokens_before": e.tokens_before, "tokens_after": e.tokens_after,
                                 "summary_version": e.summary_version, "upto_seq": e.upto_seq,
                                 "strategies": list(e.strategies),
                                 "notes": list(e.detail.get("notes", []))} for e in log],
                "report": built.report.to_dict(),
            }  # fmt: skip
            out.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
            return
        from rich.console import Console
        from rich.markup import escape
        from rich.panel import Panel
        from rich.table import Table

        console = Console(file=out, width=120)
        console.print(
            f"conversation [bold]{escape(info.id)}[/] · tenant {escape(info.tenant)} · user {escape(info.user)} · "
            f"{info.message_count} messages · {info.token_total} tokens counted · last seq {info.last_seq}"
        )
        if uncounted:
            console.print(
                f"{uncounted} message(s) stored uncounted by a bulk import (summarised at once); "
                "the token figures leave them out"
            )
        if summaries:
            s = summaries[-1]
            console.print(
                Panel(
                    escape(s.content),
                    title=f"summary v{s.version} · seq {s.from_seq}–{s.upto_seq} · {escape(s.method)} · {s.tokens} tokens",
                    title_align="left",
                )
            )
        else:
            console.print("no summary yet")
        table = Table(title="compaction log", title_justify="left")
        for col in (
            "id",
            "urgency",
            "applied",
            "before",
            "after",
            "summary",
            "upto seq",
            "strategies",
        ):
            table.add_column(col)
        for e in log:
            table.add_row(str(e.id), e.urgency, str(e.applied), str(e.tokens_before), str(e.tokens_after),
                          str(e.summary_version or "-"), str(e.upto_seq), ", ".join(e.strategies))  # fmt: skip
        console.print(table)
        console.print(built.report.to_table())
    finally:
        convs.close()


def _acting_user(convs: Conversations, args: argparse.Namespace) -> str:
    """``--user``, else the stored conversation's owner; `UserError` if there is none."""
    info = _info(convs, args)
    if info is None:
        raise UserError(f"no conversation {args.conversation!r} for tenant {args.tenant!r}")
    return info.user if args.user is None else str(args.user)


def _compact(args: argparse.Namespace, out: Any) -> None:
    convs = _open(args)
    try:
        result: CompactionResult = convs.compact_sync(
            args.conversation, tenant=args.tenant, preview=args.preview, user=_acting_user(convs, args),
        )  # fmt: skip
        payload = {
            "conversation": args.conversation, "preview": args.preview, "applied": result.applied,
            "strategies": list(result.strategies), "original_count": result.original_count,
            "retained_count": result.retained_count, "flushed_memories": result.flushed_memories,
            "tokens_before": result.tokens_before_compaction, "tokens_after": result.tokens_after_compaction,
            "summary_version": result.summary_version, "upto_seq": result.upto_seq, "method": result.method,
            "notes": list(result.notes), "summary": result.summary,
        }  # fmt: skip
        _emit(payload, args.json, out)
    finally:
        convs.close()


def export_text(messages: Sequence[Message], fmt: str) -> str:
    """Stored messages as ``fmt`` (`EXPORT_FORMATS`): JSON lines or a request body.

    The bodies are rendered without the provider checks: an export shows what was
    stored, an agent turn still waiting for its tool results included.
    """
    if fmt == "jsonl":
        return "".join(json.dumps(m.to_dict(), ensure_ascii=False) + "\n" for m in messages)
    body: dict[str, Any]
    if fmt == "openai":
        body = {"messages": adapters.render_openai_chat(messages, validate=False)}
    elif fmt == "responses":
        body = {"input": adapters.render_responses(messages, validate=False)}
    elif fmt == "anthropic":
        body = adapters.render_anthropic(messages, first_user_text=None, validate=False)
    else:
        raise ConfigError(f"--format: unknown format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}")
    return json.dumps(body, ensure_ascii=False, indent=1) + "\n"


def _export(args: argparse.Namespace, out: Any) -> None:
    convs = _open(args)
    try:
        user = _acting_user(convs, args)
        messages = convs.messages_sync(args.conversation, tenant=args.tenant, user=user)
        text = export_text(messages, args.format)
    finally:
        convs.close()
    if args.output is None:
        out.write(text)
    else:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace, out: Any) -> None:
    commands = {"import": _import, "export": _export, "inspect": _inspect, "compact": _compact}
    commands[args.command](args, out)


def commands() -> Sequence[str]:
    return ("import", "export", "inspect", "compact")
