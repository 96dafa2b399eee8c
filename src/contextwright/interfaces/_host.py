"""`Host`: the operations the HTTP service and the MCP server share, over one store.

A server opens one `Host` in its lifespan (`open_host`) and calls its coroutines;
it keeps no state of its own (docs/deploy.md: servers are thin). The host holds

- ``backend``, the store `Backend` (``keys`` and ``receipts`` are its roles too),
- one `Conversations` per model (a bounded pool of at most ``max_models``, all
  on that one backend), whose engine has the general sources: the user's
  memories (``memory``) and the tenant's knowledge (one store per tenant,
  a bounded pool as well),
- ``memory``, the long-term memory store of the same database.

Every operation takes the ``tenant`` first: a server takes it from the caller's
key, never from a body. What belongs to another tenant, or does not exist,
raises `NotFoundError`. Conversations belong to a tenant; the user a
conversation was created for is an attribute of it, and the host acts as that
user when it reads or compacts. Results are plain JSON data (dicts, lists).

Block caching: with ``cache`` (a ``redis://`` URL, `$CONTEXTWRIGHT_CACHE`) the
memory and knowledge blocks are cached in Redis and dropped on every memory write
through the host, in every worker. Without it they are not cached at all: an
in-process cache would go on serving a memory that another worker (or the MCP
server) just deleted, until its TTL ran out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError, InvalidMessageError, StoreError, StoreUnavailableError
from ..budget._budget import model_info
from ..history import CompactionConfig
from ..memory import Scope, user_memory_tag
from ..pipeline._engine import ContextEngine
from ..service import Conversations
from ..sources import default_sources
from ..stores import Backend
from ..stores._cache import Cache, open_cache
from ..stores._contract import ApiKeys, Receipts
from ..stores._url import parse_db
from ._host_parts import (
    NotFoundError,
    Pool,
    TenantKnowledgeSource,
    check_count,
    check_id,
    check_text,
    compaction_dict,
    conversation_dict,
    entry_dict,
    memory_dict,
    memory_hit_dict,
    nothing,
    open_stores,
    read_with_ids,
    request_body,
    summary_dict,
)
from .cli._db import db_setting
from .cli._history import counter_for

__all__ = ["FORMATS", "Host", "NotFoundError", "open_host"]

FORMATS = ("openai", "anthropic", "responses")


class Host:
    """The shared operations layer (see the module docstring); make one with `open_host`."""

    def __init__(
        self,
        backend: Backend,
        memory: Any,
        open_knowledge: Any,
        *,
        model: str | None,
        budget: int | None,
        system_prompt: str,
        cache: Cache | None,
        max_models: int = 8,
        max_tenants: int = 64,
    ) -> None:
        self.backend = backend
        self.memory = memory
        self.model = model
        self.budget = budget
        self.system_prompt = system_prompt
        self.cache = cache
        self._open_knowledge = open_knowledge
        self.knowledge: Pool[Any] = Pool(max_tenants, self._make_knowledge, self._close_store)
        self.conversations_pool: Pool[Conversations] = Pool(
            max_models, self._make_conversations, self._close_conversations
        )

    # -- plumbing --------------------------------------------------------------------------

    @property
    def keys(self) -> ApiKeys:
        if self.backend.keys is None:
            raise ConfigError("this store has no API keys role (Backend.keys)")
        return self.backend.keys

    @property
    def receipts_role(self) -> Receipts:
        if self.backend.receipts is None:
            raise ConfigError("this store has no receipts role (Backend.receipts)")
        return self.backend.receipts

    async def _make_knowledge(self, tenant: str) -> Any:
        return await asyncio.to_thread(self._open_knowledge, tenant)

    @staticmethod
    async def _close_store(store: Any) -> None:
        await asyncio.to_thread(store.close)

    async def _make_conversations(self, model: str) -> Conversations:
        name = model or None
        counter = counter_for(name, option="model")
        known = False
        if name:
            try:
                model_info(name)
                known = True
            except ConfigError:
                pass
        sources = default_sources(memory=self.memory)
        sources.append(TenantKnowledgeSource(stores=self._knowledge_for))
        if self.cache is None:  # see the module docstring, Block caching
            for s in sources:
                s.ttl = 0.0
        engine = ContextEngine(
            system_prompt=self.system_prompt, sources=sources, counter=counter,
            model=name if known else None, budget=self.budget, cache=self.cache,
        )  # fmt: skip
        # the host closes the backend once, after every Conversations on it
        shared = dataclasses.replace(self.backend, closer=nothing)
        return Conversations(engine, shared, compaction=CompactionConfig.preset("production"))

    @staticmethod
    async def _close_conversations(convs: Conversations) -> None:
        await convs.aclose()

    def _knowledge_for(self, tenant: str) -> Any:
        return self.knowledge.use(tenant)

    def _convs(self, model: str | None) -> Any:
        return self.conversations_pool.use(model or self.model or "")

    async def _info(self, tenant: str, conversation: str) -> Any:
        check_id(conversation, "conversation")
        info = await self.backend.conversations.get_conversation(conversation, tenant=tenant)
        if info is None:
            raise NotFoundError("conversation", conversation)
        return info

    async def ping(self, timeout: float = 2.0) -> None:
        """Raise `StoreUnavailableError` unless the store answers within ``timeout`` seconds.

        A readiness probe must answer quickly: a backend that retries while its
        server is away (PostgreSQL, for 15 s) would otherwise hold it that long.
        """
        try:
            await asyncio.wait_for(
                self.backend.conversations.version("readyz", tenant="readyz"), timeout
            )
        except asyncio.TimeoutError:
            raise StoreUnavailableError(f"the store did not answer within {timeout:g} s") from None

    async def aclose(self) -> None:
        """Close the conversations (their background work finishes first), stores, backend."""
        await self.conversations_pool.aclose()
        await self.knowledge.aclose()
        await asyncio.to_thread(self.memory.close)
        await self.backend.aclose()

    async def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for the background summaries of every open `Conversations` (tests)."""
        for convs in self.conversations_pool.values():
            await convs.wait_idle(timeout)

    # -- conversations ---------------------------------------------------------------------

    async def create(
        self,
        tenant: str,
        conversation: str,
        *,
        user: str = "anonymous",
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create the conversation for ``user`` (returned as it is if it exists: ``created``)."""
        check_id(conversation, "conversation")
        log = self.backend.conversations
        existed = await log.get_conversation(conversation, tenant=tenant) is not None
        info = await log.ensure_conversation(
            conversation, tenant=tenant, user=user, metadata=metadata
        )
        return {**conversation_dict(info), "created": not existed}

    async def conversations(self, tenant: str, user: str | None = None) -> list[dict[str, Any]]:
        found = await self.backend.conversations.list_conversations(tenant=tenant, user=user)
        return [conversation_dict(i) for i in found]

    async def conversation(self, tenant: str, conversation: str) -> dict[str, Any]:
        return conversation_dict(await self._info(tenant, conversation))

    async def delete(self, tenant: str, conversation: str) -> dict[str, Any]:
        """Delete the conversation and everything stored under it (not its users' memories)."""
        info = await self._info(tenant, conversation)
        async with self._convs(None) as convs:  # as its owner: a summary under way gives way
            deleted = await convs.delete(conversation, tenant=tenant, user=info.user)
            for other in self.conversations_pool.values():  # the other models' caches too
                if other is not convs:
                    other.drop_caches()
        if not deleted:
            raise NotFoundError("conversation", conversation)
        return {"id": conversation, "deleted": True}

    async def append(
        self, tenant: str, conversation: str, raw_messages: object, user: str | None = None
    ) -> dict[str, Any]:
        """Store messages in any provider shape; a client id stored before is not stored again."""
        check_id(conversation, "conversation")
        messages = read_with_ids(raw_messages)
        info = await self.backend.conversations.get_conversation(conversation, tenant=tenant)
        who = user or (info.user if info is not None else "anonymous")
        async with self._convs(None) as convs:
            stored = await convs.append(conversation, messages, tenant=tenant, user=who)
        last = stored[-1].seq if stored else None
        return {
            "conversation": conversation,
            "messages": [{"id": m.id, "seq": m.seq, "role": m.role} for m in stored],
            "last_seq": last,
        }

    async def build(
        self,
        tenant: str,
        conversation: str,
        message: str,
        *,
        budget: int | None = None,
        model: str | None = None,
        format: str = "openai",
        user: str | None = None,
        store_message: bool = True,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The rendered request and its receipt; the receipt is recorded for the conversation."""
        check_id(conversation, "conversation")
        if format not in FORMATS:
            raise InvalidMessageError("format", f"must be one of {', '.join(FORMATS)}")
        if budget is not None and (isinstance(budget, bool) or budget < 1):
            raise InvalidMessageError("budget", "must be a positive integer")
        receipts = self.receipts_role  # a store without the role fails before the build
        info = await self.backend.conversations.get_conversation(conversation, tenant=tenant)
        who = user or (info.user if info is not None else "anonymous")
        async with self._convs(model) as convs:
            built = await convs.build(
                conversation, message, tenant=tenant, user=who, budget=budget,
                store_message=store_message, provider=format,
            )  # fmt: skip
        receipt = built.report.to_dict()
        try:  # diagnostics: the build (and its message) stands without them
            await receipts.record_receipt(conversation, receipt, tenant=tenant)
        except StoreError as exc:
            receipt["warnings"].append(f"receipt not recorded: {exc}")
        return request_body(built.rendered, format, model or self.model), receipt

    async def messages(
        self, tenant: str, conversation: str, after_seq: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        """A page of the stored originals, oldest first, after ``after_seq``."""
        await self._info(tenant, conversation)
        check_count(after_seq, "after_seq", 0)
        check_count(limit, "limit", 1, 1000)
        page = await self.backend.conversations.read(
            conversation, tenant=tenant, after_seq=after_seq, limit=limit
        )
        last = page[-1].seq if len(page) == limit else None
        return {"messages": [m.to_dict() for m in page], "next_after_seq": last}

    async def compact(self, tenant: str, conversation: str, preview: bool) -> dict[str, Any]:
        """Compact now; ``preview`` computes what it would do and writes nothing."""
        info = await self._info(tenant, conversation)
        async with self._convs(None) as convs:
            result = await convs.compact(
                conversation, tenant=tenant, user=info.user, preview=preview
            )
        return compaction_dict(result, preview)

    async def summary(self, tenant: str, conversation: str) -> dict[str, Any]:
        """The current summary (None if none yet) and how much of the conversation it covers."""
        info = await self._info(tenant, conversation)
        s = await self.backend.summaries.latest_summary(conversation, tenant=tenant)
        upto = s.upto_seq if s is not None else 0
        return {
            "summary": summary_dict(s) if s is not None else None,
            "coverage": {
                "upto_seq": upto, "last_seq": info.last_seq,
                "messages_after": max(0, info.last_seq - upto),
            },
        }  # fmt: skip

    async def compactions(self, tenant: str, conversation: str) -> list[dict[str, Any]]:
        await self._info(tenant, conversation)
        log = await self.backend.compactions.compactions(conversation, tenant=tenant)
        return [entry_dict(e) for e in log]

    async def read_back(
        self, tenant: str, conversation: str, key: str, page: int = 1
    ) -> dict[str, Any]:
        """A page of an offloaded tool result (`NotFoundError` if expired or unknown)."""
        info = await self._info(tenant, conversation)
        check_count(page, "page", 1)
        item = await self.backend.working.get_working(conversation, key, tenant=tenant)
        if item is None:
            raise NotFoundError("read-back key", key)
        async with self._convs(None) as convs:
            text = await convs.read_back(conversation, key, page, tenant=tenant, user=info.user)
        return {"key": key, "page": page, "text": text}

    async def receipts(
        self, tenant: str, conversation: str, limit: int = 20
    ) -> list[dict[str, Any]]:
        """The receipts of the newest builds, newest first (also of builds that stored nothing)."""
        check_id(conversation, "conversation")
        check_count(limit, "limit", 1, 200)
        found = await self.receipts_role.receipts(conversation, tenant=tenant, limit=limit)
        return [{"id": r.id, "at": r.at, "receipt": dict(r.receipt)} for r in found]

    async def recall(
        self, tenant: str, conversation: str, query: str, limit: int = 5
    ) -> list[dict[str, Any]]:
        """Exact old turns matching ``query`` (full-text search of the stored messages)."""
        await self._info(tenant, conversation)
        check_text(query, "query")
        check_count(limit, "limit", 1, 100)
        hits = await self.backend.search.search(conversation, query, tenant=tenant, limit=limit)
        return [
            {"seq": h.message.seq, "id": h.message.id, "role": h.message.role,
             "text": h.message.text, "score": h.score}
            for h in hits
        ]  # fmt: skip

    # -- memory ----------------------------------------------------------------------------

    async def add_memory(
        self,
        tenant: str,
        user: str,
        content: str,
        *,
        category: str = "fact",
        importance: int = 50,
        key: str | None = None,
        namespace: str = "",
        source_message_ids: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Remember ``content`` for the user; a live memory of the same ``key`` is superseded."""
        scope = Scope(tenant, user, namespace)
        m = await self.memory._run(
            lambda: self.memory.add(
                scope, content, category=category, importance=importance, key=key,
                source_message_ids=tuple(source_message_ids), meta=meta,
            )
        )  # fmt: skip
        self._memory_changed(scope)
        return memory_dict(m)

    async def search_memory(
        self, tenant: str, user: str, query: str, *, limit: int = 5, namespace: str = ""
    ) -> list[dict[str, Any]]:
        check_count(limit, "limit", 1, 100)
        hits = await self.memory.search(Scope(tenant, user, namespace), query, limit)
        return [memory_hit_dict(h) for h in hits]

    async def list_memories(
        self, tenant: str, user: str, *, namespace: str = "", include_superseded: bool = False
    ) -> list[dict[str, Any]]:
        """The user's memories, oldest first (live ones only unless asked)."""
        scope = Scope(tenant, user, namespace)
        found = await self.memory._run(lambda: self.memory.history(scope))
        return [memory_dict(m) for m in found if include_superseded or m.live]

    async def delete_memory(
        self, tenant: str, user: str, memory_id: str, *, namespace: str = ""
    ) -> dict[str, Any]:
        scope = Scope(tenant, user, namespace)
        if not await self.memory._run(lambda: self.memory.forget(scope, memory_id)):
            raise NotFoundError("memory", memory_id)
        self._memory_changed(scope)
        return {"id": memory_id, "deleted": True}

    def _memory_changed(self, scope: Scope) -> None:
        if self.cache is not None:
            self.cache.invalidate(tags=[user_memory_tag(scope.tenant, scope.user)])

    # -- knowledge -------------------------------------------------------------------------

    async def ingest(
        self,
        tenant: str,
        text: str,
        *,
        source: str,
        format: str = "markdown",
        category: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Chunk and store ``text`` as ``source`` of the tenant (replacing that source)."""
        check_text(text, "text")
        check_text(source, "source")
        if format not in ("markdown", "text"):
            raise InvalidMessageError("format", "must be 'markdown' or 'text'")
        async with self.knowledge.use(tenant) as store:
            n = await store._run(
                lambda: store.ingest(
                    text, source=source, format=format, category=category, meta=meta
                )
            )
        return {"source": source, "chunks": n}

    async def search_knowledge(
        self, tenant: str, query: str, *, limit: int = 5
    ) -> list[dict[str, Any]]:
        check_count(limit, "limit", 1, 100)
        async with self.knowledge.use(tenant) as store:
            hits = await store.search(query, limit)
        return [
            {"source": h.passage.source, "title": h.passage.title, "content": h.passage.content,
             "category": h.passage.category, "score": h.score}
            for h in hits
        ]  # fmt: skip


async def open_host(
    db: str | None = None,
    *,
    model: str | None = None,
    budget: int | None = None,
    system_prompt: str = "",
    cache: str | None = None,
    max_models: int = 8,
) -> Host:
    """Open the store ``db`` names (path, ``sqlite:///…``, ``postgresql://…``; None:
    `$CONTEXTWRIGHT_DB`, else the per-user file) and the host over it.

    ``model`` is the default model of builds (its tokenizer and window);
    ``budget`` the default input budget; ``cache`` a ``redis://`` URL for the
    shared block cache (None: `$CONTEXTWRIGHT_CACHE`, else no block cache).
    """
    if model:
        counter_for(model, option="model")  # an unknown model fails here, not on first use
    cache = cache or os.environ.get("CONTEXTWRIGHT_CACHE") or None
    shared_cache = open_cache(cache) if cache else None
    target = parse_db(db_setting(db))
    backend, memory, knowledge = await asyncio.to_thread(open_stores, target, db)
    return Host(
        backend, memory, knowledge, model=model, budget=budget, system_prompt=system_prompt,
        cache=shared_cache, max_models=max_models,
    )  # fmt: skip
