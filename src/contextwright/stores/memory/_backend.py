"""`MemoryBackend`: the async store contract in plain dicts, for tests and embedding.

It keeps everything in process memory and forgets it on exit. It is the public
test double (``contextwright.testing``) and the proof that the contract
(``_contract.py``) is backend-neutral: it passes the same contract suite as the
SQLite backend. Input is checked by the same functions the SQLite store uses
(``_rows.py``), so the same bad input raises the same error, before anything changes.

Each role is a small class over one shared `MemoryState` (``_state.py``):
the conversation log here, the engine's other roles in ``_roles.py``, the
service's (receipts, API keys) in ``_service.py``. Every call holds
the state's `threading.Lock` and never awaits while holding it: the calls of one
event loop cannot interleave, nor can those of several loops on several threads
(an `asyncio.Lock` belongs to one loop).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._messages import Message
from .._contract import Backend, Readback, Written
from .._jobs import MemoryJobs
from .._records import ConversationInfo, MessageOutline
from ..sqlite import _rows
from ._roles import MemoryMessageSearch, MemoryPins, MemorySummaryLog, MemoryWorkingMemory
from ._service import MemoryApiKeys, MemoryReceipts
from ._state import MemoryState, Stored, outline, read_copy, ttl_seconds

__all__ = ["MemoryBackend"]


class MemoryBackend:
    """Every role of the store contract in process memory (see the module docstring).

    ``clock`` gives "now" in seconds since the epoch (timestamps, working-memory
    expiry, and its job queue's leases). `backend` gives it as a `Backend`; after
    `aclose` every call raises `StoreError`.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.state = MemoryState(clock)
        self.conversations = MemoryConversationLog(self.state)
        self.summaries = MemorySummaryLog(self.state)
        self.working = MemoryWorkingMemory(self.state)
        self.pins = MemoryPins(self.state)
        self.search = MemoryMessageSearch(self.state)
        self.receipts = MemoryReceipts(self.state)
        self.keys = MemoryApiKeys(self.state)
        self.jobs = MemoryJobs(clock=clock)

    def __repr__(self) -> str:
        return repr(self.state)

    def backend(self) -> Backend:
        """The roles as a `Backend` (the summary log is also the compaction log), with its `MemoryJobs`."""
        s = self.summaries
        return Backend(
            self.conversations, s, s, self.working, self.pins, self.search, self.aclose, self.jobs,
            self.receipts, self.keys,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Accept nothing more: later calls raise `StoreError` (idempotent)."""
        self.state.closed = True


class MemoryConversationLog:
    """`ConversationLog` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def ensure_conversation(
        self,
        conversation: str,
        *,
        tenant: str,
        user: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationInfo:
        _rows.name(conversation, "conversation")
        _rows.name(user, "user")
        meta = json.loads(_rows.dumps(dict(metadata or {}), "metadata"))
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.ensure(conversation, tenant, user, meta)
            if self.s.made(conv):
                self.s.bump(conv)
            return conv.info()

    async def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            return None if conv is None else conv.info()

    async def list_conversations(
        self, *, tenant: str, user: str | None = None
    ) -> list[ConversationInfo]:
        with self.s.lock:
            self.s.open(tenant)
            found = [
                c.info()
                for (t, _), c in self.s.conversations.items()
                if t == tenant and (user is None or c.user == user)
            ]
        found.sort(key=lambda i: i.id)
        found.sort(key=lambda i: i.updated_at, reverse=True)
        return found

    async def version(self, conversation: str, *, tenant: str) -> int:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            return 0 if conv is None else conv.version

    async def delete_conversation(self, conversation: str, *, tenant: str) -> bool:
        _rows.name(conversation, "conversation")
        with self.s.lock:
            self.s.open(tenant)
            self.s.receipts.pop((tenant, conversation), None)
            return self.s.delete(tenant, conversation)

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
        _rows.name(conversation, "conversation")
        _rows.name(user, "user")
        if not isinstance(counter, str):
            raise ConfigError(f"counter must be a string, got {counter!r}")
        batch = _rows.prepare_messages(messages, tokens)
        refs = _rows.readback_refs(readback, batch)
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.ensure(conversation, tenant, user, {})
            now = self.s.now()
            seq = len(conv.messages)
            new: list[Stored] = []
            batch_ids: dict[str, Stored] = {}
            out: list[Message] = []
            for i, p in enumerate(batch):
                m = p.message
                known = batch_ids.get(m.id)
                if known is None and m.id in conv.ids:
                    known = conv.messages[conv.ids[m.id] - 1]
                if known is not None:
                    if (m.role, m.name, p.meta, p.parts) != (
                        known.message.role, known.message.name, known.meta, known.parts,
                    ):  # fmt: skip
                        raise InvalidMessageError(
                            f"messages[{i}].id",
                            f"message id {m.id!r} is already stored in conversation "
                            f"{conversation!r} (seq {known.message.seq}) with different content",
                        )
                    out.append(read_copy(known))
                    continue
                seq += 1
                created = now if m.created_at is None else m.created_at
                n = p.tokens
                stored = Stored(
                    m._stamped(seq, created), n, counter if n is not None else "", p.size,
                    p.meta, p.parts,
                )  # fmt: skip
                new.append(stored)
                batch_ids[m.id] = stored
                out.append(read_copy(stored))
            for stored in new:  # every check passed: now change
                conv.ids[stored.message.id] = stored.message.seq or 0
                conv.messages.append(stored)
                conv.token_total += stored.tokens or 0
            if new:
                conv.updated_at = now
            self.s.put_refs(conv, now, [(out[i].seq or 0, c, k, t) for i, c, k, t in refs])
            if new or refs or self.s.made(conv):
                self.s.bump(conv)
            return Written(out, conv.version)

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
        n = None if limit is None else _rows.count(limit, "limit")
        found = self.s.messages(conversation, tenant, after_seq, upto_seq)
        if newest_first:
            found = found[::-1]
        return [read_copy(s) for s in found[:n]]

    async def read_tail(
        self,
        conversation: str,
        *,
        tenant: str,
        max_tokens: int,
        after_seq: int = 0,
        counter: str = "",
    ) -> list[Message]:
        budget = _rows.count(max_tokens, "max_tokens")
        found = self.s.messages(conversation, tenant, after_seq, None)
        spent, first = 0, len(found)
        for i in range(len(found) - 1, -1, -1):
            s = found[i]
            known = s.tokens is not None and s.counter == counter
            cost = s.tokens if known and s.tokens is not None else _rows.estimate(
                s.tokens, s.size, s.message.role
            )  # fmt: skip
            if spent + cost > budget:
                break
            spent += cost
            first = i
        return [read_copy(s) for s in found[first:]]

    async def read_outline(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[MessageOutline]:
        return [outline(s) for s in self.s.messages(conversation, tenant, after_seq, upto_seq)]

    async def token_total(
        self, conversation: str, *, tenant: str, after_seq: int = 0
    ) -> tuple[int, int]:
        found = self.s.messages(conversation, tenant, after_seq, None)
        return len(found), sum(s.tokens or 0 for s in found)

    async def count_messages(
        self, conversation: str, *, tenant: str, role: str | None = None
    ) -> int:
        found = self.s.messages(conversation, tenant, 0, None)
        return sum(1 for s in found if role is None or s.message.role == role)

    async def message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        seqs: Sequence[int],
        counter: str | None = None,
    ) -> dict[int, int]:
        wanted = {_rows.count(s, f"seqs[{i}]") for i, s in enumerate(seqs)}
        return {
            s.message.seq or 0: s.tokens
            for s in self.s.messages(conversation, tenant, 0, None)
            if s.message.seq in wanted
            and s.tokens is not None
            and (counter is None or s.counter == counter)
        }

    async def set_message_tokens(
        self,
        conversation: str,
        *,
        tenant: str,
        counts: Mapping[int, int],
        counter: str,
        readback: Sequence[Readback] = (),
    ) -> int:
        if not isinstance(counter, str):
            raise ConfigError(f"counter must be a string, got {counter!r}")
        refs: list[Readback] = []
        for j, ref in enumerate(readback):
            if not isinstance(ref, tuple) or len(ref) != 4 or ref[0] not in counts:
                raise InvalidMessageError(
                    f"readback[{j}]", "must be a tuple (seq, call_id, key, ttl) of a counted seq"
                )
            seq, call_id, key, ttl = ref
            _rows.name(key, "key")
            refs.append((seq, call_id, key, ttl_seconds(ttl)))
        updates = {
            _rows.count(seq, f"counts[{seq!r}]", minimum=1): _rows.count(n, f"counts[{seq}]")
            for seq, n in counts.items()
        }
        with self.s.lock:
            self.s.open(tenant)
            if not updates:
                conv = self.s.find(tenant, conversation)
                return 0 if conv is None else conv.version
            conv = self.s.resolve(tenant, conversation)
            for seq in updates:
                if seq > len(conv.messages):
                    raise InvalidMessageError(f"counts[{seq}]", "no stored message has this seq")
            for seq, n in updates.items():
                # replaced, not changed: a read outside the lock keeps a consistent copy
                s = conv.messages[seq - 1]
                conv.token_total += n - (s.tokens or 0)
                conv.messages[seq - 1] = replace(s, tokens=n, counter=counter)
            self.s.put_refs(conv, self.s.now(), refs)
            return self.s.bump(conv)
