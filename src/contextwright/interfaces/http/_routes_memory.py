"""Routes: long-term memory (add, list, search, delete) and knowledge (ingest, search).

Memories belong to a user of the tenant (``user``, default ``"anonymous"``);
knowledge is shared by the tenant's users. Neither ever crosses tenants.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ._body import StandardJSONRoute
from ._deps import HostDep, TenantDep
from ._models import (
    AddMemory,
    Deleted,
    Ingest,
    Ingested,
    KnowledgeHits,
    MemoryHits,
    MemoryList,
    MemoryModel,
    SearchKnowledge,
    SearchMemory,
)
from ._routes_conversations import errors

__all__ = ["router"]

router = APIRouter(prefix="/v1", route_class=StandardJSONRoute)
User = Annotated[str, Query(min_length=1, max_length=200)]


@router.post(
    "/memories", response_model=MemoryModel, status_code=201, tags=["memory"], responses=errors()
)
async def add_memory(body: AddMemory, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    """Remember a statement about a user; a live memory with the same ``key`` is superseded."""
    return await host.add_memory(
        tenant, body.user, body.content, category=body.category, importance=body.importance,
        key=body.key, namespace=body.namespace, source_message_ids=body.source_message_ids,
        meta=body.meta,
    )  # fmt: skip


@router.get("/memories", response_model=MemoryList, tags=["memory"], responses=errors())
async def list_memories(
    host: HostDep,
    tenant: TenantDep,
    user: User = "anonymous",
    namespace: str = "",
    include_superseded: bool = False,
) -> dict[str, Any]:
    """The user's memories, oldest first, with their provenance (source message ids)."""
    found = await host.list_memories(
        tenant, user, namespace=namespace, include_superseded=include_superseded
    )
    return {"memories": found}


@router.post("/memories/search", response_model=MemoryHits, tags=["memory"], responses=errors())
async def search_memories(body: SearchMemory, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    hits = await host.search_memory(
        tenant, body.user, body.query, limit=body.limit, namespace=body.namespace
    )
    return {"hits": hits}


@router.delete(
    "/memories/{memory_id}", response_model=Deleted, tags=["memory"], responses=errors(404)
)
async def delete_memory(
    memory_id: str, host: HostDep, tenant: TenantDep, user: User = "anonymous", namespace: str = ""
) -> dict[str, Any]:
    """Forget a memory of ``user`` (404 if the user has no such memory)."""
    return await host.delete_memory(tenant, user, memory_id, namespace=namespace)


@router.post(
    "/knowledge", response_model=Ingested, status_code=201, tags=["knowledge"],
    responses=errors(),
)  # fmt: skip
async def ingest(body: Ingest, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    """Chunk a document into the tenant's knowledge (re-ingesting a source replaces it)."""
    return await host.ingest(
        tenant, body.text, source=body.source, format=body.format, category=body.category,
        meta=body.meta,
    )  # fmt: skip


@router.post(
    "/knowledge/search", response_model=KnowledgeHits, tags=["knowledge"], responses=errors()
)
async def search_knowledge(
    body: SearchKnowledge, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    return {"hits": await host.search_knowledge(tenant, body.query, limit=body.limit)}
