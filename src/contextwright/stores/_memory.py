"""Long-term memory: the records, the scope, and the contract the sources read through.

A memory is a short statement about a user — a fact, a preference, an intent, a
project, a skill, an experience — with an importance from 0 to 100
(docs/design-notes.md, Built-in sources).
Every memory belongs to a `Scope` (tenant, user, optional namespace) and every read
names one: a store must never return a memory of another scope. Isolation is the
store's job, done inside the store (in SQL for `SQLiteMemoryStore`), not the caller's.

Memories are never edited in place. A newer statement of the same fact *supersedes*
the older one: the old record stays (``history`` shows it) with ``superseded_by``
and ``superseded_at`` set, and searches leave it out. A ``key`` names the fact
("age", "employer"): adding a memory with the scope, category and key of a live one
supersedes it in the same transaction. ``active`` switches a memory off without
superseding it (system experiences are reviewed and gated so).

`MemoryStore` is the narrow async contract (``top`` and ``search``) that
`UserMemorySource` uses; `InMemoryMemoryStore` is a small lexical implementation for
tests and demos, `SQLiteMemoryStore` the persistent hybrid one. The validators here
are shared by both, so bad input is refused the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, InvalidMessageError
from ..model._checks import check_unicode, unicode_problem
from ..text._scores import lexical_score
from ..text._terms import terms
from ._cache import cache_namespace

__all__ = [
    "CATEGORIES",
    "InMemoryMemoryStore",
    "Memory",
    "MemoryHit",
    "MemoryStore",
    "Scope",
    "check_category",
    "check_content",
    "check_importance",
    "check_key",
    "check_limit",
    "check_scope",
    "check_score",
    "check_search",
]

# The categories extraction writes (docs/design-notes.md, Built-in sources); any other
# lower-case name is accepted too.
CATEGORIES = ("fact", "preference", "intent", "project", "skill", "experience", "event")
_CATEGORY = re.compile(r"[a-z][a-z0-9_\-]{0,39}")
MAX_CONTENT_CHARS = 32_000  # a memory is a statement, not a document (use knowledge for those)


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memories: a tenant, a user in it, and an optional namespace."""

    tenant: str
    user: str
    namespace: str = ""

    def __post_init__(self) -> None:
        for label in ("tenant", "user"):
            value = getattr(self, label)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"Scope.{label} must be a non-empty string, got {value!r}")
        if not isinstance(self.namespace, str):
            raise ConfigError("Scope.namespace must be a string")
        for label in ("tenant", "user", "namespace"):
            value = getattr(self, label)
            if not value.isascii() and (problem := unicode_problem(value)) is not None:
                raise ConfigError(f"Scope.{label} {problem}")

    @property
    def key(self) -> str:
        return cache_namespace(self.tenant, self.user, self.namespace)


@dataclass(frozen=True, slots=True)
class Memory:
    """One remembered statement; `Memory("likes tea")` is a valid one.

    The first six fields keep their historical order (positional use is supported).
    ``tenant``/``user``/``namespace`` are filled in by the store that returns it.
    ``source_message_ids`` are the ids of the messages it was extracted from
    (provenance); ``meta`` is free JSON-able data; ``embedding_model`` names the
    model whose vector the store holds for it (None: lexical only).
    """

    content: str
    category: str = "fact"
    importance: int = 50
    id: str = ""
    created_at: float = field(default_factory=time.time)
    source_message_ids: tuple[str, ...] = ()
    tenant: str = ""
    user: str = ""
    namespace: str = ""
    key: str | None = None
    updated_at: float | None = None
    accessed_at: float | None = None
    access_count: int = 0
    superseded_by: str | None = None
    superseded_at: float | None = None
    active: bool = True
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    embedding_model: str | None = None

    @property
    def scope(self) -> Scope | None:
        """The scope the memory belongs to, if the store said so."""
        return Scope(self.tenant, self.user, self.namespace) if self.tenant and self.user else None

    @property
    def live(self) -> bool:
        """Neither superseded nor switched off: what searches and `top` return."""
        return self.superseded_by is None and self.active


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """A memory and how well it answers a query (higher is better).

    For `SQLiteMemoryStore`, ``score`` is in 0..1: the ``relevance`` (lexical and
    semantic similarity, see ``_search.py``) weighted by importance and recency.
    ``relevance`` is None where the store does not tell them apart.
    """

    memory: Memory
    score: float
    relevance: float | None = None


@runtime_checkable
class MemoryStore(Protocol):
    """Scoped reads of long-term memory."""

    async def top(self, scope: Scope, limit: int) -> Sequence[Memory]:
        """The ``limit`` most important memories of ``scope``."""
        ...

    async def search(self, scope: Scope, query: str, limit: int) -> Sequence[MemoryHit]:
        """The memories of ``scope`` most relevant to ``query``, best first."""
        ...


# -- validation shared by the stores -------------------------------------------------


def check_content(content: object, where: str = "content") -> str:
    if not isinstance(content, str):
        raise InvalidMessageError(where, f"must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InvalidMessageError(where, "must not be empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidMessageError(
            where, f"is {len(content)} characters; a memory holds at most {MAX_CONTENT_CHARS}"
        )
    return check_unicode(content, where)


def check_importance(importance: object) -> int:
    if isinstance(importance, bool) or not isinstance(importance, int):
        raise ConfigError(f"memory importance must be an int within 0..100, got {importance!r}")
    if not 0 <= importance <= 100:
        raise ConfigError(f"memory importance must be within 0..100, got {importance}")
    return importance


def check_category(category: object) -> str:
    if not isinstance(category, str) or not _CATEGORY.fullmatch(category):
        raise ConfigError(
            f"memory category must be a lower-case name such as {', '.join(CATEGORIES)} "
            f"(letters, digits, '_' or '-', at most 40), got {category!r}"
        )
    return category


def check_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise ConfigError(f"memory key must be None or a non-empty string of <= 200, got {key!r}")
    if (problem := unicode_problem(key)) is not None:
        raise ConfigError(f"memory key {problem}")
    return key


def check_limit(limit: object, name: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"{name} must be a non-negative int, got {limit!r}")
    return limit


def check_score(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    return float(value)


def check_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise ConfigError(f"scope must be a Scope, got {type(scope).__name__}")
    return scope


def check_search(query: object, limit: object, min_score: object) -> tuple[int, float] | None:
    """A search's ``(limit, floor)``, or None when it finds nothing anyway (no limit, no words)."""
    if not isinstance(query, str):
        raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
    n = check_limit(limit)
    floor = check_score(min_score, "min_score")
    if n == 0 or not query.strip():
        return None
    return n, floor


class InMemoryMemoryStore:
    """A `MemoryStore` in a dict, keyed by scope; lexical search; no persistence."""

    def __init__(self) -> None:
        self._by_scope: dict[Scope, list[Memory]] = {}
        self._ids = itertools.count(1)

    def add(self, scope: Scope, memory: Memory | str, **kw: Any) -> Memory:
        if isinstance(memory, str):
            memory = Memory(memory, **kw)
        check_content(memory.content)
        check_importance(memory.importance)
        memory = dataclasses.replace(
            memory,
            id=memory.id or f"m{next(self._ids)}",
            tenant=scope.tenant,
            user=scope.user,
            namespace=scope.namespace,
        )
        self._by_scope.setdefault(scope, []).append(memory)
        return memory

    async def top(self, scope: Scope, limit: int) -> Sequence[Memory]:
        items = [m for m in self._by_scope.get(scope, []) if m.live]
        return sorted(items, key=lambda m: (-m.importance, -m.created_at))[:limit]

    async def search(self, scope: Scope, query: str, limit: int) -> Sequence[MemoryHit]:
        q = terms(query)
        hits = [
            MemoryHit(m, s)
            for m in self._by_scope.get(scope, [])
            if m.live and (s := lexical_score(q, m.content)) > 0
        ]
        hits.sort(key=lambda h: (-h.score, -h.memory.importance))
        return hits[:limit]
