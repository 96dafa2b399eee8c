"""`MemoryBackend`: the async store contract in plain dicts, for tests and embedding.

It keeps everything in process memory and forgets it on exit. It is the public
test double (``contextwright.testing``) and the proof that the contract
(``_contract.py``) is backend-neutral: it passes the same contract suite as the
SQLite backend. Input is checked by the same functions the SQLite store uses
(``_rows.py``), so the same bad input raises the same error, before anything changes.

Atomicity: every method does its checks first, then its changes, with no
``await`` in between, under one `threading.Lock` — the calls of one event loop
cannot interleave, and neither can those of several loops on several threads
(an `asyncio.Lock` belongs to one loop). Search is a plain scan scoring the
query's terms (``_fts.query_units``: words, CJK bigrams) by how rare they are;
it finds what the SQLite backend finds for unstemmed words, its scores differ.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._errors import ConfigError, InvalidMessageError, StoreError, SummaryConflictError
from .._messages import ROLES, Message, TextPart, ToolCallPart, ToolResultPart
from . import _rows
from ._base import (
    CompactionEntry,
    ConversationInfo,
    MessageOutline,
    PinnedItem,
    SearchHit,
    Summary,
    WorkingItem,
    not_owner,
)
from ._contract import Backend, Readback, Written
from ._fts import index_text, query_units

__all__ = ["MemoryBackend"]

_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class _Stored:
    message: Message  # seq and created_at set
    tokens: int | None
    counter: str
    size: int
    meta: str | None  # as _rows.PreparedMessage serialises them (for same_content)
    parts: str


@dataclass(slots=True)
class _Working:
    item: WorkingItem
    ref: tuple[int, str] | None = None  # (seq, call_id) of a stored tool result


@dataclass(slots=True)
class _Conversation:
    tenant: str
    id: str
    user: str
    created_at: float
    updated_at: float
    metadata: dict[str, Any]
    version: int = 0
    messages: list[_Stored] = field(default_factory=list)  # messages[i].seq == i + 1
    ids: dict[str, int] = field(default_factory=dict)  # message id -> seq
    token_total: int = 0
    summaries: list[Summary] = field(default_factory=list)
    compactions: list[CompactionEntry] = field(default_factory=list)
    working: dict[str, _Working] = field(default_factory=dict)
    pins: dict[int, PinnedItem] = field(default_factory=dict)

    def info(self) -> ConversationInfo:
        return ConversationInfo(
            self.id, self.tenant, self.user, self.created_at, self.updated_at,
            len(self.messages), len(self.messages), self.token_total, dict(self.metadata),
            self.version,
        )  # fmt: skip


def _ttl(ttl: object) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
    return float(ttl)


def _result(message: Message, call_id: str) -> str | None:
    for p in message.parts:
        if isinstance(p, ToolResultPart) and p.call_id == call_id and isinstance(p.content, str):
            return p.content
    return None


def _read(stored: _Stored) -> Message:
    """A fresh copy of a stored message, its token cache primed as the SQLite store does."""
    m = stored.message._stamped(stored.message.seq or 0, stored.message.created_at)
    if stored.tokens is not None and stored.counter:
        m._token_cache[stored.counter] = stored.tokens
    return m


def _outline(s: _Stored) -> MessageOutline:
    m = s.message
    text, calls = "", tuple[str, ...]()
    if m.role != "tool":
        text = "\n".join(p.text for p in m.parts if isinstance(p, TextPart))
        calls = tuple(p.name for p in m.parts if isinstance(p, ToolCallPart))
    return MessageOutline(
        m.seq or 0, m.role, s.tokens, s.counter, s.size, text, calls, m.name, m.created_at
    )


class MemoryBackend:
    """Every role of the store contract in process memory (see the module docstring).

    ``clock`` gives "now" in seconds since the epoch (timestamps, working-memory
    expiry). `backend` gives it as a `Backend`; after `aclose` every call raises
    `StoreError`.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._conversations: dict[tuple[str, str], _Conversation] = {}
        self._ids = itertools.count(1)  # compaction and pin ids, never reused
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryBackend({len(self._conversations)} conversations)"

    def backend(self) -> Backend:
        """This object in every role of a `Backend`."""
        return Backend.of(self)

    def _open(self, tenant: object) -> None:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        _rows.name(tenant, "tenant")

    def _find(self, tenant: str, conversation: object) -> _Conversation | None:
        if not isinstance(conversation, str):
            return None
        return self._conversations.get((tenant, conversation))

    def _resolve(self, tenant: str, conversation: str) -> _Conversation:
        conv = self._find(tenant, conversation)
        if conv is None:
            raise InvalidMessageError(
                "conversation",
                f"no conversation {conversation!r} in tenant {tenant!r}; "
                "create it with ensure_conversation or append",
            )
        return conv

    def _now(self) -> float:
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, (int, float)):
            raise ConfigError(f"the store's clock must return seconds, got {now!r}")
        return float(now)

    def _ensure(
        self, conversation: str, tenant: str, user: str, metadata: dict[str, Any]
    ) -> _Conversation:
        """The conversation (not yet registered if new: version 0); another user's raises."""
        conv = self._find(tenant, conversation)
        if conv is not None:
            if conv.user != user:
                raise not_owner(conversation, tenant, user)
            return conv
        now = self._now()
        return _Conversation(tenant, conversation, user, now, now, metadata)

    def _bump(self, conv: _Conversation) -> int:
        self._conversations[(conv.tenant, conv.id)] = conv
        conv.version += 1
        return conv.version

    # -- ConversationLog ---------------------------------------------------------------

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
        with self._lock:
            self._open(tenant)
            conv = self._ensure(conversation, tenant, user, meta)
            if conv.version == 0:
                self._bump(conv)
            return conv.info()

    async def get_conversation(self, conversation: str, *, tenant: str) -> ConversationInfo | None:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            return None if conv is None else conv.info()

    async def list_conversations(
        self, *, tenant: str, user: str | None = None
    ) -> list[ConversationInfo]:
        with self._lock:
            self._open(tenant)
            found = [
                c.info()
                for (t, _), c in self._conversations.items()
                if t == tenant and (user is None or c.user == user)
            ]
        found.sort(key=lambda i: i.id)
        found.sort(key=lambda i: i.updated_at, reverse=True)
        return found

    async def version(self, conversation: str, *, tenant: str) -> int:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            return 0 if conv is None else conv.version

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
        with self._lock:
            self._open(tenant)
            conv = self._ensure(conversation, tenant, user, {})
            now = self._now()
            seq = len(conv.messages)
            new: list[_Stored] = []
            batch_ids: dict[str, _Stored] = {}
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
                    out.append(_read(known))
                    continue
                seq += 1
                created = now if m.created_at is None else m.created_at
                n = p.tokens
                stored = _Stored(
                    m._stamped(seq, created), n, counter if n is not None else "", p.size,
                    p.meta, p.parts,
                )  # fmt: skip
                new.append(stored)
                batch_ids[m.id] = stored
                out.append(_read(stored))
            for stored in new:  # every check passed: now change
                conv.ids[stored.message.id] = stored.message.seq or 0
                conv.messages.append(stored)
                conv.token_total += stored.tokens or 0
            if new:
                conv.updated_at = now
            self._put_refs(conv, now, [(out[i].seq or 0, c, k, t) for i, c, k, t in refs])
            if new or refs or conv.version == 0:
                self._bump(conv)
            return Written(out, conv.version)

    def _put_refs(self, conv: _Conversation, now: float, refs: list[Readback]) -> None:
        for seq, call_id, key, ttl in refs:
            meta = {"kind": "tool_result", "stored_tool_result": {"call_id": call_id, "seq": seq}}
            item = WorkingItem(key, conv.id, "", now, now + ttl, meta)
            conv.working[key] = _Working(item, (seq, call_id))

    def _range(
        self, conversation: str, tenant: str, after_seq: int, upto_seq: int | None
    ) -> list[_Stored]:
        after = _rows.count(after_seq, "after_seq")
        upto = _rows.MAX_SEQ if upto_seq is None else _rows.count(upto_seq, "upto_seq")
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            if conv is None or after >= len(conv.messages):
                return []
            return conv.messages[after : min(upto, len(conv.messages))]

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
        found = self._range(conversation, tenant, after_seq, upto_seq)
        if newest_first:
            found = found[::-1]
        return [_read(s) for s in found[:n]]

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
        found = self._range(conversation, tenant, after_seq, None)
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
        return [_read(s) for s in found[first:]]

    async def read_outline(
        self,
        conversation: str,
        *,
        tenant: str,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> list[MessageOutline]:
        return [_outline(s) for s in self._range(conversation, tenant, after_seq, upto_seq)]

    async def token_total(
        self, conversation: str, *, tenant: str, after_seq: int = 0
    ) -> tuple[int, int]:
        found = self._range(conversation, tenant, after_seq, None)
        return len(found), sum(s.tokens or 0 for s in found)

    async def count_messages(
        self, conversation: str, *, tenant: str, role: str | None = None
    ) -> int:
        found = self._range(conversation, tenant, 0, None)
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
            for s in self._range(conversation, tenant, 0, None)
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
            refs.append((seq, call_id, key, _ttl(ttl)))
        updates = {
            _rows.count(seq, f"counts[{seq!r}]", minimum=1): _rows.count(n, f"counts[{seq}]")
            for seq, n in counts.items()
        }
        with self._lock:
            self._open(tenant)
            if not updates:
                conv = self._find(tenant, conversation)
                return 0 if conv is None else conv.version
            conv = self._resolve(tenant, conversation)
            for seq in updates:
                if seq > len(conv.messages):
                    raise InvalidMessageError(f"counts[{seq}]", "no stored message has this seq")
            for seq, n in updates.items():
                # replaced, not changed: a read outside the lock keeps a consistent copy
                s = conv.messages[seq - 1]
                conv.token_total += n - (s.tokens or 0)
                conv.messages[seq - 1] = replace(s, tokens=n, counter=counter)
            self._put_refs(conv, self._now(), refs)
            return self._bump(conv)

    # -- SummaryLog, CompactionLog -------------------------------------------------------

    def _next_summary(self, conv: _Conversation, summary: Summary, expected: int | None) -> Summary:
        """The summary as it would be saved next (checks only; nothing changes)."""
        version, _, upto, _, _, meta = _rows.summary_row(summary)
        last = len(conv.messages)
        prev = conv.summaries[-1] if conv.summaries else None
        nxt, floor = (1, 0) if prev is None else (prev.version + 1, prev.upto_seq)
        if expected is not None and expected != nxt - 1:
            if expected > nxt - 1:
                raise InvalidMessageError(
                    "expected", f"is {expected} but the latest summary version is {nxt - 1}"
                )
            assert prev is not None
            raise SummaryConflictError(upto, prev, expected=expected)
        if version not in (0, nxt):
            raise InvalidMessageError(
                "summary.version",
                f"is {version} but the next version is {nxt} (was another summary saved?)",
            )
        if upto > last:
            raise InvalidMessageError(
                "summary.upto_seq", f"is {upto} but the conversation's last seq is {last}"
            )
        if prev is not None and upto <= floor:
            raise SummaryConflictError(upto, prev)
        return replace(summary, version=nxt, meta=json.loads(meta))

    def _next_entry(
        self, conv: _Conversation, entry: CompactionEntry, summaries: int
    ) -> CompactionEntry:
        """The entry as it would be logged next (checks only; ``summaries`` versions exist)."""
        values = _rows.compaction_row(entry)
        if entry.upto_seq > len(conv.messages):
            raise InvalidMessageError(
                "entry.upto_seq",
                f"is {entry.upto_seq} but the conversation's last seq is {len(conv.messages)}",
            )
        v = entry.summary_version
        if v is not None and not 1 <= v <= summaries:
            raise InvalidMessageError("entry.summary_version", f"no summary version {v} is stored")
        return replace(entry, strategies=tuple(entry.strategies), detail=json.loads(values[-1]))

    async def save_summary(
        self, summary: Summary, *, tenant: str, expected: int | None = None
    ) -> Written[Summary]:
        if expected is not None:
            _rows.count(expected, "expected")
        _rows.summary_row(summary)
        with self._lock:
            self._open(tenant)
            conv = self._resolve(tenant, summary.conversation)
            saved = self._next_summary(conv, summary, expected)
            conv.summaries.append(saved)
            return Written(saved, self._bump(conv))

    async def latest_summary(self, conversation: str, *, tenant: str) -> Summary | None:
        found = await self.summaries(conversation, tenant=tenant)
        return found[-1] if found else None

    async def summaries(self, conversation: str, *, tenant: str) -> list[Summary]:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            return [] if conv is None else list(conv.summaries)

    async def log_compaction(
        self, entry: CompactionEntry, *, tenant: str
    ) -> Written[CompactionEntry]:
        _rows.compaction_row(entry)
        with self._lock:
            self._open(tenant)
            conv = self._resolve(tenant, entry.conversation)
            logged = replace(self._next_entry(conv, entry, len(conv.summaries)), id=next(self._ids))
            conv.compactions.append(logged)
            return Written(logged, self._bump(conv))

    async def save_compaction(
        self,
        summary: Summary,
        entry: CompactionEntry,
        *,
        tenant: str,
        expected: int | None = None,
    ) -> Written[tuple[Summary, CompactionEntry]]:
        if expected is not None:
            _rows.count(expected, "expected")
        _rows.summary_row(summary)
        _rows.compaction_row(entry)
        _rows.same_conversation(summary, entry)
        with self._lock:
            self._open(tenant)
            conv = self._resolve(tenant, summary.conversation)
            saved = self._next_summary(conv, summary, expected)
            checked = self._next_entry(
                conv, replace(entry, summary_version=saved.version), len(conv.summaries) + 1
            )
            logged = replace(checked, id=next(self._ids))
            conv.summaries.append(saved)
            conv.compactions.append(logged)
            return Written((saved, logged), self._bump(conv))

    async def compactions(self, conversation: str, *, tenant: str) -> list[CompactionEntry]:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            return [] if conv is None else list(conv.compactions)

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
        _rows.name(key, "key")
        if not isinstance(content, str):
            raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
        seconds = _ttl(ttl)
        decoded = json.loads(_rows.dumps(dict(meta or {}), "meta"))
        with self._lock:
            self._open(tenant)
            conv = self._resolve(tenant, conversation)
            now = self._now()
            item = WorkingItem(key, conversation, content, now, now + seconds, decoded)
            conv.working[key] = _Working(item)
            return Written(item, self._bump(conv))

    async def get_working(self, conversation: str, key: str, *, tenant: str) -> WorkingItem | None:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            found = None if conv is None else conv.working.get(key)
            if conv is None or found is None or not found.item.expires_at > self._now():
                return None
            if found.ref is None:
                return found.item
            seq, call_id = found.ref
            if not 1 <= seq <= len(conv.messages):
                return None
            content = _result(conv.messages[seq - 1].message, call_id)
            return None if content is None else replace(found.item, content=content)

    async def collect_working(self, *, now: float | None = None) -> int:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with self._lock:
            when = self._now() if now is None else now
            removed = 0
            for conv in self._conversations.values():
                gone = [k for k, w in conv.working.items() if w.item.expires_at <= when]
                for k in gone:
                    del conv.working[k]
                if gone:
                    removed += len(gone)
                    self._bump(conv)
            return removed

    async def pin(
        self, conversation: str, content: str, *, tenant: str, priority: int = 0
    ) -> Written[PinnedItem]:
        if not isinstance(content, str):
            raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigError(f"priority must be an integer, got {priority!r}")
        with self._lock:
            self._open(tenant)
            conv = self._resolve(tenant, conversation)
            item = PinnedItem(next(self._ids), conversation, content, int(priority), self._now())
            conv.pins[item.id] = item
            return Written(item, self._bump(conv))

    async def unpin(self, conversation: str, pin_id: int, *, tenant: str) -> Written[bool]:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            if conv is None:
                return Written(False, 0)
            if conv.pins.pop(pin_id, None) is None:
                return Written(False, conv.version)
            return Written(True, self._bump(conv))

    async def pinned(self, conversation: str, *, tenant: str) -> list[PinnedItem]:
        with self._lock:
            self._open(tenant)
            conv = self._find(tenant, conversation)
            pins = [] if conv is None else list(conv.pins.values())
        return sorted(pins, key=lambda p: (p.priority, p.id))

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
        found = self._search(conversation, query, tenant, limit, before_seq, roles)
        return [SearchHit(_read(s), score) for s, score in found]

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
        wanted = ("system", "developer", "user", "assistant") if roles is None else roles
        found = self._search(conversation, query, tenant, limit, before_seq, wanted)
        return [(s.message.seq or 0, score) for s, score in found]

    def _search(
        self,
        conversation: str,
        query: str,
        tenant: str,
        limit: int,
        before_seq: int | None,
        roles: Sequence[str],
    ) -> list[tuple[_Stored, float]]:
        n = _rows.count(limit, "limit")
        bad = [r for r in roles if r not in ROLES]
        if isinstance(roles, str) or bad:
            raise ConfigError(f"roles must be a sequence of {', '.join(ROLES)}; got {roles!r}")
        if not isinstance(query, str):
            raise InvalidMessageError("query", f"must be a string, got {type(query).__name__}")
        upper = _rows.MAX_SEQ if before_seq is None else _rows.count(before_seq, "before_seq")
        units = [(kind, text.casefold()) for kind, text in query_units(query)]
        pool = [
            s
            for s in self._range(conversation, tenant, 0, None)
            if (s.message.seq or 0) < upper and s.message.role in roles
        ]
        if not units or n == 0 or not pool:
            return []
        texts = [index_text(s.message).casefold() for s in pool]
        words = [set(_WORD.findall(t)) for t in texts]

        def hit(i: int, kind: str, term: str) -> bool:
            return term in words[i] if kind == "word" else term in texts[i]

        scored = [0.0] * len(pool)
        for kind, term in units:
            having = [i for i in range(len(pool)) if hit(i, kind, term)]
            weight = math.log(1 + len(pool) / len(having)) if having else 0.0
            for i in having:
                scored[i] += weight
        ranked = sorted(
            (i for i in range(len(pool)) if scored[i] > 0),
            key=lambda i: (-scored[i], -(pool[i].message.seq or 0)),
        )
        return [(pool[i], scored[i]) for i in ranked[:n]]

    # -- lifetime --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Forget nothing, accept nothing more: later calls raise `StoreError` (idempotent)."""
        self._closed = True
