"""The state of the in-memory backend: conversations in plain dicts, and one lock.

`MemoryState` holds every tenant's conversations keyed by ``(tenant, id)``, the
last version of each deleted one (a conversation made again continues above it),
the receipts and API keys, the clock, the id counters, and the lock every role of
`MemoryBackend` (``_backend.py``, ``_roles.py``, ``_service.py``) takes around a call. A call
does its checks first and its changes after, with no ``await`` in between, so a
rejected call changes nothing and no two calls interleave. Stored messages are
frozen records, replaced (never changed) when recounted, so a list of them taken
under the lock stays a consistent snapshot after it is released.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ...model._messages import Message
from ...model._parts import TextPart, ToolCallPart, ToolResultPart
from .._contract import Readback
from .._records import (
    CompactionEntry,
    ConversationInfo,
    KeyRecord,
    MessageOutline,
    PinnedItem,
    Summary,
    WorkingItem,
    not_owner,
)
from ..sqlite import _rows

__all__ = ["MemoryState"]


@dataclass(frozen=True, slots=True)
class Stored:
    message: Message  # seq and created_at set
    tokens: int | None
    counter: str
    size: int
    meta: str | None  # as _rows.PreparedMessage serialises them (for same_content)
    parts: str


@dataclass(slots=True)
class Working:
    item: WorkingItem
    ref: tuple[int, str] | None = None  # (seq, call_id) of a stored tool result


@dataclass(slots=True)
class Conversation:
    tenant: str
    id: str
    user: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any]
    version: int = 0  # made and not yet registered: the version before its creation
    first_version: int = 1
    messages: list[Stored] = field(default_factory=list)  # messages[i].seq == i + 1
    ids: dict[str, int] = field(default_factory=dict)  # message id -> seq
    token_total: int = 0
    summaries: list[Summary] = field(default_factory=list)
    compactions: list[CompactionEntry] = field(default_factory=list)
    working: dict[str, Working] = field(default_factory=dict)
    pins: dict[int, PinnedItem] = field(default_factory=dict)

    def info(self) -> ConversationInfo:
        return ConversationInfo(
            self.id, self.tenant, self.user, self.created_at, self.updated_at,
            len(self.messages), len(self.messages), self.token_total, dict(self.metadata),
            self.version, self.first_version,
        )  # fmt: skip


def ttl_seconds(ttl: object) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
    return float(ttl)


def stored_result(message: Message, call_id: str) -> str | None:
    for p in message.parts:
        if isinstance(p, ToolResultPart) and p.call_id == call_id and isinstance(p.content, str):
            return p.content
    return None


def read_copy(stored: Stored) -> Message:
    """A fresh copy of a stored message, its token cache primed as the SQLite store does."""
    m = stored.message._stamped(stored.message.seq or 0, stored.message.created_at)
    if stored.tokens is not None and stored.counter:
        m._token_cache[stored.counter] = stored.tokens
    return m


def outline(s: Stored) -> MessageOutline:
    m = s.message
    text, calls = "", tuple[str, ...]()
    if m.role != "tool":
        text = "\n".join(p.text for p in m.parts if isinstance(p, TextPart))
        calls = tuple(p.name for p in m.parts if isinstance(p, ToolCallPart))
    return MessageOutline(
        m.seq or 0, m.role, s.tokens, s.counter, s.size, text, calls, m.name, m.created_at
    )


class MemoryState:
    """Every tenant's conversations, the clock, the id counter and the lock (module docstring)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.conversations: dict[tuple[str, str], Conversation] = {}
        self.ids = itertools.count(1)  # compaction and pin ids, never reused
        # the last version of each deleted conversation: one made again continues above it
        self.retired: dict[tuple[str, str], int] = {}
        # the service's roles (``_service.py``): receipts by (tenant, conversation) as
        # (id, at, JSON text), oldest first, whether the conversation exists or not;
        # keys by id, in the order they were created
        self.receipts: dict[tuple[str, str], list[tuple[int, float, str]]] = {}
        self.receipt_ids = itertools.count(1)
        self.keys: dict[str, KeyRecord] = {}
        self.closed = False

    def __repr__(self) -> str:
        return f"MemoryBackend({len(self.conversations)} conversations)"

    def open(self, tenant: object) -> None:
        self.check_open()
        _rows.name(tenant, "tenant")

    def check_open(self) -> None:
        if self.closed:
            raise StoreError(f"{self!r} is closed")

    def find(self, tenant: str, conversation: object) -> Conversation | None:
        if not isinstance(conversation, str):
            return None
        return self.conversations.get((tenant, conversation))

    def resolve(self, tenant: str, conversation: str) -> Conversation:
        conv = self.find(tenant, conversation)
        if conv is None:
            raise InvalidMessageError(
                "conversation",
                f"no conversation {conversation!r} in tenant {tenant!r}; "
                "create it with ensure_conversation or append",
            )
        return conv

    def now(self) -> float:
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, (int, float)):
            raise ConfigError(f"the store's clock must return seconds, got {now!r}")
        return float(now)

    def ensure(
        self, conversation: str, tenant: str, user: str, metadata: dict[str, Any]
    ) -> Conversation:
        """The conversation; another user's raises. A new one is not registered (`made`)
        until its first `bump`, and its versions continue above a deleted one's."""
        conv = self.find(tenant, conversation)
        if conv is not None:
            if conv.user != user:
                raise not_owner(conversation, tenant, user)
            return conv
        now = self.now()
        before = self.retired.get((tenant, conversation), 0)
        return Conversation(tenant, conversation, user, now, now, metadata, before, before + 1)

    def made(self, conv: Conversation) -> bool:
        """Whether ``conv`` (from `ensure`) is new: made by this call, not yet registered."""
        return self.conversations.get((conv.tenant, conv.id)) is not conv

    def delete(self, tenant: str, conversation: str) -> bool:
        """Drop the conversation (all of it hangs off it), keeping its last version."""
        conv = self.conversations.pop((tenant, conversation), None)
        if conv is None:
            return False
        key = (tenant, conversation)
        self.retired[key] = max(self.retired.get(key, 0), conv.version)
        return True

    def bump(self, conv: Conversation) -> int:
        self.conversations[(conv.tenant, conv.id)] = conv
        conv.version += 1
        return conv.version

    def put_refs(self, conv: Conversation, now: float, refs: list[Readback]) -> None:
        for seq, call_id, key, ttl in refs:
            meta = {"kind": "tool_result", "stored_tool_result": {"call_id": call_id, "seq": seq}}
            item = WorkingItem(key, conv.id, "", now, now + ttl, meta)
            conv.working[key] = Working(item, (seq, call_id))

    def messages(
        self, conversation: str, tenant: str, after_seq: int, upto_seq: int | None
    ) -> list[Stored]:
        after = _rows.count(after_seq, "after_seq")
        upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
        with self.lock:
            self.open(tenant)
            conv = self.find(tenant, conversation)
            if conv is None or after >= len(conv.messages):
                return []
            return conv.messages[after : min(upto, len(conv.messages))]
