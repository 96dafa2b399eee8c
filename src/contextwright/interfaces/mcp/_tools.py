"""The MCP server's tools and resources: what a model sees of contextwright, and how it calls it.

Every tool is a thin call of the shared `Host` (the HTTP service calls the same
operations) with the caller's tenant first (`tenant_of`: the key's over HTTP,
``--tenant`` over stdio); nothing here touches a store. The descriptions are
written for the model that reads them: what the tool does, when to call it,
what it returns. An error the caller can act on (`EXPECTED`: bad messages, an
unknown conversation, a budget too small for the protected zone, the store
briefly unavailable) comes back as a tool error whose text names the error and
the field at fault, as the HTTP API's problem bodies do; anything else is the
SDK's "unexpected error", its details kept in the server's log.

Resources (URI templates): ``contextwright://conversations/{conversation}/summary``
(the current summary and what it covers) and ``…/receipt`` (the receipt of the
conversation's latest build), both JSON.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar

# This module is imported only once the SDK is known to be there (`_server.create_server`);
# the SDK reads the tools' annotations at run time, so they are real imports.
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from ..._errors import BudgetError, InvalidMessageError, StoreUnavailableError, UserError
from .._host import Host, NotFoundError
from ._server import Running, tenant_of

__all__ = ["RESOURCES", "TOOLS", "receipt_summary", "register"]

T = TypeVar("T")

TOOLS = (
    "build_context",
    "append_messages",
    "recall",
    "search_memory",
    "add_memory",
    "compact",
    "list_conversations",
)
RESOURCES = (
    "contextwright://conversations/{conversation}/summary",
    "contextwright://conversations/{conversation}/receipt",
)

Conversation = Annotated[
    str, Field(description="The conversation's id (any string you choose; reuse it every turn).")
]
# the user a conversation or memory belongs to when none is named (the Host's default too)
ANONYMOUS = "anonymous"
User = Annotated[
    str | None,
    Field(
        description="The end user the conversation belongs to "
        f"(default: its owner; {ANONYMOUS!r} for a new one)."
    ),
]
MemoryUser = Annotated[
    str | None,
    Field(
        description="The end user the memories belong to; each user has their own "
        f"(default {ANONYMOUS!r}, the user of conversations started without one)."
    ),
]
EXPECTED = (UserError, BudgetError, StoreUnavailableError)
Op = Callable[[Host, str], Awaitable[T]]


def _error_text(exc: Exception) -> str:
    field = getattr(exc, "field", None)
    where = f" (field: {field})" if isinstance(field, str) and field else ""
    return f"{type(exc).__name__}{where}: {exc}"


def receipt_summary(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a build's receipt a model can act on: totals, sections, and every block's fate."""
    sections = receipt.get("sections", {})
    return {
        "budget": receipt.get("budget"),
        "used": receipt.get("used"),
        "utilisation": receipt.get("utilisation"),
        "sections": {name: s.get("used") for name, s in sections.items()},
        "blocks": [
            {
                k: b[k]
                for k in ("name", "source", "status", "tokens", "reason")
                if b.get(k) not in (None, "")
            }
            for b in receipt.get("blocks", [])
        ],
        "history": {
            "messages": receipt.get("history_messages"),
            "of": receipt.get("history_total"),
            "last_seq": receipt.get("last_seq"),
        },
        "compaction": receipt.get("compaction"),
        "warnings": receipt.get("warnings", []),
    }


def register(server: MCPServer[Any], running: Running) -> None:
    """Add contextwright's tools and resources to ``server``."""

    async def call(ctx: Context[Any, Any], op: Op[T]) -> T:
        """``op(host, tenant)``, an `EXPECTED` error turned into a tool error the model can read."""
        tenant = tenant_of(running, ctx.request_context.request)
        try:
            return await op(running.require_host(), tenant)
        except EXPECTED as exc:
            raise ToolError(_error_text(exc)) from None

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    additive = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    @server.tool(annotations=additive)
    async def build_context(
        conversation: Conversation,
        message: Annotated[str, Field(description="The new user message to answer.")],
        ctx: Context[Any, Any],
        budget: Annotated[
            int | None,
            Field(gt=0, description="Input tokens the context may use (default: the server's)."),
        ] = None,
        format: Annotated[
            Literal["openai", "anthropic", "responses"],
            Field(
                description="Wire format of the request: OpenAI Chat, Anthropic Messages, or OpenAI Responses."
            ),
        ] = "openai",
        user: User = None,
    ) -> dict[str, Any]:
        """Build the context for the next model call of a stored conversation.

        Call this with each new user message before calling your model. The message is
        stored as the conversation's next user turn; the result's "request" is the
        ready-to-send request body (system prompt, summary of older turns, recent
        turns, matching memories, then the message) that fits the budget. "receipt"
        says what was included, truncated or dropped and why. After your model
        answers, store its reply with append_messages.
        """
        request, receipt = await call(
            ctx,
            lambda host, tenant: host.build(
                tenant, conversation, message, budget=budget, format=format, user=user
            ),
        )
        return {"request": request, "receipt": receipt_summary(receipt)}

    @server.tool(annotations=additive)
    async def append_messages(
        conversation: Conversation,
        messages: Annotated[
            list[dict[str, Any]],
            Field(
                description='Messages in OpenAI Chat ({"role": "assistant", "content": "..."}), '
                "OpenAI Responses or Anthropic form, oldest first; tool calls with their results."
            ),
        ],
        ctx: Context[Any, Any],
        user: User = None,
    ) -> dict[str, Any]:
        """Store messages at the end of a conversation (creating it if new).

        Use it for the assistant's reply after build_context, for tool calls and their
        results, or to import an earlier transcript. Messages carrying an "id" that is
        already stored are not stored twice, so retrying is safe. Invalid messages
        are refused with the field at fault and nothing is stored.
        """
        if not messages:
            raise ToolError(_error_text(InvalidMessageError("messages", "must not be empty")))
        return await call(
            ctx, lambda host, tenant: host.append(tenant, conversation, messages, user=user)
        )

    @server.tool(annotations=read_only)
    async def recall(
        conversation: Conversation,
        query: Annotated[
            str, Field(description="Words to look for in the conversation's earlier turns.")
        ],
        ctx: Context[Any, Any],
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many turns.")] = 5,
    ) -> dict[str, Any]:
        """Find exact earlier turns of a conversation by their words, with their sequence numbers.

        The context of a long conversation holds only a summary of older turns; use
        this when you need what was actually said (a number, a name, a decision),
        then quote it. Results are verbatim stored messages, best match first.
        """
        turns = await call(
            ctx, lambda host, tenant: host.recall(tenant, conversation, query, limit=limit)
        )
        return {"turns": turns}

    @server.tool(annotations=read_only)
    async def search_memory(
        query: Annotated[str, Field(description="What to look for, in plain words.")],
        ctx: Context[Any, Any],
        user: MemoryUser = None,
        limit: Annotated[int, Field(ge=1, le=50, description="At most this many memories.")] = 5,
    ) -> dict[str, Any]:
        """Search the long-term memories of a user (facts, preferences, goals), best match first.

        Memories outlive conversations; build_context already brings the matching
        ones into the context, so call this only to look something up directly.
        """
        found = await call(
            ctx,
            lambda host, tenant: host.search_memory(tenant, user or ANONYMOUS, query, limit=limit),
        )
        return {"memories": found}

    @server.tool(annotations=additive)
    async def add_memory(
        content: Annotated[
            str, Field(description="One self-contained fact, e.g. 'Prefers answers in French'.")
        ],
        ctx: Context[Any, Any],
        user: MemoryUser = None,
        key: Annotated[
            str | None,
            Field(
                description="A stable name for a fact that changes, e.g. 'preferred_language': "
                "a new memory with the same key replaces the old one (kept as history)."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Remember a lasting fact about a user (a preference, a profile detail, a standing goal).

        Later builds for this user bring it into the context when it is relevant.
        Store facts, not conversation turns. Give facts that change a key, so that
        the new value replaces the old instead of contradicting it.
        """
        return await call(
            ctx, lambda host, tenant: host.add_memory(tenant, user or ANONYMOUS, content, key=key)
        )

    @server.tool(annotations=additive)
    async def compact(
        conversation: Conversation,
        ctx: Context[Any, Any],
        preview: Annotated[
            bool, Field(description="true: only report what compaction would do; store nothing.")
        ] = False,
    ) -> dict[str, Any]:
        """Compact a conversation: summarise its older turns so that later contexts are smaller.

        Nothing is deleted: the stored messages stay and recall finds them. Builds
        compact on their own when a conversation grows past its thresholds; call this
        to do it now, or with preview=true to see the tokens before and after.
        """
        return await call(
            ctx, lambda host, tenant: host.compact(tenant, conversation, preview=preview)
        )

    @server.tool(annotations=read_only)
    async def list_conversations(
        ctx: Context[Any, Any],
        user: Annotated[
            str | None, Field(description="Only this end user's conversations (default: all).")
        ] = None,
    ) -> dict[str, Any]:
        """List the stored conversations (of one user if given), most recently updated first."""
        found = await call(ctx, lambda host, tenant: host.conversations(tenant, user=user))
        return {"conversations": found}

    async def resource(ctx: Context[Any, Any], op: Op[Any]) -> str:
        """``op(host, tenant)`` as JSON text; an `EXPECTED` error as a resource error."""
        tenant = tenant_of(running, ctx.request_context.request)
        try:
            value = await op(running.require_host(), tenant)
        except NotFoundError as exc:
            raise ResourceNotFoundError(_error_text(exc)) from None
        except EXPECTED as exc:
            raise ResourceError(_error_text(exc)) from None
        return json.dumps(value, ensure_ascii=False)

    @server.resource(RESOURCES[0], name="summary", mime_type="application/json")
    async def summary(conversation: str, ctx: Context[Any, Any]) -> str:
        """A conversation's current summary of its older turns, and which turns it covers."""
        return await resource(ctx, lambda host, tenant: host.summary(tenant, conversation))

    @server.resource(RESOURCES[1], name="receipt", mime_type="application/json")
    async def receipt(conversation: str, ctx: Context[Any, Any]) -> str:
        """The receipt of a conversation's latest build: every block's tokens, status and reason."""

        async def latest(host: Host, tenant: str) -> Any:
            found = await host.receipts(tenant, conversation, limit=1)
            if not found:
                raise ResourceNotFoundError(f"conversation {conversation!r} has no build yet")
            return found[0]

        return await resource(ctx, latest)
