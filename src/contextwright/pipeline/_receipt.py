"""The context receipt: what a build included, cut and dropped, and why.

`ContextReport` is the second half of `BuiltContext`. Per item (a source's block, the
system prompt, the summary, the history window, the current message, the goal) it
holds a `BlockReport`: source, priority, section, tokens, status and reason. Per
section it holds what was allotted and what was used; then totals, utilisation,
cache hits, the correction of the count by providers' usage and any rebuild after
a context-length error (``usage``, ``overflow``), and per-stage timings.
`to_dict`/`to_json` give the machine form; `to_table` a `rich` table for people.

Statuses: ``included``, ``truncated`` (included, shortened to fit), ``dropped`` (did
not fit or was crowded out), ``empty`` (the source had nothing), ``skipped`` (its
trigger did not fire), ``failed`` (it raised), ``timed_out`` (past its deadline).
``cached`` is a flag on any of them: the block was served from the cache.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

from .. import adapters
from .._errors import ConfigError
from ..model._messages import Message
from ._prefix import PrefixReport

__all__ = ["BlockReport", "BuiltContext", "ContextReport", "SectionReport", "Status"]

Status: TypeAlias = Literal[
    "included", "truncated", "dropped", "empty", "skipped", "failed", "timed_out"
]


@dataclass
class BlockReport:
    name: str
    source: str
    section: str
    priority: int
    status: Status
    tokens: int = 0
    reason: str = ""
    cached: bool = False
    original_tokens: int | None = None  # before truncation
    fetch_ms: float | None = None


@dataclass
class SectionReport:
    share: float
    allotted: int
    used: int


@dataclass
class ContextReport:
    budget: int
    used: int
    counter: str
    exact: bool
    blocks: list[BlockReport] = field(default_factory=list)
    sections: dict[str, SectionReport] = field(default_factory=dict)
    protected_tokens: int = 0
    history_messages: int = 0
    history_units: int = 0
    history_considered: int = 0
    history_total: int = 0
    history_shortened: int = 0
    history_stopped: str = ""
    cache_hits: int = 0
    cache_misses: int = 0
    # why the block cache's server (Redis) was skipped during this build, if it was
    cache_unavailable: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    compaction: dict[str, Any] | None = None  # stateful builds: urgency, and what was compacted
    # stateful builds: the newest stored message (sequence number) the build read
    last_seq: int | None = None
    # the count correction learnt from providers' usage: factor, raw and corrected
    # totals, the provider's budget (pipeline/_usage.py); None when there is none
    usage: dict[str, Any] | None = None
    # a rebuild after a context-length error: what the error said, the budget cut to
    overflow: dict[str, Any] | None = None
    # the prompt cache: this request against the previous build's (`PrefixReport`)
    prefix: PrefixReport | None = None

    @property
    def utilisation(self) -> float:
        return self.used / self.budget if self.budget else 0.0

    def block(self, name: str) -> BlockReport:
        """The report line of the item called ``name`` (KeyError if absent)."""
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(name)

    def by_status(self, *statuses: Status) -> list[BlockReport]:
        return [b for b in self.blocks if b.status in statuses]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["utilisation"] = round(self.utilisation, 4)
        d["timings_ms"] = {k: round(v, 3) for k, v in self.timings_ms.items()}
        for b in d["blocks"]:
            if b["fetch_ms"] is not None:
                b["fetch_ms"] = round(b["fetch_ms"], 3)
        return d

    def to_json(self, **kw: Any) -> str:
        kw.setdefault("ensure_ascii", False)
        return json.dumps(self.to_dict(), **kw)

    def to_table(self) -> Any:
        """A `rich` renderable: the items table followed by sections and totals."""
        from rich.console import Group
        from rich.table import Table

        items = Table(title="context receipt", title_justify="left", show_lines=False)
        for col in ("item", "source", "section"):
            items.add_column(col)
        items.add_column("P", justify="right")
        items.add_column("tokens", justify="right")
        items.add_column("status")
        items.add_column("reason", overflow="fold")
        colours = {
            "included": "green", "truncated": "yellow", "dropped": "red", "empty": "dim",
            "skipped": "dim", "failed": "bold red", "timed_out": "bold red",
        }  # fmt: skip
        for b in self.blocks:
            status = b.status + (" (cached)" if b.cached else "")
            tokens = str(b.tokens)
            if b.original_tokens is not None and b.original_tokens != b.tokens:
                tokens = f"{b.tokens}/{b.original_tokens}"
            items.add_row(
                b.name, b.source, b.section, str(b.priority), tokens,
                f"[{colours.get(b.status, 'white')}]{status}[/]", b.reason,
            )  # fmt: skip
        sections = Table(title="sections", title_justify="left")
        for col in ("section", "share", "allotted", "used"):
            sections.add_column(col, justify="right" if col != "section" else "left")
        for name, s in self.sections.items():
            sections.add_row(name, f"{s.share:.0%}", str(s.allotted), str(s.used))
        timings = " ".join(f"{k}={v:.2f}ms" for k, v in self.timings_ms.items())
        summary = (
            f"budget {self.budget} · used {self.used} ({self.utilisation:.1%}) · "
            f"protected {self.protected_tokens} · counter {self.counter}{' (exact)' if self.exact else ''}\n"
            f"history: {self.history_messages} messages in {self.history_units} units kept of "
            f"{self.history_total}; {self.history_shortened} shortened; stopped at: {self.history_stopped}\n"
            f"cache: {self.cache_hits} hits, {self.cache_misses} misses · {timings}"
        )
        if self.last_seq is not None:
            summary += f"\nstored conversation: read up to seq {self.last_seq}"
        if self.usage:
            u = self.usage
            summary += (
                f"\nusage correction: x{u['factor']} ({u['samples']} samples) · raw {u['raw']} "
                f"-> corrected {u['corrected']} of {u['budget']}"
            )
        if self.overflow:
            o = self.overflow
            summary += (
                f"\nrebuilt after overflow: {o['provider']} counted {o['reported']} of "
                f"{o['limit']}; {o['previous_used']} -> budget {o['retry_budget']}"
            )
        if self.compaction:
            summary += "\ncompaction: " + ", ".join(f"{k}={v}" for k, v in self.compaction.items())
        if self.prefix is not None:
            p = self.prefix
            summary += (
                f"\nprompt cache: {p.cached_tokens} of {p.cacheable_tokens} cacheable tokens "
                f"as the previous build sent them, {p.write_tokens} written"
                + (f" (changed: {p.changed})" if p.changed else "")
            )
        parts: list[Any] = [items, sections, summary]
        parts += [f"[yellow]warning:[/] {w}" for w in self.warnings]
        return Group(*parts)


@dataclass
class BuiltContext:
    """What a build returns: the messages to send and the receipt.

    ``messages`` are provider-neutral; `render` turns them into a provider's request.
    ``cache_breakpoints`` are indexes of messages that end a stable prefix (the static
    system message, the summary, the last history message) for providers with
    prompt caching.
    """

    messages: list[Message]
    report: ContextReport
    cache_breakpoints: Sequence[int] = ()
    rendered: Any = None  # the provider request, when build() was asked for one

    def render(self, provider: str = "openai", **kw: Any) -> Any:
        """The messages in a provider's wire format, validated by its rules.

        ``"openai"``: a Chat Completions ``messages`` list; ``"responses"``: an OpenAI
        Responses ``input`` list; ``"anthropic"``: ``{"system": [...], "messages": [...]}``
        with ``cache_control`` breakpoints after the stable prefix. Extra keywords go
        to the renderer (e.g. ``system_role="developer"`` for OpenAI reasoning models).

        Provider content that ``provider`` cannot take as it came (another provider's
        thinking, documents, compactions; docs/providers.md) is converted or dropped,
        and the receipt gets a ``render`` line for each kind of it saying which and why.
        """
        notes: list[adapters.RenderNote] = kw.pop("notes", None) or []
        if provider == "openai":
            out: Any = adapters.render_openai_chat(self.messages, notes=notes, **kw)
        elif provider == "responses":
            out = adapters.render_responses(self.messages, notes=notes, **kw)
        elif provider == "anthropic":
            kw.setdefault("cache_breakpoints", self.cache_breakpoints)
            out = adapters.render_anthropic(self.messages, notes=notes, **kw)
        else:
            raise ConfigError(
                f"unknown provider {provider!r}; expected 'openai', 'responses' or 'anthropic'"
            )
        self._note(provider, notes)
        return out

    def _note(self, provider: str, notes: Sequence[adapters.RenderNote]) -> None:
        """One receipt line per kind of part the render converted or dropped."""
        grouped: dict[tuple[str, str, str], list[int]] = {}
        for n in notes:
            grouped.setdefault((n.part, n.action, n.reason), []).append(n.message)
        names = {b.name for b in self.report.blocks}
        for (part, action, reason), where in grouped.items():
            name = f"render:{provider}:{part}"
            if name in names:
                continue  # rendered again for the same provider: said already
            count = f"{len(where)} part(s) in message(s) {', '.join(map(str, sorted(set(where))))}"
            status: Status = "dropped" if action == "dropped" else "included"
            self.report.blocks.append(
                BlockReport(
                    name, "render", "history", 2, status, 0, f"{action}: {reason} ({count})"
                )
            )
