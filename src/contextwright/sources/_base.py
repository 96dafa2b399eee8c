"""The `Source` contract and the triggers that decide when a source applies.

A source is anything with a ``name`` and ``async fetch(turn, allowance)`` returning a
`Block`, a list of blocks, or None. Everything else is optional and read with a
default: ``priority`` (P1), ``trigger`` (always), ``deadline`` (seconds, 0.5 — a
memory search's timeout), ``ttl`` (seconds to cache the result, 0 = never),
``tags`` (for invalidation), ``static`` (belongs in the cached prefix), and
``cache_key(turn)`` (what the cached result depends on; by default the namespace
only). `SourceBase` is a dataclass holding these defaults for subclasses.

A trigger is a callable ``(turn) -> str | None``: the reason the source applies, or
None when it does not. The plan stage records the reason in the receipt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from .._errors import ConfigError
from ..model._blocks import Block, Priority
from ._state import Turn

__all__ = [
    "FetchResult",
    "Source",
    "SourceBase",
    "Trigger",
    "all_of",
    "always",
    "any_of",
    "every_n_turns",
    "first_turn",
    "keywords",
    "predicate",
    "regex",
    "stage",
]

FetchResult: TypeAlias = Block | Sequence[Block] | None
Trigger: TypeAlias = Callable[[Turn], "str | None"]


@runtime_checkable
class Source(Protocol):
    """A provider of context blocks. Only ``name`` and ``fetch`` are required."""

    name: str

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        """Blocks for this turn; ``allowance`` is the token share the source may aim for."""
        ...


@dataclass
class SourceBase:
    """Defaults for the optional attributes of a `Source`; subclass and write `fetch`."""

    name: str = "source"
    priority: int = Priority.P1
    trigger: Trigger | None = None
    deadline: float = 0.5
    ttl: float = 0.0
    tags: frozenset[str] = field(default_factory=frozenset)
    static: bool = False

    def cache_key(self, turn: Turn) -> str:
        return ""

    def cache_tags(self, turn: Turn) -> Iterable[str]:
        return self.tags

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        raise NotImplementedError(f"{type(self).__name__}.fetch")


# -- triggers --------------------------------------------------------------------------


def always() -> Trigger:
    return lambda turn: "always"


def keywords(words: Iterable[str], *, case_sensitive: bool = False) -> Trigger:
    """Applies when the message contains any of ``words`` (substring; works for CJK)."""
    items = [w for w in words if w]
    if not items:
        raise ConfigError("keywords() needs at least one non-empty keyword")
    folded = items if case_sensitive else [w.casefold() for w in items]

    def check(turn: Turn) -> str | None:
        text = turn.query if case_sensitive else turn.query.casefold()
        for original, w in zip(items, folded, strict=True):
            if w in text:
                return f"keyword {original!r}"
        return None

    return check


def regex(pattern: str, flags: int = re.IGNORECASE) -> Trigger:
    """Applies when ``pattern`` matches somewhere in the message."""
    try:
        compiled = re.compile(pattern, flags)
    except re.error as exc:
        raise ConfigError(f"bad trigger pattern {pattern!r}: {exc}") from None

    def check(turn: Turn) -> str | None:
        m = compiled.search(turn.query)
        return f"pattern {pattern!r} matched {m.group(0)!r}" if m else None

    return check


def stage(*stages: str) -> Trigger:
    """Applies when the conversation's stage is one of ``stages``."""
    wanted = set(stages)
    if not wanted:
        raise ConfigError("stage() needs at least one stage")

    def check(turn: Turn) -> str | None:
        s = turn.state.stage
        return f"stage {s!r}" if s in wanted else None

    return check


def first_turn() -> Trigger:
    return lambda turn: "first turn" if turn.turn_number == 1 else None


def every_n_turns(n: int, *, first: bool = True) -> Trigger:
    """Applies on turn 1 (if ``first``) and then every ``n`` turns (1, n+1, 2n+1, …)."""
    if n < 1:
        raise ConfigError(f"every_n_turns needs n >= 1, got {n}")

    def check(turn: Turn) -> str | None:
        t = turn.turn_number
        if t == 1:
            return "first turn" if first else None
        return f"turn {t} (every {n})" if (t - 1) % n == 0 else None

    return check


def predicate(fn: Callable[[Turn], Any], reason: str = "predicate") -> Trigger:
    return lambda turn: reason if fn(turn) else None


def any_of(*triggers: Trigger) -> Trigger:
    def check(turn: Turn) -> str | None:
        for t in triggers:
            why = t(turn)
            if why:
                return why
        return None

    return check


def all_of(*triggers: Trigger) -> Trigger:
    def check(turn: Turn) -> str | None:
        reasons = []
        for t in triggers:
            why = t(turn)
            if not why:
                return None
            reasons.append(why)
        return " and ".join(reasons)

    return check
