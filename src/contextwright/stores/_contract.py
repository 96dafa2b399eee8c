"""The backend-neutral async store contract: one protocol per concern, and `Backend`.

A conversation store is six small roles rather than one wide interface, so a
backend can be read (and a test double written) one concern at a time:

- `ConversationLog` — conversations and their append-only messages: ensure, get,
  list, append, read a range, the tail under a token budget, outlines, counts and
  token totals, stored per-message counts, and the conversation's ``version``.
- `SummaryLog` — versioned summaries, saved against the version the caller expects.
- `CompactionLog` — the log of compactions, and a summary saved with its entry.
- `WorkingMemory` — short-lived values (offloaded tool results), with a TTL.
- `Pins` — content pinned to a conversation.
- `MessageSearch` — full-text search of a conversation's stored messages, and
  what recall asks of it (hits with the outlines around them, speaker names).

Two roles serve the HTTP service and the inspector rather than the engine:
`Receipts` (the receipts of recent builds, per conversation) and `ApiKeys`
(hashed, revocable keys, each bound to one tenant).

Every method is ``async def`` and names the ``tenant``; a backend filters by it in
the query itself, so the same conversation id in two tenants never mixes. The one
call that spans tenants is `WorkingMemory.collect_working`, housekeeping that
returns a count, never data.

**Versions.** Every conversation has a version that each write to it increments
by exactly one, in the write's own transaction (see `Store`): creation, append,
recounts, summaries, compaction entries, working memory, pins. Writes return what
they wrote together with the version they left (`Written`), so a cache that was
current at ``version - 1`` and takes in the write is current at ``version``;
`ConversationLog.version` is the cheap check of any cache, in any process; no
version of an id is given out twice, not even across a delete.

**Errors.** Bad input raises a `UserError` naming the field, before anything is
written (`InvalidMessageError`, `ConfigError`); a conversation of another user
raises `InvalidMessageError` (`not_owner`); losing a race to save a summary raises
`SummaryConflictError` (re-read, not a user error); backend failures raise
`StoreError`.

`Backend` bundles one implementation of each role with the backend's ``aclose``
and, if it has one, its durable job queue (`Jobs`: background summaries).
The SQLite backend (`SQLiteBackend`) and the in-memory test double
(`contextwright.testing.MemoryBackend`) provide all six roles from one object;
`contextwright.testing` holds the contract suite every backend runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from ..model._messages import Message
from ._jobs import Jobs
from ._records import (
    CompactionEntry,
    ConversationInfo,
    KeyRecord,
    MessageOutline,
    PinnedItem,
    ReceiptRecord,
    SearchHit,
    Summary,
    WorkingItem,
)

__all__ = [
    "ApiKeys",
    "Backend",
    "CompactionLog",
    "ConversationLog",
    "MessageSearch",
    "Pins",
    "Readback",
    "Receipts",
    "SummaryLog",
    "WorkingMemory",
    "Written",
]

T = TypeVar("T")

# (index or seq, call_id, key, ttl): a working-memory key that reads a stored tool
# result; see `ConversationLog.append`.
Readback = tuple[int, str, str, float]


@dataclass(frozen=True, slots=True)
class Written(Generic[T]):
    """What a write stored (``value``) and the conversation's ``version`` after it.

    The version moved by exactly one if the call wrote anything; a call that wrote
    nothing (a retry of stored messages, an unpin of no pin) returns the version
    as it is.
    """

    value: T
    version: int


@runtime_checkable
class ConversationLog(Protocol):
    """Conversations and their messages, append-only with gapless sequence numbers."""

    async def ensure_conversation(
        self,
        conversation: str,
        *,
        tenant: str,
        user: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationInfo:
        """The conversation, created for ``user`` if new; another user's raises (`not_owner`)."""
        ...

    async def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None:
        """The conversation's row, None if the tenant has no such conversation."""
        ...

    async def list_conversations(
        self, *, tenant: str, user: str | None = None
    ) -> list[ConversationInfo]:
        """The tenant's conversations (only ``user``'s if given), most recently updated first."""
        ...

    async def version(self, conversation: str, *, tenant: str) -> int:
        """The conversation's version; 0 if the tenant has no such conversation."""
        ...

    async def delete_conversation(self, conversation: str, *, tenant: str) -> bool:
        """Delete the conversation and everything stored under it; False if there is none.

        Its messages, search index entries, summaries, compaction log, working
        memory, pins and receipts go, in one transaction; queued jobs for it find
        nothing to do. This is the one call that removes stored messages (a user's
        request to be forgotten), never compaction. Another tenant's conversation of
        the same id is untouched. Afterwards `version` answers 0; one made again under
        the id starts at seq 1, its versions above the deleted one's last (kept per id,
        a number: `ConversationInfo.first_version`), so no cache of it is taken for current.
        """
        ...

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str,
        user: str,
        tokens: Sequence[int] | None = None,
        counter: str = "",
        readback: Sequence[Readback] = (),
    ) -> Written[list[Message]]:
        """Store ``messages`` after the last one (seq ``last + 1 ..``); return them with ``seq``.

        The conversation is created for ``user`` if new. ``tokens`` are the
        messages' counts by the counter named ``counter``. A message whose id is
        stored already with the same content is returned as stored (a safe
        retry); the same id with other content raises and nothing is written.
        ``readback`` holds ``(i, call_id, key, ttl)``: working-memory ``key``
        returns, for ``ttl`` seconds, the result of call ``call_id`` in
        ``messages[i]``, written in the same transaction.
        """
        ...

    async def read(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Message]:
        """Messages with ``after_seq < seq <= upto_seq`` by seq; ``limit`` in the chosen order."""
        ...

    async def read_tail(
        self,
        conversation: str,
        *,
        tenant: str,
        max_tokens: int,
        after_seq: int = 0,
        counter: str = "",
    ) -> list[Message]:
        """The newest messages whose counts fit ``max_tokens``, oldest first.

        A message without a count by ``counter`` is charged a low estimate and
        returned all the same: the tail may come back over budget, never short.
        """
        ...

    async def read_outline(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[MessageOutline]:
        """Outlines (`MessageOutline`) of the messages with ``after_seq < seq <= upto_seq``."""
        ...

    async def token_total(
        self, conversation: str, *, tenant: str, after_seq: int = 0
    ) -> tuple[int, int]:
        """(message count, sum of stored counts) of the messages with ``seq > after_seq``."""
        ...

    async def count_messages(
        self, conversation: str, *, tenant: str, role: str | None = None
    ) -> int:
        """How many messages the conversation holds (of ``role``, if given)."""
        ...

    async def message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        seqs: Sequence[int],
        counter: str | None = None,
    ) -> dict[int, int]:
        """Stored counts by seq, for those of ``seqs`` that have one (by ``counter``, if given)."""
        ...

    async def set_message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        counts: Mapping[int, int],
        counter: str,
        readback: Sequence[Readback] = (),
    ) -> int:
        """Store recounts (``readback`` as for `append`, by seq); return the version after."""
        ...


@runtime_checkable
class SummaryLog(Protocol):
    """Versioned summaries of a conversation's older messages; every version is kept."""

    async def save_summary(
        self, summary: Summary, *, tenant: str, expected: int | None = None
    ) -> Written[Summary]:
        """Store ``summary`` as the next version.

        ``expected`` is the latest summary version the caller read (0: none); if
        another was saved since, or the latest already reaches ``upto_seq``,
        `SummaryConflictError` carries the stored one and nothing is written.
        """
        ...

    async def latest_summary(self, conversation: str, *, tenant: str) -> Summary | None:
        """The newest version, None if there is none."""
        ...

    async def summaries(self, conversation: str, *, tenant: str) -> list[Summary]:
        """Every version, oldest first."""
        ...


@runtime_checkable
class CompactionLog(Protocol):
    """The append-only log of compactions, and a summary saved with its entry."""

    async def log_compaction(
        self, entry: CompactionEntry, *, tenant: str
    ) -> Written[CompactionEntry]:
        """Append ``entry``; return it with ``id`` set."""
        ...

    async def save_compaction(
        self,
        summary: Summary,
        entry: CompactionEntry,
        *,
        tenant: str,
        expected: int | None = None,
    ) -> Written[tuple[Summary, CompactionEntry]]:
        """A summary and its log entry, both or neither (refused as `SummaryLog.save_summary`)."""
        ...

    async def compactions(self, conversation: str, *, tenant: str) -> list[CompactionEntry]:
        """The log, oldest first."""
        ...


@runtime_checkable
class WorkingMemory(Protocol):
    """Short-lived values of a conversation (e.g. an offloaded tool result)."""

    async def put_working(
        self,
        conversation: str,
        key: str,
        content: str,
        *,
        tenant: str,
        ttl: float,
        meta: Mapping[str, Any] | None = None,
    ) -> Written[WorkingItem]:
        """Keep ``content`` under ``key`` for ``ttl`` seconds (replacing and restarting a key)."""
        ...

    async def get_working(self, conversation: str, key: str, *, tenant: str) -> WorkingItem | None:
        """The value under ``key``, None if there is none or it has expired."""
        ...

    async def collect_working(self, *, now: float | None = None) -> int:
        """Delete every value expired at ``now``, in all tenants; return how many."""
        ...


@runtime_checkable
class Pins(Protocol):
    """Content pinned to a conversation; lower ``priority`` is more important."""

    async def pin(
        self, conversation: str, content: str, *, tenant: str, priority: int = 0
    ) -> Written[PinnedItem]: ...

    async def unpin(self, conversation: str, pin_id: int, *, tenant: str) -> Written[bool]:
        """Remove a pin; ``value`` False (and no write) if there is no such pin."""
        ...

    async def pinned(self, conversation: str, *, tenant: str) -> list[PinnedItem]:
        """The pins, lowest priority number first, then in pin order."""
        ...


@runtime_checkable
class MessageSearch(Protocol):
    """Full-text search of one conversation's stored messages, best first."""

    async def search(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] = ("user", "assistant"),
    ) -> list[SearchHit]:
        """Messages with ``seq < before_seq`` (if given) and a role in ``roles`` matching ``query``.

        The query is text, never parsed as search syntax; English and CJK alike.
        """
        ...

    async def search_seqs(
        self,
        conversation: str,
        query: str,
        *,
        tenant: str,
        limit: int = 10,
        before_seq: int | None = None,
        roles: Sequence[str] | None = ("user", "assistant"),
    ) -> list[tuple[int, float]]:
        """`search` as (seq, score); ``roles=None``: every role but tool results."""
        ...

    async def search_outlines(
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
    ) -> tuple[list[tuple[int, float]], list[MessageOutline]]:
        """The best ``limit`` messages for ``query`` as (seq, score), and the outlines around them.

        Searches every role but tool results, below ``before_seq``, best first,
        ties to the newer message; the query's terms are taken as given.
        ``match_budget`` bounds the work: the terms are taken rarest first while
        the messages holding them add up to at most that many (None: every term).
        The second list holds the outlines, by seq, of the messages within
        ``around`` sequence numbers of a hit (hits included) below ``before_seq``;
        those whose seq is in ``known`` may be left out.
        """
        ...

    async def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[str]:
        """The distinct names of user and assistant messages in ``after_seq < seq <= upto_seq``, sorted."""
        ...

    async def optimize_index(self) -> None:
        """Bring the search index up to date and compact it (after a bulk import).

        Housekeeping across every tenant, as `WorkingMemory.collect_working`; a
        backend that keeps no index does nothing.
        """
        ...


@runtime_checkable
class Receipts(Protocol):
    """The receipts of recent builds, per conversation (what the inspector shows).

    Recording a receipt is diagnostics, not a write to the conversation: it does
    not move the conversation's ``version`` (a build would otherwise invalidate
    every cache of the conversation it read). A conversation keeps its newest
    ``keep`` receipts; older ones are deleted by the call that records a new one.
    """

    async def record_receipt(
        self,
        conversation: str,
        receipt: Mapping[str, Any],
        *,
        tenant: str,
        at: float | None = None,
        keep: int = 50,
    ) -> ReceiptRecord:
        """Store ``receipt`` (JSON data) for the tenant's conversation; return its record.

        The conversation need not exist (a build with ``store_message=False``
        of a new id); ``at`` defaults to the backend's clock.
        """
        ...

    async def receipts(
        self, conversation: str, *, tenant: str, limit: int = 20
    ) -> list[ReceiptRecord]:
        """The conversation's newest ``limit`` receipts, newest first."""
        ...


@runtime_checkable
class ApiKeys(Protocol):
    """API keys of the HTTP service and MCP server: one tenant each, hashed, revocable.

    The store never sees a key, only its public id and the SHA-256 of its secret;
    the caller (`contextwright.interfaces`) makes keys and compares hashes in
    constant time. Keys span tenants by nature (a request's tenant is found from
    its key), so `find_key` takes no tenant.
    """

    async def create_key(self, record: KeyRecord) -> None:
        """Store a new key; a ``key_id`` already stored raises `ConfigError`."""
        ...

    async def find_key(self, key_id: str) -> KeyRecord | None:
        """The key with this id (revoked ones too, with ``revoked_at``), None if unknown."""
        ...

    async def list_keys(self, *, tenant: str | None = None) -> list[KeyRecord]:
        """Every key (of ``tenant``, if given), oldest first, revoked ones included."""
        ...

    async def revoke_key(self, key_id: str, *, at: float | None = None) -> bool:
        """Mark the key revoked; False if there is no such key or it was already revoked."""
        ...


class _AllRoles(
    ConversationLog, SummaryLog, CompactionLog, WorkingMemory, Pins, MessageSearch, Protocol
):
    """An object playing every role (what `Backend.of` takes)."""

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Backend:
    """One implementation of each role, and how to close the backend.

    Use as ``async with backend:`` or call `aclose` (idempotent if the backend's
    closer is). The roles may all be one object (`Backend.of`). ``jobs`` is the
    backend's durable job queue, shared by every process that opens the same
    store (None: the backend has none, and a caller keeps its own).
    ``receipts`` and ``keys`` are the service's roles (`Receipts`, `ApiKeys`);
    every built-in backend has them.
    """

    conversations: ConversationLog
    summaries: SummaryLog
    compactions: CompactionLog
    working: WorkingMemory
    pins: Pins
    search: MessageSearch
    closer: Callable[[], Awaitable[None]]
    jobs: Jobs | None = None
    receipts: Receipts | None = None
    keys: ApiKeys | None = None

    @classmethod
    def of(cls, impl: _AllRoles, jobs: Jobs | None = None) -> Backend:
        """The backend whose every role is ``impl`` (``receipts`` and ``keys`` if it has
        their methods, else None), closed by ``impl.aclose``."""
        receipts = impl if isinstance(impl, Receipts) else None
        keys = impl if isinstance(impl, ApiKeys) else None
        return cls(impl, impl, impl, impl, impl, impl, impl.aclose, jobs, receipts, keys)

    async def aclose(self) -> None:
        await self.closer()

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
