"""Reading a stored conversation back: its originals, oldest first, in pages.

`originals` is `Conversations.messages`: what was stored, byte for byte, read from
the store ``page_size`` messages at a time, so that a long conversation is never
held whole; only for the conversation's owner (checked on its tail first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from .._errors import ConfigError, InvalidMessageError
from ..model._messages import Message

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["originals"]


async def originals(
    c: Conversations, conversation: str, tenant: str, user: str, after_seq: int, page_size: int
) -> AsyncIterator[Message]:
    """The stored messages after ``after_seq``, oldest first (`Conversations.messages`)."""
    if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
        raise InvalidMessageError("after_seq", f"must be an integer >= 0, got {after_seq!r}")
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ConfigError(f"page_size must be a positive integer, got {page_size!r}")
    tail = await c._tail(conversation, tenant, user)
    await c._keeper.owned(tail, conversation, tenant, user)
    seq = after_seq
    log = c.backend.conversations
    while True:
        page = await log.read(conversation, tenant=tenant, after_seq=seq, limit=page_size)
        for m in page:
            yield m
        if len(page) < page_size:
            return
        last = page[-1].seq
        assert last is not None  # stored messages carry their seq
        seq = last
