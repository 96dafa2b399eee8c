"""The storage contract: the records a store keeps and the `Store` protocol.

A store persists conversations for the history part (docs/architecture.md, The parts): the
messages themselves with a per-conversation sequence number, the token count of
each message, the versioned summaries that stand in for old turns, a log of every
compaction, a short-lived working memory (large tool results offloaded out of the
prompt) and pinned items. Every method names a ``tenant`` and every implementation
must filter by it in the query itself: a conversation id means nothing without its
tenant, and tenant B must never see tenant A's data even when both use the same
conversation id (docs/architecture.md, Invariants).

The records are frozen dataclasses so that what a store returns can be passed
around and compared without copying. `Store` is the synchronous contract that
`SQLiteStore` implements here and a PostgreSQL store will implement later;
`AsyncStore` turns any `Store` into coroutines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, InvalidMessageError
from ..model._messages import Message, Role

__all__ = [
    "CompactionEntry",
    "ConversationInfo",
    "MessageOutline",
    "PinnedItem",
    "SearchHit",
    "Store",
    "Summary",
    "WorkingItem",
    "default_db_path",
    "not_owner",
]


def not_owner(conversation: str, tenant: str, user: str) -> InvalidMessageError:
    """The error for ``user`` reaching a conversation that belongs to another user.

    Raised by every read and write of a conversation by anyone but its owner (the
    user who first wrote to it). It names the conversation and the caller, not
    the owner: who owns it is not the caller's to know.
    """
    return InvalidMessageError(
        "user",
        f"conversation {conversation!r} of tenant {tenant!r} belongs to another user, not {user!r}",
    )


def default_db_path() -> Path:
    """Where the embedded store lives unless told otherwise.

    ``$CONTEXTWRIGHT_DB`` if set, else ``$XDG_DATA_HOME/contextwright/contextwright.db``,
    else ``~/.local/share/contextwright/contextwright.db``. The environment is read
    on every call and nothing is created here: the store makes the parent directory
    when it opens the default path. ``$CONTEXTWRIGHT_DB`` may be ``sqlite:///path``;
    a ``postgresql://`` URL there names no file (`ConfigError`: open it by URL).
    """
    explicit = os.environ.get("CONTEXTWRIGHT_DB")
    if explicit:
        from ._url import parse_db

        target = parse_db(explicit)
        if target.kind != "sqlite":
            raise ConfigError(
                "CONTEXTWRIGHT_DB names a PostgreSQL database, not a file: open it by URL "
                "(Conversations(engine, url), --db)"
            )
        return Path(target.path).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "")
    # The XDG base directory spec says a relative value is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "contextwright" / "contextwright.db"


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """A conversation's row: who owns it and running totals kept by `Store.append`.

    ``last_seq`` is the sequence number of the newest message (0 when empty);
    ``token_total`` is the sum of the stored per-message token counts (messages
    stored without a count add nothing). ``version`` grows by one with every
    write to the conversation, in any process (see `Store.version`), and keeps
    growing across a delete: ``first_version`` is the version the conversation's
    creation left — 1, or one above the last version of the conversation of the
    same id deleted before it. A cache of this id made at a version below
    ``first_version`` holds a deleted conversation.
    """

    id: str
    tenant: str
    user: str
    created_at: float
    updated_at: float
    last_seq: int
    message_count: int
    token_total: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    version: int = 0
    first_version: int = 1


@dataclass(frozen=True, slots=True)
class ReceiptRecord:
    """A recorded build receipt (`Receipts`): its id, when, and the receipt as JSON data.

    ``receipt`` is `ContextReport.to_dict()` of the build (plain JSON values);
    ``id`` grows with every receipt recorded in the store, across conversations.
    """

    id: int
    conversation: str
    tenant: str
    at: float
    receipt: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored API key (`ApiKeys`): never the key itself, only its id and a hash of its secret.

    ``key_id`` is the public part of the key (it may be shown and logged);
    ``secret_hash`` is the hex SHA-256 of the secret part, compared in constant time.
    ``revoked_at`` is None while the key is valid.
    """

    key_id: str
    tenant: str
    name: str
    secret_hash: str
    created_at: float
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class MessageOutline:
    """A stored message without its payload: what planning a compaction reads of it.

    Decoding a stored `Message` (its JSON parts, then validation) costs about 15 µs,
    a large tool result most; a compaction of 1,000 messages needs only their costs,
    roles and tool-call units, and the rule summariser only counts all but the newest
    turns. ``tokens`` and ``counter`` are the stored count and the counter that made
    it (None and ``""`` when uncounted). ``size`` is the length in characters of the
    message's searchable text: for a tool message, ``len(message.text)``. ``text`` is
    ``message.text`` for every role but ``tool``, whose results are not read (``""``);
    ``tool_calls`` names an assistant message's tool calls, in order; ``name`` and
    ``created_at`` are the message's (recall's turn index is built from outlines).
    """

    seq: int
    role: Role
    tokens: int | None
    counter: str
    size: int
    text: str = ""
    tool_calls: tuple[str, ...] = ()
    name: str | None = None
    created_at: float | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary standing in for messages ``from_seq..upto_seq`` (both included).

    ``version`` is assigned by `Store.save_summary` (previous + 1); pass 0, or the
    version you expect to write to detect a concurrent summariser. Every version is
    kept, so a compaction can be undone by reading an older one.
    """

    conversation: str
    version: int
    from_seq: int
    upto_seq: int
    content: str
    tokens: int = 0
    method: str = ""
    created_at: float = field(default_factory=time.time)
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompactionEntry:
    """One compaction decision, applied or not (``id`` is 0 until logged).

    ``urgency`` is e.g. ``"soft"``, ``"hard"`` or ``"emergency"``;
    ``summary_version`` is the summary it produced, if any; ``upto_seq`` the last
    message it covered; ``strategies`` the steps it ran, in order.
    """

    id: int
    conversation: str
    at: float
    urgency: str
    applied: bool
    tokens_before: int
    tokens_after: int
    summary_version: int | None = None
    upto_seq: int = 0
    strategies: tuple[str, ...] = ()
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkingItem:
    """A short-lived value of a conversation's working memory (e.g. an offloaded tool result)."""

    key: str
    conversation: str
    content: str
    created_at: float
    expires_at: float
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PinnedItem:
    """Content pinned to a conversation; lower ``priority`` is more important (like `Priority`)."""

    id: int
    conversation: str
    content: str
    priority: int
    created_at: float


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A stored message found by `Store.search`; a higher ``score`` is a better match."""

    message: Message
    score: float


@runtime_checkable
class Store(Protocol):
    """Persistence for conversations; every method is scoped by ``tenant``.

    Writes are atomic: a method either does all it says or raises having written
    nothing. Bad input raises `InvalidMessageError` or `ConfigError` before any
    write; backend failures raise `StoreError`.

    Every conversation has a ``version`` (`version`, `ConversationInfo.version`):
    each call that writes to the conversation — creating it, appending, storing
    recounts, a summary, a compaction log entry, working memory, a pin or unpin,
    expiring its working memory — adds exactly one, in the same transaction. A
    call that writes nothing (a rejected one, a retry of messages stored
    already, an unpin of no pin) leaves it. It is the change token of any cache
    of the conversation, in any process: equal versions, equal contents. A
    conversation deleted and made again under the same id continues above the
    deleted one's last version (`ConversationInfo.first_version`), so no version
    of an id is ever given out twice.
    """

    def ensure_conversation(
        self,
        conversation: str,
        *,
        tenant: str,
        user: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationInfo: ...

    def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None: ...

    def version(self, conversation: str, *, tenant: str) -> int:
        """The conversation's version; 0 if the tenant has no such conversation."""
        ...

    def list_conversations(
        self, *, tenant: str, user: str | None = None
    ) -> list[ConversationInfo]: ...

    def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str,
        user: str = "anonymous",
        tokens: Sequence[int] | None = None,
        counter: str = "",
        readback: Sequence[tuple[int, str, str, float]] = (),
    ) -> list[Message]:
        """Store ``messages``; a conversation belongs to the user who made it, and an
        append by another raises `InvalidMessageError` (`not_owner`), writing nothing.
        ``readback`` holds ``(i, call_id, key, ttl)``: working-memory keys, written in
        the same transaction, that read the stored result of call ``call_id`` in
        ``messages[i]``."""
        ...

    def read(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]: ...

    def read_tail(
        self,
        conversation: str,
        *,
        tenant: str,
        max_tokens: int,
        after_seq: int = 0,
        counter: str = "",
    ) -> list[Message]: ...

    def read_outline(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[MessageOutline]: ...

    def token_total(
        self, conversation: str, *, tenant: str, after_seq: int = 0
    ) -> tuple[int, int]: ...

    def count_messages(self, conversation: str, *, tenant: str, role: str | None = None) -> int: ...

    def message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        seqs: Sequence[int],
        counter: str | None = None,
    ) -> dict[int, int]: ...

    def set_message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        counts: Mapping[int, int],
        counter: str,
        readback: Sequence[tuple[int, str, str, float]] = (),
    ) -> int:
        """Store recounts (and, like `append`, working-memory keys for tool results by
        ``(seq, call_id, key, ttl)``); return the conversation's version after the call."""
        ...

    def save_summary(self, summary: Summary, *, tenant: str) -> Summary: ...

    def latest_summary(self, conversation: str, *, tenant: str) -> Summary | None: ...

    def summaries(self, conversation: str, *, tenant: str) -> list[Summary]: ...

    def log_compaction(self, entry: CompactionEntry, *, tenant: str) -> CompactionEntry: ...

    def save_compaction(
        self, summary: Summary, entry: CompactionEntry, *, tenant: str
    ) -> tuple[Summary, CompactionEntry]: ...

    def compactions(self, conversation: str, *, tenant: str) -> list[CompactionEntry]: ...

    def put_working(
        self,
        conversation: str,
        key: str,
        content: str,
        *,
        tenant: str,
        ttl: float,
        meta: Mapping[str, Any] | None = None,
    ) -> WorkingItem: ...

    def get_working(self, conversation: str, key: str, *, tenant: str) -> WorkingItem | None: ...

    def collect_working(self, *, now: float | None = None) -> int: ...

    def pin(
        self, conversation: str, content: str, *, tenant: str, priority: int = 0
    ) -> PinnedItem: ...

    def unpin(self, conversation: str, pin_id: int, *, tenant: str) -> bool: ...

    def pinned(self, conversation: str, *, tenant: str) -> list[PinnedItem]: ...

    def search(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] = ("user", "assistant"),
    ) -> list[SearchHit]: ...

    def search_seqs(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] | None = ("user", "assistant"),
    ) -> list[tuple[int, float]]: ...

    def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[str]: ...

    def search_outlines(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        match_budget: int | None = None,
        around: int = 0,
        known: Container[int] = (),
    ) -> tuple[list[tuple[int, float]], list[MessageOutline]]: ...

    def close(self) -> None: ...
