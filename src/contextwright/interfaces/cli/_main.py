"""The command line: ``demo``, ``build FILE``, and the stored-conversation commands.

``demo`` builds a context from the bundled sample conversation (English and
Chinese turns, a tool call with a large result, collected info, an assessment,
memories, knowledge) with no servers, no network and no keys, and prints the
receipt and the messages. The sample is an advisory conversation, so the demo
uses the consultation preset (`consultation_sources`), and says so.

``build FILE --budget N`` reads a conversation — a JSON list or a JSONL file of
messages in OpenAI Chat, OpenAI Responses or Anthropic shape, or a JSON object
``{"messages": [...], "system": "...", "state": {...}, ...}`` like the demo file —
and builds the context for its last user message (or for ``--query TEXT`` after
all of them), with the general sources (`default_sources`: the file's memories
and knowledge, if any) or, with ``--preset consultation``, the consultation set. Bad input exits with status 2 and one line saying what and where.

``import``, ``inspect`` and ``compact`` work on stored conversations (`_cli_history`);
``serve`` runs the HTTP service and ``keys`` makes its tenant keys (`_serve`);
``mcp`` runs the MCP server (`contextwright.interfaces.mcp`, its own parser).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from ... import adapters
from ..._errors import BudgetError, ConfigError, ContextwrightError, InvalidMessageError, UserError
from ...budget._budget import model_info
from ...knowledge import InMemoryKnowledgeStore
from ...memory import InMemoryMemoryStore, Memory, Scope
from ...model._messages import Message
from ...pipeline._engine import ContextEngine
from ...pipeline._receipt import BuiltContext
from ...sources import (
    ConversationState,
    consultation_sources,
    consultation_templates,
    default_sources,
)
from ...tokens._count import HeuristicCounter, TokenCounter
from ...tokens._exact import default_counter
from ..eval import _locomo_cli as _eval
from ..mcp import _cli as _mcp
from . import _db, _serve
from . import _history as _cli_history
from ._files import load_conversation as _load

__all__ = ["main"]


def _engine(
    conf: Mapping[str, Any],
    counter: TokenCounter,
    budget: int | None,
    model: str | None,
    preset: str = "general",
) -> ContextEngine:
    memory = InMemoryMemoryStore()
    scope = Scope(str(conf.get("tenant", "default")), str(conf.get("user", "anonymous")))
    for i, m in enumerate(conf.get("memories", [])):
        if not isinstance(m, Mapping) or not isinstance(m.get("content"), str):
            raise InvalidMessageError(f"memories[{i}]", "must be an object with a 'content' string")
        memory.add(
            scope, Memory(m["content"], m.get("category", "fact"), int(m.get("importance", 50)))
        )
    knowledge = InMemoryKnowledgeStore()
    for i, k in enumerate(conf.get("knowledge", [])):
        if not isinstance(k, Mapping) or not isinstance(k.get("content"), str):
            raise InvalidMessageError(
                f"knowledge[{i}]", "must be an object with a 'content' string"
            )
        knowledge.add(k["content"], k.get("source", ""))
    experiences = InMemoryKnowledgeStore()
    for i, e in enumerate(conf.get("experiences", [])):
        if not isinstance(e, Mapping) or not isinstance(e.get("content"), str):
            raise InvalidMessageError(
                f"experiences[{i}]", "must be an object with a 'content' string"
            )
        experiences.add(e["content"], e.get("source", ""), e.get("category", ""))
    locale = str(conf.get("locale", "en"))
    templates = None
    if preset == "consultation":
        sources = consultation_sources(
            memory=memory,
            knowledge=knowledge if knowledge.passages else None,
            experiences=experiences if experiences.passages else None,
            knowledge_gate=conf.get("knowledge_gate", ()),
            experience_stages=conf.get("experience_stages", ()),
            labels=conf.get("labels"),
            core_fields=conf.get("core_fields", ()),
            stage_names=conf.get("stage_names"),
        )
        templates = consultation_templates(locale)
    else:
        sources = default_sources(
            memory=memory if conf.get("memories") else None,
            knowledge=knowledge if knowledge.passages else None,
            knowledge_gate=conf.get("knowledge_gate", ()),
        )
    system = conf.get("system", "")
    if not isinstance(system, str):
        raise InvalidMessageError("system", "must be a string")
    return ContextEngine(
        system_prompt=system, sources=sources, counter=counter, model=model,
        budget=budget, locale=locale, templates=templates,
        max_message_tokens=int(conf.get("max_message_tokens", 2000)),
    )  # fmt: skip


def _split_current(messages: list[Message], query: str | None) -> tuple[list[Message], Message]:
    if query is not None:
        if not query.strip():
            raise InvalidMessageError("--query", "must not be empty")
        return messages, Message.user(query)
    if not messages or messages[-1].role != "user":
        raise InvalidMessageError(
            f"messages[{len(messages) - 1}]" if messages else "messages",
            "the last message must be a user message (or pass --query TEXT)",
        )
    return messages[:-1], messages[-1]


def _prepare(conf: Mapping[str, Any], query: str | None) -> tuple[list[Message], Message]:
    messages = adapters.read_messages(conf["messages"])
    if query is None and isinstance(conf.get("message"), str):
        query = conf["message"]
    return _split_current(messages, query)


def _counter(model: str | None, explicit: bool) -> TokenCounter:
    """The model's exact counter when known and installed; else the heuristic.

    A model named by ``--model`` must be known (`_cli_history.counter_for`); one
    named by the file only picks the tokenizer when it is.
    """
    if explicit or (model and _cli_history.known_model(model)):
        return _cli_history.counter_for(model)
    return default_counter(model) if model else HeuristicCounter()


def _print(built: BuiltContext, fmt: str, as_json: bool, out: Any) -> None:
    request = built.render(fmt)
    if as_json:
        payload = {"messages": request, "report": built.report.to_dict()}
        out.write(json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    console = Console(file=out, width=max(100, Console().width))
    console.print(built.report.to_table())
    console.print()
    for i, m in enumerate(built.messages):
        body = m.text
        if m.tool_calls:
            body += "".join(f"\n→ {c.name}({c.arguments})" for c in m.tool_calls)
        if m.role == "tool":
            body = f"[{m.tool_results[0].call_id}] " + body
        console.print(Panel(escape(body), title=f"{i} · {m.role}", title_align="left"))


def _build(conf: Mapping[str, Any], args: argparse.Namespace) -> BuiltContext:
    model = args.model or conf.get("model")
    counter = _counter(model, explicit=bool(args.model))
    history, current = _prepare(conf, args.query)
    # leading system messages in the file are the system prompt, unless one was given
    system = conf.get("system") or ""
    lead = 0
    while lead < len(history) and history[lead].role in ("system", "developer"):
        lead += 1
    if lead and not system:
        system = "\n\n".join(m.text for m in history[:lead])
    history = history[lead:]
    if args.budget is None:
        try:
            model_info(model or "")
        except ConfigError:
            raise UserError(
                f"--budget N is required unless --model names a known model (got {model!r})"
            ) from None
    engine = _engine({**conf, "system": system}, counter, args.budget, model, args.preset)
    state = ConversationState.from_dict(conf.get("state") or {})
    return engine.build_sync(
        current,
        history=history,
        state=state,
        tenant=str(conf.get("tenant", "default")),
        user=str(conf.get("user", "anonymous")),
        conversation=str(conf.get("conversation", "default")),
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextwright", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="build a context from the bundled sample conversation (with the consultation preset)",
    )
    demo.set_defaults(preset="consultation")
    demo.add_argument("--budget", type=int, default=2500, help="input tokens (default 2500)")
    demo.add_argument("--format", choices=["openai", "anthropic", "responses"], default="openai")
    demo.add_argument(
        "--model",
        default="gpt-4o",
        help="model name: picks the tokenizer (default gpt-4o, exact o200k if installed)",
    )
    demo.add_argument("--json", action="store_true", help="print {messages, report} as JSON")
    demo.add_argument("--query", default=None, help="ask this instead of the sample's question")
    b = sub.add_parser("build", help="build a context for a conversation file")
    b.add_argument("file", type=Path)
    b.add_argument("--budget", type=int, default=None, help="input tokens")
    b.add_argument("--model", default=None)
    b.add_argument("--format", choices=["openai", "anthropic", "responses"], default="openai")
    b.add_argument(
        "--query", default=None, help="the new user message (default: the file's last user message)"
    )
    b.add_argument("--json", action="store_true")
    b.add_argument(
        "--preset",
        choices=["general", "consultation"],
        default="general",
        help="sources: general (the file's memories and knowledge; default) or consultation "
        "(also collected info, stats, assessment, experiences, device, agents)",
    )
    _cli_history.add_parsers(sub)
    _eval.add_parsers(sub)
    _db.add_parsers(sub)
    _serve.add_parsers(sub)
    _mcp.add_parsers(sub)
    return p


def _version() -> str:
    try:
        return metadata.version("contextwright")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "budget", None) is not None and args.budget <= 0:
        print(
            f"contextwright: error: --budget must be a positive integer, got {args.budget}",
            file=sys.stderr,
        )
        return 2
    try:
        if args.command == "eval":
            return _eval.run(args, sys.stdout)
        if args.command == "migrate":
            return _db.run(args, sys.stdout)
        if args.command in _serve.commands():
            return _serve.run(args, sys.stdout)
        if args.command == "mcp":
            return _mcp.run(args)
        if args.command in _cli_history.commands():
            _cli_history.run(args, sys.stdout)
            return 0
        if args.command == "demo":
            ref = resources.files("contextwright.data").joinpath("demo_conversation.json")
            conf = json.loads(ref.read_text(encoding="utf-8"))
        else:
            conf = _load(args.file)
        built = _build(conf, args)
        if args.command == "demo" and not args.json:
            print(
                "The sample is an advisory conversation: built with the consultation preset "
                "(contextwright.sources.consultation_sources). `contextwright build` uses the "
                "general sources unless given --preset consultation.\n"
            )
        _print(built, args.format, args.json, sys.stdout)
    except BudgetError as exc:
        print(f"contextwright: error: budget: {exc}", file=sys.stderr)
        return 2
    except InvalidMessageError as exc:
        # name the file once: errors from reading it already start with its path
        where = getattr(args, "file", None)
        text = str(exc)
        if where is not None and not text.startswith(str(where)):
            text = f"{where}: {text}"
        print(f"contextwright: error: {text}", file=sys.stderr)
        return 2
    except (UserError, ContextwrightError) as exc:
        print(f"contextwright: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # piped into head: not an error
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
