"""The block cache: TTL, tag invalidation, namespaces, hit statistics.

Sources whose output does not change from one message to the next (user memory
for 60 s, knowledge for 30 s, experiences for 120 s — docs/design-notes.md, Block
cache) are served from
here. Entries live in a *namespace* (the engine's is `cache_namespace` of tenant,
user and conversation) so one conversation never sees another's entries; *tags*
cut across namespaces, so that a memory write for user ``u`` of tenant ``t`` can
drop ``user_memory_tag("t", "u")`` everywhere at once, so a new fact is never hidden
behind a TTL. The clock is
injectable for tests.

Namespaces and tags built from ids are never plain joins: with ``"/"`` as the
separator, tenant ``t``, user ``u``, conversation ``u/z`` and tenant ``t/u``, user
``u``, conversation ``z`` would share a namespace, and one tenant would be served
the other's cached blocks. Each id is escaped first (``%``, ``/`` and ``:`` as
``%25``, ``%2F``, ``%3A``), so the joined string names one tuple of ids only, and
stays a plain string that a shared cache (Redis) can hold. Ids without those
characters read as before: ``user_memory:acme/u1``.

`Cache` is the narrow contract (get, set, invalidate, clear); `MemoryCache` is the
in-process implementation, an LRU bounded by ``maxsize``. A shared cache for many
workers (Redis) implements the same contract; `open_cache` turns what
``ContextEngine(cache=…)`` was given (a `Cache`, None, or a ``redis://`` URL) into one.

A cache may also have an ``unavailable`` attribute: None while it works, else why
its backing server is being skipped (gets miss, sets are dropped). The engine reads
it after the fetch and notes it in the receipt (``cache_unavailable``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError

__all__ = [
    "Cache",
    "CacheStats",
    "MemoryCache",
    "cache_namespace",
    "open_cache",
    "user_memory_tag",
]


def _escape(part: str) -> str:
    """``part`` with ``%``, ``/`` and ``:`` percent-escaped: it then contains no separator."""
    if "%" in part:
        part = part.replace("%", "%25")
    if "/" in part:
        part = part.replace("/", "%2F")
    if ":" in part:
        part = part.replace(":", "%3A")
    return part


def cache_namespace(*parts: str) -> str:
    """A cache namespace (or tag body) made of ids, one per distinct tuple of ids.

    Each part is escaped, then the parts are joined with ``"/"``: ``("t", "u/z")``
    gives ``t/u%2Fz`` and ``("t/u", "z")`` gives ``t%2Fu/z``. The engine's namespace
    for a build is ``cache_namespace(tenant, user, conversation)``.
    """
    return "/".join([_escape(p) for p in parts])


def user_memory_tag(tenant: str, user: str) -> str:
    """The tag `UserMemorySource` caches its blocks under, for ``engine.invalidate``.

    ``user_memory:`` then `cache_namespace` of the tenant and user; ids without
    ``%``, ``/`` or ``:`` read plainly (``user_memory:acme/u1``).
    """
    return "user_memory:" + cache_namespace(tenant, user)


@dataclass
class CacheStats:
    """Counters since the cache was made (or `reset`)."""

    hits: int = 0
    misses: int = 0
    expired: int = 0
    sets: int = 0
    invalidated: int = 0
    evicted: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def reset(self) -> None:
        self.hits = self.misses = self.expired = self.sets = self.invalidated = self.evicted = 0


@runtime_checkable
class Cache(Protocol):
    """What the engine needs from a cache."""

    def get(self, namespace: str, key: str) -> Any | None:
        """The fresh value under (namespace, key), or None."""
        ...

    def set(
        self, namespace: str, key: str, value: Any, *, ttl: float, tags: Iterable[str] = ()
    ) -> None:
        """Store ``value`` for ``ttl`` seconds (ttl <= 0 stores nothing)."""
        ...

    def invalidate(self, *, tags: Iterable[str] = (), namespace: str | None = None) -> int:
        """Drop entries carrying any of ``tags``, or all of ``namespace``; returns how many."""
        ...

    def clear(self) -> None:
        """Drop everything."""
        ...


@dataclass
class _Entry:
    value: Any
    expires_at: float
    tags: frozenset[str] = field(default_factory=frozenset)


class MemoryCache:
    """In-process `Cache`: a dict with expiry, a tag index and LRU eviction."""

    def __init__(self, *, maxsize: int = 10_000, clock: Callable[[], float] = time.monotonic):
        if maxsize < 1:
            raise ConfigError(f"MemoryCache maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self.clock = clock
        self.stats = CacheStats()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._by_tag: dict[str, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, namespace: str, key: str) -> Any | None:
        k = (namespace, key)
        entry = self._entries.get(k)
        if entry is None:
            self.stats.misses += 1
            return None
        if self.clock() >= entry.expires_at:
            self._drop(k)
            self.stats.expired += 1
            self.stats.misses += 1
            return None
        self._entries.move_to_end(k)
        self.stats.hits += 1
        return entry.value

    def set(
        self, namespace: str, key: str, value: Any, *, ttl: float, tags: Iterable[str] = ()
    ) -> None:
        if ttl <= 0:
            return
        k = (namespace, key)
        if k in self._entries:
            self._drop(k)
        entry = _Entry(value, self.clock() + ttl, frozenset(tags))
        self._entries[k] = entry
        for tag in entry.tags:
            self._by_tag.setdefault(tag, set()).add(k)
        self.stats.sets += 1
        while len(self._entries) > self.maxsize:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            self.stats.evicted += 1

    def invalidate(self, *, tags: Iterable[str] = (), namespace: str | None = None) -> int:
        doomed: set[tuple[str, str]] = set()
        for tag in tags:
            doomed |= self._by_tag.get(tag, set())
        if namespace is not None:
            doomed |= {k for k in self._entries if k[0] == namespace}
        for k in doomed:
            self._drop(k)
        self.stats.invalidated += len(doomed)
        return len(doomed)

    def clear(self) -> None:
        self._entries.clear()
        self._by_tag.clear()

    def _drop(self, k: tuple[str, str]) -> None:
        entry = self._entries.pop(k, None)
        if entry is None:
            return
        for tag in entry.tags:
            keys = self._by_tag.get(tag)
            if keys is not None:
                keys.discard(k)
                if not keys:
                    del self._by_tag[tag]


def open_cache(cache: Cache | str | None) -> Cache:
    """``cache`` itself, a new `MemoryCache` for None, a `RedisCache` for a ``redis://`` URL.

    Any other string is a `ConfigError` naming ``cache``; the Redis cache needs the
    ``redis`` extra (`MissingDependencyError` otherwise).
    """
    if cache is None:
        return MemoryCache()
    if isinstance(cache, str):
        from .redis._client import is_redis_url

        if not is_redis_url(cache):
            raise ConfigError(f"cache: expected a Cache or a redis://… URL, got {cache!r:.80}")
        from .redis import RedisCache

        return RedisCache.from_url(cache)
    return cache
