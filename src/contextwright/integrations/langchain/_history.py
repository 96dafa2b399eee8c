"""`ContextwrightChatMessageHistory`: LangChain's chat message history over a stored conversation.

For `RunnableWithMessageHistory` and anything else that takes a
`BaseChatMessageHistory`: ``messages`` reads the conversation's stored originals
(every message, oldest first, in pages), ``add_messages`` appends (a message
stored before under its id is not stored again), ``clear`` empties it; the
``a*`` forms are the same in a running event loop (the sync ones refuse to run
inside one). Messages go through the lossless conversion of `_convert`, so what
the middleware stores and what this history reads are the same conversation.

``clear`` deletes the conversation through `Conversations.delete` when the
installed contextwright has it. Until then it records where the conversation was
cleared (in the conversation's working memory, without expiry) and ``messages``
reads only what came after; the stored messages stay, and builds of the
conversation still see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from ..._errors import ConfigError
from ...service._conversations import Conversations
from ._convert import from_langchain_messages, to_langchain_messages

__all__ = ["ContextwrightChatMessageHistory"]

_CLEARED = "langchain:cleared_after_seq"  # working-memory key of the interim clear
_FOREVER = 100 * 365 * 86400.0


class ContextwrightChatMessageHistory(BaseChatMessageHistory):
    """The stored conversation ``conversation_id`` of ``user`` in ``tenant``, as a LangChain history."""

    def __init__(
        self,
        conversations: Conversations,
        conversation_id: str,
        *,
        tenant: str = "default",
        user: str = "anonymous",
    ) -> None:
        if not isinstance(conversations, Conversations):
            raise ConfigError(
                f"conversations must be a contextwright Conversations, got {type(conversations).__name__}"
            )
        if not isinstance(conversation_id, str) or not conversation_id:
            raise ConfigError(
                f"conversation_id must be a non-empty string, got {conversation_id!r}"
            )
        self.conversations = conversations
        self.conversation_id = conversation_id
        self.tenant = tenant
        self.user = user

    @property
    def _kw(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "user": self.user}

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # an attribute in the base
        """Every stored message of the conversation, oldest first, as LangChain messages."""
        return self.conversations.run_sync(self.aget_messages())

    async def aget_messages(self) -> list[BaseMessage]:
        after = await self._cleared_after()
        stored = [
            m
            async for m in self.conversations.messages(
                self.conversation_id, after_seq=after, **self._kw
            )
        ]
        return to_langchain_messages(stored)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.conversations.run_sync(self.aadd_messages(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        converted = from_langchain_messages(messages)
        if converted:
            await self.conversations.append(self.conversation_id, converted, **self._kw)

    def clear(self) -> None:
        self.conversations.run_sync(self.aclear())

    async def aclear(self) -> None:
        delete = getattr(self.conversations, "delete", None)
        if delete is not None:
            await delete(self.conversation_id, **self._kw)
            return
        # Interim, until Conversations.delete: remember the newest seq, read after it.
        await self.conversations.check(self.conversation_id, **self._kw)  # the owner only
        log = self.conversations.backend.conversations
        newest = await log.read(
            self.conversation_id, tenant=self.tenant, limit=1, newest_first=True
        )
        if newest and newest[0].seq is not None:
            await self.conversations.backend.working.put_working(
                self.conversation_id, _CLEARED, str(newest[0].seq), tenant=self.tenant, ttl=_FOREVER
            )

    async def _cleared_after(self) -> int:
        if getattr(self.conversations, "delete", None) is not None:
            return 0
        item = await self.conversations.backend.working.get_working(
            self.conversation_id, _CLEARED, tenant=self.tenant
        )
        return int(item.content) if item is not None else 0
