"""The pieces `Host` is made of: client message ids, bounded pools, tenant knowledge, JSON shapes.

- `read_with_ids` reads a list of messages in any provider shape (as the
  library's `adapters.read_messages` does) and gives each message the id its
  client sent, so that an append sent twice stores its messages once.
- `Pool` is a small least-recently-used cache of closable objects (the per-model
  `Conversations`, the per-tenant knowledge stores) that never closes an object a
  caller is still using: an evicted one is closed when its last user lets go.
- `TenantKnowledgeSource` is the relevant-knowledge source for a server of many
  tenants: knowledge stores serve one tenant each, so it picks the build's own.
- The ``*_dict`` functions turn the library's records into plain JSON data;
  the ``check_*`` functions refuse bad arguments (`InvalidMessageError`, naming the
  field); `NotFoundError` is what a tenant asking for what it has not gets.
- `open_stores` opens the backend, the memory store and the per-tenant knowledge
  stores of one database.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import adapters
from .._errors import InvalidMessageError, UserError
from ..history import CompactionResult
from ..knowledge import KnowledgeStore
from ..memory import Memory, MemoryHit
from ..model._messages import Message
from ..sources._base import FetchResult
from ..sources._builtin import RelevantKnowledgeSource
from ..sources._state import Turn
from ..stores import Backend, CompactionEntry, ConversationInfo, SQLiteBackend, SQLiteStore, Summary
from ..stores._url import DbTarget

__all__ = [
    "NotFoundError",
    "Pool",
    "TenantKnowledgeSource",
    "check_count",
    "check_id",
    "check_text",
    "compaction_dict",
    "conversation_dict",
    "entry_dict",
    "memory_dict",
    "memory_hit_dict",
    "nothing",
    "open_stores",
    "read_with_ids",
    "request_body",
    "summary_dict",
]

T = TypeVar("T")
MAX_ID_CHARS = 200


class NotFoundError(UserError, LookupError):
    """No such ``what`` (a conversation, a memory, a stored value) for this tenant.

    Another tenant's is reported the same way as one that does not exist.
    """

    def __init__(self, what: str, ident: str) -> None:
        self.what = what
        self.ident = ident
        super().__init__(f"no {what} {ident!r}")


def request_body(rendered: Any, fmt: str, model: str | None) -> dict[str, Any]:
    """The provider request body around ``rendered`` (as `BuiltContext.render` gives it)."""
    body: dict[str, Any] = {"model": model} if model else {}
    if fmt == "openai":
        body["messages"] = rendered
    elif fmt == "responses":
        body["input"] = rendered
    else:
        body.update(rendered)
    return body


async def nothing() -> None:
    return None


def check_id(value: object, label: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise InvalidMessageError(label, "must be a non-empty string of <= 200 characters")


def check_text(value: object, label: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidMessageError(label, "must be a non-empty string")


def check_count(value: object, label: str, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidMessageError(label, f"must be an integer >= {low}")
    if high is not None and value > high:
        raise InvalidMessageError(label, f"must be <= {high}")


# -- client message ids ------------------------------------------------------------------


def _client_id(item: object, where: str) -> str | None:
    if not isinstance(item, Mapping) or "id" not in item:
        return None
    cid = item["id"]
    if not isinstance(cid, str) or not cid.strip() or len(cid) > MAX_ID_CHARS:
        raise InvalidMessageError(
            f"{where}.id", f"a client message id is a non-empty string of <= {MAX_ID_CHARS}"
        )
    return cid


def _counts(items: Sequence[Mapping[str, Any]], total: int) -> list[int] | None:
    """How many messages each item reads as, or None if that cannot be told item by item."""
    counts: list[int] = []
    for item in items:
        try:
            counts.append(len(adapters.read_messages([item])))
        except InvalidMessageError:  # an item that needs its neighbours to read
            return None
    return counts if sum(counts) == total else None


def _prefix_counts(items: Sequence[Mapping[str, Any]]) -> list[int]:
    """The messages each item adds to those of the items before it (merged items add 0)."""
    counts, before = [], 0
    for k in range(1, len(items) + 1):
        now = len(adapters.read_messages(list(items[:k])))
        counts.append(now - before)
        before = now
    return counts


def read_with_ids(raw: object, where: str = "messages") -> list[Message]:
    """``raw`` (a list of messages in any provider shape) as `Message` objects.

    An item may carry an ``"id"``: the client's message id. The message it reads
    as gets that id (``id#2``, ``id#3``… for the further messages of an item that
    reads as several, such as an Anthropic user turn holding tool results and
    text); stored again with the same content it is recognised and not stored
    twice. Items without an id get a new one each time. Contextwright's own
    message dicts keep the ``id`` they hold.
    """
    if not isinstance(raw, list):
        raise InvalidMessageError(where, f"must be a list of messages, got {type(raw).__name__}")
    if not raw:
        raise InvalidMessageError(where, "must not be empty")
    ids = [_client_id(item, f"{where}[{i}]") for i, item in enumerate(raw)]
    fmt = adapters.detect_format(raw)
    if fmt == "contextwright" or not any(ids):
        return adapters.read_messages(raw)
    # Chat and Anthropic messages have no "id", so it is the client's: read without it.
    # A Responses item's id is its own, and it is kept (a reasoning item and the item
    # after it are tied by their ids, docs/providers.md); it is the client's id too.
    items = (
        list(raw)
        if fmt == "responses"
        else [{k: v for k, v in item.items() if k != "id"} for item in raw]
    )
    messages = adapters.read_messages(items)
    counts = _counts(items, len(messages))
    if counts is None:
        if len(items) > 500:
            raise InvalidMessageError(
                where, "items that merge into one message: send at most 500 with client ids"
            )
        counts = _prefix_counts(items)
    out: list[Message] = []
    pos = 0
    for cid, n in zip(ids, counts, strict=True):
        for k in range(n):
            m = messages[pos]
            out.append(m.replace(id=cid if k == 0 else f"{cid}#{k + 1}") if cid else m)
            pos += 1
    return out


# -- a pool that never closes what is in use ---------------------------------------------


@dataclass
class _Entry(Generic[T]):
    value: T
    users: int = 0
    retired: bool = False


class Pool(Generic[T]):
    """At most ``size`` objects by key, least recently used evicted; `use` lends one.

    ``make(key)`` opens an object (called once per key while it stays in the pool),
    ``close(obj)`` closes one: at eviction if nobody uses it, else when its last
    user is done. `aclose` closes every object.
    """

    def __init__(
        self,
        size: int,
        make: Callable[[str], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
    ) -> None:
        self.size = size
        self._make, self._close = make, close
        self._entries: OrderedDict[str, _Entry[T]] = OrderedDict()
        self._lock = asyncio.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[T]:
        return [e.value for e in self._entries.values()]

    @asynccontextmanager
    async def use(self, key: str) -> AsyncIterator[T]:
        async with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = _Entry(await self._make(key))
                self._entries[key] = entry
            self._entries.move_to_end(key)
            entry.users += 1
            evicted = self._evict()
        for old in evicted:
            await self._close(old)
        try:
            yield entry.value
        finally:
            entry.users -= 1
            if entry.retired and entry.users == 0:
                await self._close(entry.value)

    def _evict(self) -> list[T]:
        idle: list[T] = []
        while len(self._entries) > self.size:
            _, old = self._entries.popitem(last=False)
            old.retired = True
            if old.users == 0:
                idle.append(old.value)
        return idle

    async def aclose(self) -> None:
        async with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for e in entries:
            await self._close(e.value)


# -- knowledge, per tenant ---------------------------------------------------------------


@dataclass
class TenantKnowledgeSource(RelevantKnowledgeSource):
    """`RelevantKnowledgeSource` searching the knowledge of the build's tenant.

    ``stores(tenant)`` lends that tenant's store (`Pool.use`); a tenant never
    reads another's passages, whatever the build.
    """

    stores: Callable[[str], AbstractAsyncContextManager[KnowledgeStore]] | None = None

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.stores is None or not turn.query:
            return None
        async with self.stores(turn.tenant) as store:
            mine = dataclasses.replace(self, store=store, stores=None)
            return await RelevantKnowledgeSource.fetch(mine, turn, allowance)


# -- JSON shapes -------------------------------------------------------------------------


def conversation_dict(info: ConversationInfo) -> dict[str, Any]:
    return {
        "id": info.id, "user": info.user, "created_at": info.created_at,
        "updated_at": info.updated_at, "last_seq": info.last_seq,
        "message_count": info.message_count, "token_total": info.token_total,
        "metadata": dict(info.metadata), "version": info.version,
    }  # fmt: skip


def summary_dict(s: Summary) -> dict[str, Any]:
    return {
        "version": s.version, "from_seq": s.from_seq, "upto_seq": s.upto_seq,
        "content": s.content, "tokens": s.tokens, "method": s.method,
        "created_at": s.created_at,
    }  # fmt: skip


def entry_dict(e: CompactionEntry) -> dict[str, Any]:
    return {
        "id": e.id, "at": e.at, "urgency": e.urgency, "applied": e.applied,
        "tokens_before": e.tokens_before, "tokens_after": e.tokens_after,
        "summary_version": e.summary_version, "upto_seq": e.upto_seq,
        "strategies": list(e.strategies), "notes": [str(n) for n in e.detail.get("notes", [])],
    }  # fmt: skip


def compaction_dict(r: CompactionResult, preview: bool) -> dict[str, Any]:
    return {
        "preview": preview, "applied": r.applied, "urgency": r.urgency,
        "strategies": list(r.strategies), "original_count": r.original_count,
        "retained_count": r.retained_count, "flushed_memories": r.flushed_memories,
        "tokens_before": r.tokens_before_compaction, "tokens_after": r.tokens_after_compaction,
        "summary_version": r.summary_version, "upto_seq": r.upto_seq, "method": r.method,
        "notes": list(r.notes), "summary": r.summary,
    }  # fmt: skip


def memory_dict(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id, "user": m.user, "namespace": m.namespace, "content": m.content,
        "category": m.category, "importance": m.importance, "key": m.key,
        "created_at": m.created_at, "updated_at": m.updated_at,
        "source_message_ids": list(m.source_message_ids), "superseded_by": m.superseded_by,
        "superseded_at": m.superseded_at, "active": m.active, "meta": dict(m.meta),
    }  # fmt: skip


def memory_hit_dict(h: MemoryHit) -> dict[str, Any]:
    return {"memory": memory_dict(h.memory), "score": h.score, "relevance": h.relevance}


# -- opening --------------------------------------------------------------------------


def open_stores(target: DbTarget, db: str | None) -> tuple[Backend, Any, Callable[[str], Any]]:
    """The backend, memory store and a per-tenant knowledge store opener for ``target``.

    On SQLite all three share one `SQLiteStore` (the backend owns and closes it);
    on PostgreSQL the knowledge stores borrow the memory store's pool.
    """
    if target.kind == "postgres":
        from ..stores.postgres import PostgresBackend
        from ..stores.postgres._knowledge import PostgresKnowledgeStore
        from ..stores.postgres._memory import PostgresMemoryStore

        memory: Any = PostgresMemoryStore(target.url)
        pool = memory._pool

        def knowledge(tenant: str) -> Any:
            return PostgresKnowledgeStore(pool, tenant=tenant, migrate=False)

        backend = PostgresBackend(target.url).backend()
    else:
        from ..stores.sqlite._knowledge import SQLiteKnowledgeStore
        from ..stores.sqlite._memory import SQLiteMemoryStore

        # SQLiteStore() makes the default path's folder; an explicit path's must exist
        store = (
            SQLiteStore(target.path)
            if (db or os.environ.get("CONTEXTWRIGHT_DB"))
            else SQLiteStore()
        )
        memory = SQLiteMemoryStore(store)

        def knowledge(tenant: str) -> Any:
            return SQLiteKnowledgeStore(store, tenant=tenant)

        backend = SQLiteBackend(store).backend()
    return backend, memory, knowledge
