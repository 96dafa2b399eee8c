"""Routes: building a context, and what a developer inspects about a conversation.

``POST /v1/conversations/{conversation}/context`` with ``{"message": "...",
"budget": N, "format": "openai"|"anthropic"|"responses"}`` answers
``{"request": {...}, "receipt": {...}}``: the provider request body and the
context receipt, which is recorded (``GET .../receipts``). Also: compact (with
preview), the summary and its coverage, the compaction log, read-back of
offloaded tool results, and recall of exact old turns.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from ._body import StandardJSONRoute
from ._deps import HostDep, TenantDep
from ._models import (
    BuildContext,
    Built,
    Compact,
    CompactionList,
    CompactResult,
    ReadBack,
    Recall,
    RecallHits,
    ReceiptList,
    SummaryView,
)
from ._routes_conversations import errors

__all__ = ["router"]

router = APIRouter(prefix="/v1/conversations", tags=["context"], route_class=StandardJSONRoute)


@router.post("/{conversation}/context", response_model=Built, responses=errors())
async def build_context(
    conversation: str, body: BuildContext, request: Request, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    """Build the context for a new user message: the rendered request and its receipt.

    The message is stored once the context is built (``store_message``); a build
    that fails stores nothing.
    """
    t0 = time.perf_counter()
    built, receipt = await host.build(
        tenant, conversation, body.message, budget=body.budget, model=body.model,
        format=body.format, user=body.user, store_message=body.store_message,
    )  # fmt: skip
    request.app.state.metrics.build(body.format, time.perf_counter() - t0, receipt)
    return {"request": built, "receipt": receipt}


@router.post("/{conversation}/compact", response_model=CompactResult, responses=errors(404))
async def compact(
    conversation: str, host: HostDep, tenant: TenantDep, body: Compact | None = None
) -> dict[str, Any]:
    """Compact now; ``{"preview": true}`` computes what it would do and changes nothing."""
    return await host.compact(tenant, conversation, preview=body.preview if body else False)


@router.get("/{conversation}/summary", response_model=SummaryView, responses=errors(404))
async def summary(conversation: str, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    """The current summary (null if none yet) and how far it covers the conversation."""
    return await host.summary(tenant, conversation)


@router.get("/{conversation}/compactions", response_model=CompactionList, responses=errors(404))
async def compactions(conversation: str, host: HostDep, tenant: TenantDep) -> dict[str, Any]:
    """The compaction log, oldest first: tokens before and after, strategies, notes."""
    return {"compactions": await host.compactions(tenant, conversation)}


@router.get("/{conversation}/readback/{key}", response_model=ReadBack, responses=errors(404))
async def read_back(
    conversation: str,
    key: str,
    host: HostDep,
    tenant: TenantDep,
    page: Annotated[int, Query(ge=1)] = 1,
) -> dict[str, Any]:
    """A page of a tool result that was offloaded from the prompt (404 once it expired)."""
    return await host.read_back(tenant, conversation, key, page)


@router.get("/{conversation}/receipts", response_model=ReceiptList, responses=errors())
async def receipts(
    conversation: str,
    host: HostDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> dict[str, Any]:
    """The receipts of the newest builds, newest first."""
    return {"receipts": await host.receipts(tenant, conversation, limit)}


@router.post("/{conversation}/recall", response_model=RecallHits, responses=errors(404))
async def recall(
    conversation: str, body: Recall, host: HostDep, tenant: TenantDep
) -> dict[str, Any]:
    """Exact old turns matching ``query`` (full-text search of the stored messages)."""
    return {"hits": await host.recall(tenant, conversation, body.query, body.limit)}
