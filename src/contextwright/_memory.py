"""Long-term memory: the contract the user-memory source reads through.

A memory is a short statement about a user (a fact, a preference, an intent…) with
an importance from 0 to 100 (seed 000 §4.1). Every memory belongs to a `Scope`
(tenant, user, optional namespace) and every read names one: a store must never
return a memory of another scope — isolation is the store's job, not the caller's.

`MemoryStore` is the narrow contract (``top`` and ``search``); `InMemoryMemoryStore`
is a real, lexical implementation for tests, demos and small deployments. The
persistent, hybrid-search store lives in the memory issue's modules and fulfils the
same contract.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ._errors import ConfigError
from ._lexical import lexical_score, terms

__all__ = ["InMemoryMemoryStore", "Memory", "MemoryHit", "MemoryStore", "Scope"]


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

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.user}/{self.namespace}"


@dataclass(frozen=True, slots=True)
class Memory:
    """One remembered statement."""

    content: str
    category: str = "fact"
    importance: int = 50
    id: str = ""
    created_at: float = field(default_factory=time.time)
    source_message_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryHit:
    memory: Memory
    score: float


@runtime_checkable
class MemoryStore(Protocol):
    """Scoped reads of long-term memory."""

    async def top(self, scope: Scope, limit: int) -> Sequence[Memory]:
        """The ``limit`` most important memories of ``scope``."""
        ...

    async def search(self, scope: Scope, query: str, limit: int) -> Sequence[MemoryHit]:
        """The memories of ``scope`` most relevant to ``query``, best first."""
        ...


class InMemoryMemoryStore:
    """A `MemoryStore` in a dict, keyed by scope; lexical search."""

    def __init__(self) -> None:
        self._by_scope: dict[Scope, list[Memory]] = {}
        self._ids = itertools.count(1)

    def add(self, scope: Scope, memory: Memory | str, **kw: object) -> Memory:
        if isinstance(memory, str):
            memory = Memory(memory, **kw)  # type: ignore[arg-type]
        if not 0 <= memory.importance <= 100:
            raise ConfigError(f"memory importance must be within 0..100, got {memory.importance}")
        if not memory.id:
            memory = Memory(
                memory.content,
                memory.category,
                memory.importance,
                f"m{next(self._ids)}",
                memory.created_at,
                memory.source_message_ids,
            )
        self._by_scope.setdefault(scope, []).append(memory)
        return memory

    async def top(self, scope: Scope, limit: int) -> Sequence[Memory]:
        items = self._by_scope.get(scope, [])
        return sorted(items, key=lambda m: (-m.importance, -m.created_at))[:limit]

    async def search(self, scope: Scope, query: str, limit: int) -> Sequence[MemoryHit]:
        q = terms(query)
        hits = [
            MemoryHit(m, s)
            for m in self._by_scope.get(scope, [])
            if (s := lexical_score(q, m.content)) > 0
        ]
        hits.sort(key=lambda h: (-h.score, -h.memory.importance))
        return hits[:limit]
