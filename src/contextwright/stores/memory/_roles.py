"""The in-memory backend's roles beside its conversation log: summaries and the
compaction log, working memory, pins and search (see ``_memory.py``).

Each role is a small class over the shared `MemoryState`; their checks are the
SQLite store's (``_rows.py``), so the same bad input raises the same error.
Search is a plain scan scoring the query's terms (``text/_query.py`` `message_units`: words,
CJK bigrams and runs) by how rare they are among the candidates: it finds what
the SQLite backend finds for unstemmed words; its scores are its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..._errors import ConfigError, InvalidMessageError, StoreError, SummaryConflictError
from ...model._messages import ROLES
from ...text._query import message_units as query_units
from ...text._terms import INDEX_WORD as WORD
from .._contract import Written
from .._records import (
    CompactionEntry,
    MessageOutline,
    PinnedItem,
    SearchHit,
    Summary,
    WorkingItem,
)
from ..sqlite import _rows
from ..sqlite._fts import index_text
from ._state import (
    Conversation,
    MemoryState,
    Stored,
    Working,
    outline,
    read_copy,
    stored_result,
    ttl_seconds,
)

__all__ = ["MemoryMessageSearch", "MemoryPins", "MemorySummaryLog", "MemoryWorkingMemory"]

_NOT_TOOL = ("system", "developer", "user", "assistant")  # what search_outlines searches


class MemorySummaryLog:
    """`SummaryLog` and `CompactionLog` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    def _next_summary(self, conv: Conversation, summary: Summary, expected: int | None) -> Summary:
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
        self, conv: Conversation, entry: CompactionEntry, summaries: int
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
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.resolve(tenant, summary.conversation)
            saved = self._next_summary(conv, summary, expected)
            conv.summaries.append(saved)
            return Written(saved, self.s.bump(conv))

    async def latest_summary(self, conversation: str, *, tenant: str) -> Summary | None:
        found = await self.summaries(conversation, tenant=tenant)
        return found[-1] if found else None

    async def summaries(self, conversation: str, *, tenant: str) -> list[Summary]:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            return [] if conv is None else list(conv.summaries)

    async def log_compaction(
        self, entry: CompactionEntry, *, tenant: str
    ) -> Written[CompactionEntry]:
        _rows.compaction_row(entry)
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.resolve(tenant, entry.conversation)
            logged = replace(
                self._next_entry(conv, entry, len(conv.summaries)), id=next(self.s.ids)
            )
            conv.compactions.append(logged)
            return Written(logged, self.s.bump(conv))

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
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.resolve(tenant, summary.conversation)
            saved = self._next_summary(conv, summary, expected)
            checked = self._next_entry(
                conv, replace(entry, summary_version=saved.version), len(conv.summaries) + 1
            )
            logged = replace(checked, id=next(self.s.ids))
            conv.summaries.append(saved)
            conv.compactions.append(logged)
            return Written((saved, logged), self.s.bump(conv))

    async def compactions(self, conversation: str, *, tenant: str) -> list[CompactionEntry]:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            return [] if conv is None else list(conv.compactions)


class MemoryWorkingMemory:
    """`WorkingMemory` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

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
        seconds = ttl_seconds(ttl)
        decoded = json.loads(_rows.dumps(dict(meta or {}), "meta"))
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.resolve(tenant, conversation)
            now = self.s.now()
            item = WorkingItem(key, conversation, content, now, now + seconds, decoded)
            conv.working[key] = Working(item)
            return Written(item, self.s.bump(conv))

    async def get_working(self, conversation: str, key: str, *, tenant: str) -> WorkingItem | None:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            found = None if conv is None else conv.working.get(key)
            if conv is None or found is None or not found.item.expires_at > self.s.now():
                return None
            if found.ref is None:
                return found.item
            seq, call_id = found.ref
            if not 1 <= seq <= len(conv.messages):
                return None
            content = stored_result(conv.messages[seq - 1].message, call_id)
            return None if content is None else replace(found.item, content=content)

    async def collect_working(self, *, now: float | None = None) -> int:
        if self.s.closed:
            raise StoreError(f"{self!r} is closed")
        with self.s.lock:
            when = self.s.now() if now is None else now
            removed = 0
            for conv in self.s.conversations.values():
                gone = [k for k, w in conv.working.items() if w.item.expires_at <= when]
                for k in gone:
                    del conv.working[k]
                if gone:
                    removed += len(gone)
                    self.s.bump(conv)
            return removed


class MemoryPins:
    """`Pins` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def pin(
        self, conversation: str, content: str, *, tenant: str, priority: int = 0
    ) -> Written[PinnedItem]:
        if not isinstance(content, str):
            raise InvalidMessageError("content", f"must be a string, got {type(content).__name__}")
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigError(f"priority must be an integer, got {priority!r}")
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.resolve(tenant, conversation)
            item = PinnedItem(next(self.s.ids), conversation, content, int(priority), self.s.now())
            conv.pins[item.id] = item
            return Written(item, self.s.bump(conv))

    async def unpin(self, conversation: str, pin_id: int, *, tenant: str) -> Written[bool]:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            if conv is None:
                return Written(False, 0)
            if conv.pins.pop(pin_id, None) is None:
                return Written(False, conv.version)
            return Written(True, self.s.bump(conv))

    async def pinned(self, conversation: str, *, tenant: str) -> list[PinnedItem]:
        with self.s.lock:
            self.s.open(tenant)
            conv = self.s.find(tenant, conversation)
            pins = [] if conv is None else list(conv.pins.values())
        return sorted(pins, key=lambda p: (p.priority, p.id))


class MemoryMessageSearch:
    """`MessageSearch` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

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
        return [SearchHit(read_copy(s), score) for s, score in found]

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
        wanted = _NOT_TOOL if roles is None else roles
        found = self._search(conversation, query, tenant, limit, before_seq, wanted)
        return [(s.message.seq or 0, score) for s, score in found]

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
        if isinstance(known, str) or not isinstance(known, Container):
            raise InvalidMessageError("known", f"must hold sequence numbers, got {known!r}")
        reach = _rows.count(around, "around")
        budget = None if match_budget is None else _rows.count(match_budget, "match_budget")
        found = self._search(conversation, query, tenant, limit, before_seq, _NOT_TOOL, budget)
        hits = [(s.message.seq or 0, score) for s, score in found]
        if not hits:
            return hits, []
        upto = None if before_seq is None else before_seq - 1
        below = self.s.messages(conversation, tenant, 0, upto)
        top = len(below)  # the last seq searched
        wanted: set[int] = set()
        for seq, _ in hits:
            wanted.update(range(max(1, seq - reach), min(top, seq + reach) + 1))
        return hits, [outline(below[q - 1]) for q in sorted(wanted) if q not in known]

    async def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> list[str]:
        return sorted(
            {
                s.message.name
                for s in self.s.messages(conversation, tenant, after_seq, upto_seq)
                if s.message.name is not None and s.message.role in ("user", "assistant")
            }
        )

    async def optimize_index(self) -> None:
        """Nothing to do (there is no index); refused once closed, as every call."""
        with self.s.lock:
            if self.s.closed:
                raise StoreError(f"{self.s!r} is closed")

    def _search(
        self,
        conversation: str,
        query: str,
        tenant: str,
        limit: int,
        before_seq: int | None,
        roles: Sequence[str],
        budget: int | None = None,
    ) -> list[tuple[Stored, float]]:
        """The best ``limit`` matches; with ``budget``, only the rarest terms whose
        matches add up to at most that many (as the SQLite backend's ``match_budget``)."""
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
            for s in self.s.messages(conversation, tenant, 0, None)
            if (s.message.seq or 0) < upper and s.message.role in roles
        ]
        if not units or n == 0 or not pool:
            return []
        texts = [index_text(s.message).casefold() for s in pool]
        words = [set(WORD.findall(t)) for t in texts]

        def hit(i: int, kind: str, term: str) -> bool:
            return term in words[i] if kind == "word" else term in texts[i]

        holding = [[i for i in range(len(pool)) if hit(i, kind, term)] for kind, term in units]
        if budget is not None:  # rarest first, then the query's order
            kept: set[int] = set()
            spent = 0
            for df, u in sorted((len(h), u) for u, h in enumerate(holding)):
                if spent + df > budget:
                    break
                spent += df
                kept.add(u)
            holding = [h for u, h in enumerate(holding) if u in kept]
        scored = [0.0] * len(pool)
        for having in holding:
            weight = math.log(1 + len(pool) / len(having)) if having else 0.0
            for i in having:
                scored[i] += weight
        ranked = sorted(
            (i for i in range(len(pool)) if scored[i] > 0),
            key=lambda i: (-scored[i], -(pool[i].message.seq or 0)),
        )
        return [(pool[i], scored[i]) for i in ranked[:n]]
