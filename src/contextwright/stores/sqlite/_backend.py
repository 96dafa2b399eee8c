"""`SQLiteBackend`: the async store contract over one `SQLiteStore` on a worker thread.

The sync `SQLiteStore` does the work (the CLI uses it as it is); this class gives
every role of the contract (``_contract.py``) as coroutines that run the store's
calls, one at a time and in order, on one thread of its own — the way
``aiosqlite`` wraps ``sqlite3``: SQLite serialises writers anyway, and the
connection is only ever used from that thread. The event loop awaits a future
meanwhile, so it never blocks on the database. A cancelled call still completes
on the worker (a transaction is never abandoned half-way); only the awaiting stops.

On a private event loop of a sync facade (marked with `inline_loop`) each call
runs at once on the caller's thread instead: blocking that loop blocks no one,
and it saves a thread hop per call. The backend's job queue is an `SQLiteJobs`
in the same file, its calls run the same way.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Container, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from ..._errors import StoreError
from ...model._messages import Message
from .._async import AsyncStore
from .._contract import Backend, Readback, Written
from .._inline import runs_inline
from .._records import (
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
from ._jobs import SQLiteJobs
from ._store import SQLiteStore

__all__ = ["SQLiteBackend"]

R = TypeVar("R")


class SQLiteBackend:
    """Every role of the store contract, backed by one SQLite file (see the module docstring).

    ``store`` is an open `SQLiteStore` (the backend owns it from now on and closes
    it in `aclose`) or the path to open one at (None: `default_db_path`), with
    ``clock`` and ``busy_timeout`` passed on. `backend` gives it as a `Backend`.
    """

    def __init__(
        self,
        store: SQLiteStore | str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
    ) -> None:
        if not isinstance(store, SQLiteStore):
            store = SQLiteStore(store, clock=clock, busy_timeout=busy_timeout)
        self.store = store
        self.jobs = SQLiteJobs(store, clock=clock, run=self._run)
        # the worker thread (and its lifetime) is `AsyncStore`'s: one way to run a store
        self.worker = AsyncStore(store)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.store.path!r})"

    def backend(self) -> Backend:
        """This object in every role of a `Backend` (receipts and keys too), with its `SQLiteJobs`."""
        return Backend.of(self, self.jobs)

    async def _run(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        call = functools.partial(fn, *args, **kwargs)
        if runs_inline():
            if self.worker.closed:
                raise StoreError(f"{self!r} is closed")
            return call()
        return await self.worker._run(call)

    # -- ConversationLog ---------------------------------------------------------------

    async def ensure_conversation(
        self,
        conversation: str,
        *,
        tenant: str,
        user: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationInfo:
        return await self._run(
            self.store.ensure_conversation,
            conversation,
            tenant=tenant,
            user=user,
            metadata=metadata,
        )

    async def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None:
        return await self._run(self.store.get_conversation, conversation, tenant=tenant)

    async def list_conversations(
        self, *, tenant: str, user: str | None = None
    ) -> list[ConversationInfo]:
        return await self._run(self.store.list_conversations, tenant=tenant, user=user)

    async def version(self, conversation: str, *, tenant: str) -> int:
        return await self._run(self.store.version, conversation, tenant=tenant)

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
        stored, version = await self._run(
            self.store.append_versioned, conversation, messages, tenant=tenant, user=user,
            tokens=tokens, counter=counter, readback=readback,
        )  # fmt: skip
        return Written(stored, version)

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
        return await self._run(
            self.store.read, conversation, tenant=tenant, after_seq=after_seq, upto_seq=upto_seq,
            limit=limit, newest_first=newest_first,
        )  # fmt: skip

    async def read_tail(
        self,
        conversation: str,
        *,
        tenant: str,
        max_tokens: int,
        after_seq: int = 0,
        counter: str = "",
    ) -> list[Message]:
        return await self._run(
            self.store.read_tail, conversation, tenant=tenant, max_tokens=max_tokens,
            after_seq=after_seq, counter=counter,
        )  # fmt: skip

    async def read_outline(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[MessageOutline]:
        return await self._run(
            self.store.read_outline, conversation, tenant=tenant, after_seq=after_seq,
            upto_seq=upto_seq,
        )  # fmt: skip

    async def token_total(
        self, conversation: str, *, tenant: str, after_seq: int = 0
    ) -> tuple[int, int]:
        return await self._run(
            self.store.token_total, conversation, tenant=tenant, after_seq=after_seq
        )

    async def count_messages(
        self, conversation: str, *, tenant: str, role: str | None = None
    ) -> int:
        return await self._run(self.store.count_messages, conversation, tenant=tenant, role=role)

    async def message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        seqs: Sequence[int],
        counter: str | None = None,
    ) -> dict[int, int]:
        return await self._run(
            self.store.message_tokens, conversation, tenant=tenant, seqs=seqs, counter=counter
        )

    async def set_message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        counts: Mapping[int, int],
        counter: str,
        readback: Sequence[Readback] = (),
    ) -> int:
        return await self._run(
            self.store.set_message_tokens, conversation, tenant=tenant,
            counts=counts, counter=counter, readback=readback,
        )  # fmt: skip

    async def delete_conversation(self, conversation: str, *, tenant: str) -> bool:
        return await self._run(self.store.delete_conversation, conversation, tenant=tenant)

    # -- SummaryLog, CompactionLog -------------------------------------------------------

    async def save_summary(
        self, summary: Summary, *, tenant: str, expected: int | None = None
    ) -> Written[Summary]:
        saved, version = await self._run(
            self.store.save_summary_versioned, summary, tenant=tenant, expected=expected
        )
        return Written(saved, version)

    async def latest_summary(self, conversation: str, *, tenant: str) -> Summary | None:
        return await self._run(self.store.latest_summary, conversation, tenant=tenant)

    async def summaries(self, conversation: str, *, tenant: str) -> list[Summary]:
        return await self._run(self.store.summaries, conversation, tenant=tenant)

    async def log_compaction(
        self, entry: CompactionEntry, *, tenant: str
    ) -> Written[CompactionEntry]:
        logged, version = await self._run(self.store.log_compaction_versioned, entry, tenant=tenant)
        return Written(logged, version)

    async def save_compaction(
        self,
        summary: Summary,
        entry: CompactionEntry,
        *,
        tenant: str,
        expected: int | None = None,
    ) -> Written[tuple[Summary, CompactionEntry]]:
        saved, logged, version = await self._run(
            self.store.save_compaction_versioned, summary, entry, tenant=tenant, expected=expected
        )
        return Written((saved, logged), version)

    async def compactions(self, conversation: str, *, tenant: str) -> list[CompactionEntry]:
        return await self._run(self.store.compactions, conversation, tenant=tenant)

    # -- WorkingMemory, Pins ---------------------------------------------------------------

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
        item, version = await self._run(
            self.store.put_working_versioned, conversation, key, content, tenant=tenant, ttl=ttl,
            meta=meta,
        )  # fmt: skip
        return Written(item, version)

    async def get_working(self, conversation: str, key: str, *, tenant: str) -> WorkingItem | None:
        return await self._run(self.store.get_working, conversation, key, tenant=tenant)

    async def collect_working(self, *, now: float | None = None) -> int:
        return await self._run(self.store.collect_working, now=now)

    async def pin(
        self, conversation: str, content: str, *, tenant: str, priority: int = 0
    ) -> Written[PinnedItem]:
        item, version = await self._run(
            self.store.pin_versioned, conversation, content, tenant=tenant, priority=priority
        )
        return Written(item, version)

    async def unpin(self, conversation: str, pin_id: int, *, tenant: str) -> Written[bool]:
        removed, version = await self._run(
            self.store.unpin_versioned, conversation, pin_id, tenant=tenant
        )
        return Written(removed, version)

    async def pinned(self, conversation: str, *, tenant: str) -> list[PinnedItem]:
        return await self._run(self.store.pinned, conversation, tenant=tenant)

    # -- MessageSearch -----------------------------------------------------------------------

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
        return await self._run(
            self.store.search, conversation, query, tenant=tenant, limit=limit,
            before_seq=before_seq, roles=roles,
        )  # fmt: skip

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
        return await self._run(
            self.store.search_seqs, conversation, query, tenant=tenant, limit=limit,
            before_seq=before_seq, roles=roles,
        )  # fmt: skip

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
        return await self._run(
            self.store.search_outlines, conversation, query, tenant=tenant, limit=limit,
            before_seq=before_seq, match_budget=match_budget, around=around, known=known,
        )  # fmt: skip

    async def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[str]:
        return await self._run(
            self.store.speaker_names, conversation, tenant=tenant, after_seq=after_seq,
            upto_seq=upto_seq,
        )  # fmt: skip

    async def optimize_index(self) -> None:
        await self._run(self.store.optimize_search_index)

    # -- Receipts, ApiKeys ----------------------------------------------------------------------

    async def record_receipt(
        self,
        conversation: str,
        receipt: Mapping[str, Any],
        *,
        tenant: str,
        at: float | None = None,
        keep: int = 50,
    ) -> ReceiptRecord:
        return await self._run(
            self.store.record_receipt, conversation, receipt, tenant=tenant, at=at, keep=keep
        )

    async def receipts(
        self, conversation: str, *, tenant: str, limit: int = 20
    ) -> list[ReceiptRecord]:
        return await self._run(self.store.receipts, conversation, tenant=tenant, limit=limit)

    async def create_key(self, record: KeyRecord) -> None:
        await self._run(self.store.create_key, record)

    async def find_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(self.store.find_key, key_id)

    async def list_keys(self, *, tenant: str | None = None) -> list[KeyRecord]:
        return await self._run(self.store.list_keys, tenant=tenant)

    async def revoke_key(self, key_id: str, *, at: float | None = None) -> bool:
        return await self._run(self.store.revoke_key, key_id, at=at)

    # -- lifetime --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the store on the worker, then stop the worker (idempotent)."""
        await self.worker.close()

    async def __aenter__(self) -> SQLiteBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
