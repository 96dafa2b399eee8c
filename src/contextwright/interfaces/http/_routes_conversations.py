"""Routes: conversations (create, list, get, delete) and their messages (append, read).

``POST /v1/conversations/{conversation}/messages`` takes ``{"messages": [...]}`` in
OpenAI Chat, OpenAI Responses or Anthropic shape (detected as the library does);
an item's ``"id"`` is its client message id, and a retry stores nothing twice.
A body that does not read as messages is a 422 and nothing is written.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from ._body import StandardJSONRoute
from ._deps import HostDep, TenantDep
from ._models import (
    Appended,
    AppendMessages,
    Conversation,
    ConversationList,
    CreateConversation,
    Created,
    Deleted,
    MessagesPage,
    Problem,
)

__all__ = ["errors", "router"]


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The problem responses a route may answer, for the OpenAPI document."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in (401, 413, 422, 503, *codes):
        out[code] = {"model": Problem, "content": {"application/problem+json": {}}}
    return out


router = APIRouter(
    prefix="/v1/conversations", tags=["conversations"], route_class=StandardJSONRoute
)


@router.post("", response_model=Created, status_code=201, responses=errors())
async def create_conversation(
    body: CreateConversation, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    """Create a conversation (a new id if none is given); an existing one is returned as it is."""
    conversation = body.id or uuid.uuid4().hex
    return await host.create(tenant, conversation, user=body.user, metadata=body.metadata)


@router.get("", response_model=ConversationList, responses=errors())
async def list_conversations(
    host: HostDep, tenant: TenantDep, user: Annotated[str | None, Query(max_length=200)] = None
) -> dict[str, Any]:
    """The tenant's conversations (only ``user``'s if given), most recently updated first."""
    return {"conversations": await host.conversations(tenant, user)}


@router.get("/{conversation}", response_model=Conversation, responses=errors(404))
async def get_conversation(conversation: str, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    return await host.conversation(tenant, conversation)


@router.delete("/{conversation}", response_model=Deleted, responses=errors(404))
async def delete_conversation(
    conversation: str, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    """Delete the conversation with everything stored under it (messages, summaries, receipts)."""
    return await host.delete(tenant, conversation)


@router.post("/{conversation}/messages", response_model=Appended, responses=errors())
async def append_messages(
    conversation: str, body: AppendMessages, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    """Store messages after the last one (the conversation is created if new)."""
    return await host.append(tenant, conversation, body.messages, body.user)


@router.get("/{conversation}/messages", response_model=MessagesPage, responses=errors(404))
async def read_messages(
    conversation: str,
    host: HostDep,
    tenant: TenantDep,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The stored originals, oldest first, after ``after_seq`` (compaction never deletes them)."""
    return await host.messages(tenant, conversation, after_seq, limit)
