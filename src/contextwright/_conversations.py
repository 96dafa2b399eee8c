"""Stateful mode: conversations kept in a store, built against by id.

`Conversations` puts a `ContextEngine` on top of a `Store`. Messages are appended
once, with a sequence number and their prompt cost; each build reads only what is
new since the last one, so a turn costs the same in a conversation of 100 messages
and of 100,000 (issue 3):

* an in-process *tail* per conversation holds the newest messages after the
  summary boundary, enough to fill the largest window; a build asks the store
  for messages after the tail's last sequence number (usually none or one) and
  never re-reads the thread;
* the running token total and the stored per-message counts answer "how big is
  the live conversation" without counting anything again;
* large tool results are compressed for the prompt when they are appended, the
  original offloaded to working memory behind a read-back pointer
  (`ToolResultCompressor`); the stored message itself stays verbatim.

Summaries are incremental (previous summary + the messages since it) and are
made in the background: a build never waits for one unless the conversation is
over the hard compaction threshold. A routine summary covers what has left the
window; `compact` (soft: background, hard: before the build returns) follows seed
004 and keeps only the last N messages out of it. Nothing is ever deleted: the
summary replaces old messages in the prompt only, every version is kept, and
the originals stay searchable — the recall source brings exact old turns back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._budget import Budget
from ._engine import ContextEngine
from ._errors import InvalidMessageError, StoreError, UserError
from ._messages import Message, ToolResultPart
from ._receipt import BuiltContext
from ._tokens import DEFAULT_OVERHEAD, count_message
from .history import (
    CompactionCheck,
    CompactionConfig,
    CompactionResult,
    OutlineSummarizer,
    RankWeights,
    RecallSource,
    RuleSummarizer,
    Summarizer,
    ToolResultCompressor,
    TurnRanker,
    check,
    plan_compaction,
    readback_page,
    summary_boundary,
)
from .storage import AsyncStore, CompactionEntry, MessageOutline, SQLiteStore, Store, Summary

__all__ = ["Conversations", "MemoryFlush"]

T = TypeVar("T")
# A tool result to offload: (working-memory key, call id, original text, ttl).
Offload = tuple[str, str, str, float]
_NO_OFFLOADS: tuple[Offload, ...] = ()

# Called with (tenant, user, conversation, messages about to leave the prompt);
# returns how many memories it wrote. The memory part plugs its extractor in here.
MemoryFlush = Callable[[str, str, str, Sequence[Message]], Awaitable[int]]


@dataclass
class _Tail:
    """The newest prompt-ready messages of one conversation, and where they stand."""

    messages: deque[Message] = field(default_factory=deque)
    tokens: int = 0  # sum of the prompt costs of ``messages``
    last_seq: int = 0  # newest seq this process has seen
    user_turns: int = 0
    total_tokens: int = 0  # stored prompt cost of the whole conversation (running sum)
    covered_tokens: int = 0  # of that, what the summary covers
    summary: Summary | None = None
    # Background summaries adopt their result from another thread.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[list[Message], int, Summary | None]:
        with self.lock:
            return list(self.messages), self.user_turns, self.summary

    @property
    def boundary(self) -> int:
        return self.summary.upto_seq if self.summary else 0

    @property
    def unsummarized_tokens(self) -> int:
        return max(0, self.total_tokens - self.covered_tokens)


class _Calls(AsyncStore):
    """The store as coroutines: on a worker thread, or inline on the sync API's own loop.

    The sync facades (`Conversations.build_sync`…) drive a private event loop that
    nothing else runs on, so blocking it blocks no one: there each call runs at
    once on the caller's thread. That saves a thread hop per call and, above all,
    the GIL hand-offs that made a turn's time jump by milliseconds when the main
    thread and the worker both ran Python. Any other loop (the caller's, the
    background summaries') gets the worker thread, so it never blocks.
    """

    def __init__(self, store: Store, owner: Conversations) -> None:
        super().__init__(store)
        self._owner = owner

    async def _run(self, call: Callable[[], T]) -> T:
        if self._owner._inline():
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            return call()
        return await super()._run(call)


class _Background:
    """One daemon thread with an event loop for summaries, so sync callers get them too."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self.pending: set[concurrent.futures.Future[Any]] = set()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="contextwright-bg", daemon=True
                ).start()
                self._loop = loop
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self.pending.add(fut)
        fut.add_done_callback(self.pending.discard)
        return fut

    def wait(self, timeout: float | None = None) -> None:
        concurrent.futures.wait(list(self.pending), timeout=timeout)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None


class Conversations:
    """Conversations persisted in ``store`` and built with ``engine``.

    ``store`` is a `Store` (or a path for an `SQLiteStore`). ``summarizer`` defaults
    to the rule summariser; ``memory_flush`` runs on messages about to be
    summarised away. ``window_tokens`` bounds the in-process tail (default: the
    engine's budget).
    """

    def __init__(
        self,
        engine: ContextEngine,
        store: Store | str | None = None,
        *,
        compaction: CompactionConfig | None = None,
        summarizer: Summarizer | None = None,
        compressor: ToolResultCompressor | None = None,
        memory_flush: MemoryFlush | None = None,
        window_tokens: int | None = None,
        recall: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if store is None or isinstance(store, str):
            store = SQLiteStore(store or ":memory:")
        self.engine = engine
        self.store: Store = store
        self.db: AsyncStore = _Calls(store, self)
        self.compaction = compaction or CompactionConfig()
        self.summarizer = summarizer or RuleSummarizer(engine.counter)
        self.compressor = compressor or ToolResultCompressor(engine.counter)
        self.memory_flush = memory_flush
        budget = engine.budget.input_tokens if engine.budget is not None else None
        self.window_tokens = window_tokens or budget or 32_000
        self.clock = clock
        self._tails: dict[tuple[str, str], _Tail] = {}
        self._bg = _Background()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_lock = threading.Lock()
        self._jobs: dict[tuple[str, str], concurrent.futures.Future[None]] = {}
        # The stateful default recalls sparingly, so that a turn stays cheap however
        # long the conversation: a few dozen full-text hits, no second (feedback)
        # search, and only the rarest words, up to 100 matching turns in all (BM25
        # scores every match, a few microseconds each: common words made the
        # search grow with the conversation). The memory-QA configuration
        # (`RecallSource.for_memory_qa`) spends more.
        cheap = TurnRanker(RankWeights(feedback_weight=0.0))
        recall_source = RecallSource(
            store=self.db, search_limit=32, ranker=cheap, match_budget=100,
            counter=engine.counter,
        )  # fmt: skip
        self._extra = [recall_source] if recall else []

    def _inline(self) -> bool:
        """Whether this runs on the sync API's private loop (store calls run inline there)."""
        return self._loop is not None and asyncio.get_running_loop() is self._loop

    # -- writing ---------------------------------------------------------------------

    def _view(self, message: Message) -> tuple[Message, Sequence[Offload]]:
        """The prompt view of a message (tool results compressed) and what to offload."""
        if message.role != "tool":
            return message, _NO_OFFLOADS
        parts: list[ToolResultPart] = []
        offloads: list[Offload] = []
        changed = False
        for p in message.tool_results:
            if not isinstance(p.content, str):
                parts.append(p)
                continue
            c = self.compressor.compress(p.content, tool=p.name, key=f"tool:{p.call_id}")
            if c.changed:
                changed = True
                parts.append(ToolResultPart(p.call_id, c.text, p.is_error, p.name))
                if c.offload_key and c.original is not None:
                    ttl = self.compressor.policy(p.name).ttl
                    offloads.append((c.offload_key, p.call_id, c.original, ttl))
            else:
                parts.append(p)
        if not changed:
            return message, _NO_OFFLOADS
        meta = {**message.metadata, "compressed_view": True}
        return message.replace(parts=tuple(parts), metadata=meta), offloads

    def _prepare(
        self, messages: Sequence[Message] | Message
    ) -> tuple[list[Message], list[tuple[Message, Sequence[Offload]]], list[int]]:
        """Validate, make the prompt views and count them: the pure half of an append."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        for i, m in enumerate(batch):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"messages[{i}]", f"must be a Message, got {type(m).__name__}"
                )
        views = [self._view(m) for m in batch]
        counter, ov = self.engine.counter, self.engine.overhead
        return batch, views, [count_message(counter, v, ov) for v, _ in views]

    def _store(
        self,
        conversation: str,
        batch: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
        tenant: str,
        user: str,
    ) -> list[Message]:
        """Store a prepared batch and its offloaded tool results, on the calling thread.

        A batch without offloads is a plain `Store.append`. With offloads, an
        `SQLiteStore` keeps the messages and their read-back keys in one
        transaction (``append_with_readback``), the keys referring to the stored
        tool results (the store already keeps them verbatim: no second copy);
        another `Store` gets the originals with `put_working`, one call each,
        after the messages.
        """
        counter = self.engine.counter.name
        store = self.store
        readback = [
            (i, call_id, key, ttl)
            for i, (_, offloads) in enumerate(views)
            for key, call_id, _, ttl in offloads
        ]
        if readback and isinstance(store, SQLiteStore):
            return store.append_with_readback(
                conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter,
                readback=readback,
            )  # fmt: skip
        stored = store.append(
            conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter
        )
        for _, offloads in views:
            for key, _, original, ttl in offloads:
                store.put_working(
                    conversation, key, original, tenant=tenant, ttl=ttl, meta={"kind": "tool_result"}
                )
        return stored

    def _grow_tail(
        self,
        conversation: str,
        tenant: str,
        stored: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
    ) -> None:
        """Add freshly stored messages to the tail, if nobody else wrote in between.

        Only the newest messages that fit the tail's limit stay in it, so only
        those get a prompt copy: a bulk batch of 1,000 used to copy and push all
        1,000 and pop most of them again. The running totals count every message.
        The result is what `_push`-ing them one by one would leave.
        """
        tail = self._tails.get((tenant, conversation))
        if tail is None or not stored or tail.last_seq != (stored[0].seq or 0) - 1:
            return
        limit = 2 * self.window_tokens
        counter, ov = self.engine.counter, self.engine.overhead
        key = counter.name if ov is DEFAULT_OVERHEAD else f"{counter.name}|{ov!r}"
        n = len(stored)
        start, acc = n - 1, tokens[-1]
        while start > 0 and acc + tokens[start - 1] <= limit:
            start -= 1
            acc += tokens[start]
        kept: list[Message] = []
        for j in range(start, n):
            saved, view = stored[j], views[j][0]
            # An unchanged message is its own view, and the store's copy of it (same
            # parts) is that view with seq and created_at: no copy needed.
            if view.parts is not saved.parts:
                saved = view._stamped(saved.seq or 0, saved.created_at)
            saved._token_cache[key] = tokens[j]  # popping it later needs no recount
            kept.append(saved)
        with tail.lock:
            last = tail.last_seq
            for saved, cost in zip(stored, tokens, strict=True):
                seq = saved.seq or 0
                if seq > last:
                    tail.total_tokens += cost
                    last = seq
                if saved.role == "user":
                    tail.user_turns += 1
            tail.last_seq = last
            if start > 0:  # the batch alone fills the tail: nothing older stays
                tail.messages.clear()
                tail.tokens = 0
            while tail.messages and tail.tokens + acc > limit:
                old = tail.messages.popleft()
                tail.tokens -= count_message(counter, old, ov)
            tail.messages.extend(kept)
            tail.tokens += acc

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str = "default",
        user: str = "anonymous",
    ) -> list[Message]:
        """Store ``messages`` (oldest first); returns them with their sequence numbers."""
        batch, views, tokens = self._prepare(messages)
        # one hop to the store's worker for the messages and their read-back keys
        # (AsyncStore._run is what its own methods use)
        stored = await self.db._run(
            functools.partial(self._store, conversation, batch, views, tokens, tenant, user)
        )
        self._grow_tail(conversation, tenant, stored, views, tokens)
        if len(stored) >= self.compaction.summary_message_threshold:
            # a bulk import: summarise what is outside the window now, in the
            # background, so the first build does not have to
            tail = await self._tail(conversation, tenant)
            if self._check(tail, None).summary_due:
                self._schedule(conversation, tenant, user, routine=True)
        return stored

    def _push(self, tail: _Tail, message: Message, cost: int) -> None:
        limit = 2 * self.window_tokens  # enough for the largest window, with room to spare
        counter, ov = self.engine.counter, self.engine.overhead
        with tail.lock:
            tail.messages.append(message)
            tail.tokens += cost
            if (message.seq or 0) > tail.last_seq:
                tail.total_tokens += cost
            tail.last_seq = max(tail.last_seq, message.seq or 0)
            if message.role == "user":
                tail.user_turns += 1
            while tail.tokens > limit and len(tail.messages) > 1:
                old = tail.messages.popleft()
                tail.tokens -= count_message(counter, old, ov)

    # -- reading -------------------------------------------------------------------------

    async def _tail(self, conversation: str, tenant: str) -> _Tail:
        """The conversation's tail, brought up to date with the store (O(new messages))."""
        key = (tenant, conversation)
        tail = self._tails.get(key)
        info = await self.db.get_conversation(conversation, tenant=tenant)
        if tail is None:
            tail = _Tail()
            if info is not None:
                # Cold start (once per conversation per process): the summary, the
                # newest messages after it, and the number of user turns so far.
                tail.summary = await self.db.latest_summary(conversation, tenant=tenant)
                msgs = await self.db.read_tail(
                    conversation, tenant=tenant, max_tokens=2 * self.window_tokens,
                    after_seq=tail.boundary, counter=self.engine.counter.name,
                )  # fmt: skip
                users = await self.db.count_messages(conversation, tenant=tenant, role="user")
                before = users - sum(1 for m in msgs if m.role == "user")
                covered = await self._covered_tokens(
                    conversation, tenant, tail.summary, info.token_total
                )
                self._absorb(tail, msgs)
                with tail.lock:
                    tail.user_turns += before
                    tail.last_seq = info.last_seq
                    tail.total_tokens = info.token_total
                    tail.covered_tokens = covered
            self._tails[key] = tail
            return tail
        if info is not None and info.last_seq > tail.last_seq:
            # another process wrote: take its messages and any newer summary
            new = await self.db.read(conversation, tenant=tenant, after_seq=tail.last_seq)
            self._absorb(tail, new)
            with tail.lock:
                tail.total_tokens = info.token_total
            latest = await self.db.latest_summary(conversation, tenant=tenant)
            if latest is not None and (
                tail.summary is None or latest.version != tail.summary.version
            ):
                self._apply_summary(tail, latest)
        return tail

    async def _covered_tokens(
        self, conversation: str, tenant: str, summary: Summary | None, total: int
    ) -> int:
        """Stored tokens of the messages a summary covers (recorded with it in its meta)."""
        if summary is None:
            return 0
        recorded = summary.meta.get("covered_tokens")
        if isinstance(recorded, int):
            return recorded
        _, after = await self.db.token_total(
            conversation, tenant=tenant, after_seq=summary.upto_seq
        )
        return max(0, total - after)

    def _absorb(self, tail: _Tail, messages: Sequence[Message]) -> None:
        counter, ov = self.engine.counter, self.engine.overhead
        for m in messages:
            view, _ = self._view(m)
            self._push(tail, view, count_message(counter, view, ov))

    def _apply_summary(self, tail: _Tail, summary: Summary) -> None:
        """Adopt a new summary: drop tail messages it covers."""
        counter, ov = self.engine.counter, self.engine.overhead
        with tail.lock:
            if tail.summary is not None and tail.summary.version >= summary.version:
                return
            tail.summary = summary
            recorded = summary.meta.get("covered_tokens")
            if isinstance(recorded, int):
                tail.covered_tokens = recorded
            while tail.messages and (tail.messages[0].seq or 0) <= summary.upto_seq:
                old = tail.messages.popleft()
                tail.tokens -= count_message(counter, old, ov)

    async def build(
        self,
        conversation: str,
        message: str | Message,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
        store_message: bool = True,
        **kw: Any,
    ) -> BuiltContext:
        """Build the context for a new user ``message`` in ``conversation``.

        The message is stored first (``store_message``), so it is never lost. Extra
        keywords go to `ContextEngine.build` (state, locale, provider…).
        """
        current = self.engine._current(message)
        tail = await self._tail(conversation, tenant)
        urgency = self._check(tail, budget)
        compacted: CompactionResult | None = None
        running = self._jobs.get((tenant, conversation))
        if urgency.urgency in ("hard", "emergency") and running is not None:
            await asyncio.wrap_future(running)  # the same work is already under way
            urgency = self._check(tail, budget)
        if urgency.urgency in ("hard", "emergency"):
            compacted = await self._compact(conversation, tenant, user, tail, urgency, wait=True)
        history, turns, summary_rec = tail.snapshot()
        summary = summary_rec.content if summary_rec else None
        # The new message is stored while the context is built (the store works on
        # its own thread), so a turn pays for one of the two, not both; under the
        # sync API the store runs inline, so it is simply stored first.
        storing: asyncio.Future[list[Message]] | None = None
        if store_message and self._inline():
            await self.append(conversation, [current], tenant=tenant, user=user)
        elif store_message:
            storing = asyncio.ensure_future(
                self.append(conversation, [current], tenant=tenant, user=user)
            )
        try:
            built = await self.engine.build(
                current, history=history, budget=budget, summary=summary, tenant=tenant,
                user=user, conversation=conversation, user_turns=turns, extra_sources=self._extra, **kw,
            )  # fmt: skip
        finally:
            if storing is not None:
                await storing
        built.report.compaction = {
            "urgency": urgency.urgency,
            "live_tokens": urgency.current_tokens,
        }
        if compacted is not None:
            built.report.compaction.update(
                performed=compacted.applied, strategies=list(compacted.strategies),
                tokens_before=compacted.tokens_before_compaction,
                tokens_after=compacted.tokens_after_compaction, summary_version=compacted.summary_version,
            )  # fmt: skip
        if urgency.summary_due or urgency.urgency == "soft":
            self._schedule(conversation, tenant, user, routine=urgency.urgency == "none")
        return built

    def _check(self, tail: _Tail, budget: Budget | int | None) -> CompactionCheck:
        """How big the live conversation is (summary + everything after it), O(tail).

        No emergency zone here: the window already keeps every build within its
        budget; the zone (seed 000 §6.2) is for callers who send whole histories.
        """
        messages, _, summary = tail.snapshot()
        summary_tokens = summary.tokens if summary else 0
        unsummarized = tail.unsummarized_tokens
        window = self._window_allowance(budget)
        outside = max(0, unsummarized - window)
        outside_msgs = 0
        acc = 0
        counter, ov = self.engine.counter, self.engine.overhead
        for i in range(len(messages) - 1, -1, -1):  # newest first, until the window is full
            acc += count_message(counter, messages[i], ov)
            if acc > window:
                outside_msgs = i + 1
                break
        if unsummarized > tail.tokens:  # older unsummarised messages than the tail holds
            outside_msgs = max(outside_msgs, self.compaction.summary_message_threshold)
        return check(
            self.compaction, live_tokens=summary_tokens + unsummarized,
            unsummarized_messages=outside_msgs, unsummarized_tokens=outside,
        )  # fmt: skip

    def _budget_tokens(self, budget: Budget | int | None) -> int | None:
        if isinstance(budget, int):
            return budget
        if isinstance(budget, Budget):
            return budget.input_tokens
        return self.engine.budget.input_tokens if self.engine.budget else None

    def _window_allowance(self, budget: Budget | int | None) -> int:
        total = self._budget_tokens(budget) or self.window_tokens
        b = budget if isinstance(budget, Budget) else self.engine.budget or Budget(total)
        return int(total * b.weights()["recent"])

    # -- summaries and compaction --------------------------------------------------------

    def _schedule(self, conversation: str, tenant: str, user: str, *, routine: bool) -> None:
        """Summarise in the background, once per conversation at a time."""
        key = (tenant, conversation)
        if key in self._jobs:
            return
        tail = self._tails[key]

        async def job() -> None:
            try:
                await self._compact(
                    conversation, tenant, user, tail, None, wait=False, routine=routine,
                    prompt=False,
                )  # fmt: skip
            finally:
                self._jobs.pop(key, None)

        self._jobs[key] = self._bg.submit(job())

    async def _compact(
        self, conversation: str, tenant: str, user: str, tail: _Tail, urgency: CompactionCheck | None,
        *, wait: bool, routine: bool = False, preview: bool = False, force: bool = False,
        explicit: bool = False, prompt: bool = True,
    ) -> CompactionResult:  # fmt: skip
        """Summarise early turns into a new summary version and log it.

        The plan needs only the stored outlines (`Store.read_outline`: counts, roles,
        tool-call units). Messages are read in full only where they are used: any
        without a stored count by this counter, what the summariser reads — the
        newest turns for an `OutlineSummarizer` (the rules), everything covered for
        another one or for the memory flush — and, with ``prompt``, the kept ones
        (a background job drops its result: its ``compacted_messages`` hold only the
        summary). Decoding every stored message, its tool results above all, was
        most of a compaction's cost.
        """
        counter = self.engine.counter
        with tail.lock:  # one snapshot: a summary adopted meanwhile must not be counted twice
            before_summary, covered_before = tail.summary, tail.covered_tokens
        after = before_summary.upto_seq if before_summary else 0
        outline = await self.db.read_outline(conversation, tenant=tenant, after_seq=after)
        n = len(outline)
        full: dict[int, Message] = {}  # by index in outline
        unknown = next((i for i, o in enumerate(outline) if self._stored_cost(o) is None), n)
        await self._read_full(conversation, tenant, outline, full, unknown, n)
        costs = self._costs(outline, full)
        summary_tokens = before_summary.tokens if before_summary else 0
        if urgency is None:
            urgency = check(
                self.compaction, live_tokens=summary_tokens + sum(costs),
                unsummarized_messages=len(outline), unsummarized_tokens=sum(costs),
            )  # fmt: skip
        if routine:
            # a routine summary covers what has left the window, keeping the recent N
            window, acc, keep = self._window_allowance(None), 0, 0
            for c in reversed(costs):
                acc += c
                if acc > window:
                    break
                keep += 1
            keep = max(keep, self.compaction.keep_recent_messages)
            cut = summary_boundary(outline, keep)
            strategies: tuple[str, ...] = ("summarize_early_turns",) if cut else ()
            notes: tuple[str, ...] = (f"routine summary of {cut} message(s) outside the window",)
        else:
            # a tool message's size is the length of its text
            compressed = sum(
                1
                for o, c in zip(outline, costs, strict=True)
                if o.role == "tool" and c < o.size // 8
            )
            plan = plan_compaction(
                self.compaction, outline, costs, summary_tokens=summary_tokens,
                compressed_tool_results=compressed, urgency=urgency.urgency, force_summary=force,
            )  # fmt: skip
            cut, strategies, notes = plan.summarize_count, plan.strategies, plan.notes
        flush = (
            cut > 0
            and self.memory_flush is not None
            and self.compaction.memory_flush_enabled
            and not preview
        )
        outliner = self.summarizer if isinstance(self.summarizer, OutlineSummarizer) else None
        # the first message the summariser (or the flush) reads in full
        first = cut - outliner.full_messages([o.role for o in outline[:cut]]) if outliner else 0
        first = 0 if flush else first
        await self._read_full(conversation, tenant, outline, full, first, n if prompt else cut)
        flushed = 0
        if flush and self.memory_flush is not None:
            try:
                covered = [full[i] for i in range(cut)]
                flushed = await self.memory_flush(tenant, user, conversation, covered)
            except Exception as exc:  # a failing hook must not block compaction
                notes = (*notes, f"memory flush failed: {type(exc).__name__}: {exc}")
        content = before_summary.content if before_summary else ""
        method = before_summary.method if before_summary else ""
        new_summary: Summary | None = None
        if cut:
            kw: dict[str, Any] = {
                "previous": content or None,
                "max_tokens": self.compaction.summary_max_tokens,
                "locale": "auto",
            }
            newest = [full[i] for i in range(first, cut)]
            runner = (
                outliner.summarize_outlined(outline[:first], newest, **kw)
                if outliner is not None and not flush
                else self.summarizer.summarize(newest, **kw)  # first is 0 here
            )
            draft = await (asyncio.wrap_future(self._bg.submit(runner)) if wait else runner)
            content, method = draft.content, draft.method
            new_summary = Summary(
                conversation, 0, before_summary.from_seq if before_summary else outline[0].seq,
                outline[cut - 1].seq, content, counter.count(content), method, self.clock(),
                {"messages": draft.messages, "covered_tokens": covered_before + sum(costs[:cut])},
            )  # fmt: skip
        kept_views = [self._view(full[i])[0] for i in range(cut, n)] if prompt else []
        new_tokens = (new_summary.tokens if new_summary else summary_tokens) + sum(costs[cut:])
        before_tokens = summary_tokens + sum(costs)
        version: int | None = None
        if new_summary is not None and not preview:
            entry = CompactionEntry(
                0, conversation, self.clock(), "routine" if routine else urgency.urgency, True,
                before_tokens, new_tokens, None, new_summary.upto_seq, strategies,
                {"notes": list(notes), "flushed_memories": flushed, "method": method},
            )  # fmt: skip
            # summary and log entry in one transaction: a crash leaves both or neither
            saved, _ = await self.db.save_compaction(new_summary, entry, tenant=tenant)
            version = saved.version
            self._apply_summary(tail, saved)
        elif explicit and not preview:
            entry = CompactionEntry(
                0, conversation, self.clock(), urgency.urgency, False, before_tokens, before_tokens,
                None, after, strategies, {"notes": list(notes), "reason": "nothing to summarise"},
            )  # fmt: skip
            await self.db.log_compaction(entry, tenant=tenant)
        shown = ([Message.system(content)] if content else []) + kept_views
        return CompactionResult(
            shown, content, n, n - cut, flushed, before_tokens, new_tokens,
            urgency.urgency, strategies, not preview and new_summary is not None, version,
            outline[cut - 1].seq if cut else None, method, notes,
        )  # fmt: skip

    def _stored_cost(self, o: MessageOutline) -> int | None:
        """The prompt cost stored with a message, if this counter made it."""
        if not o.counter or o.counter != self.engine.counter.name:
            return None
        return o.tokens if self.engine.overhead is DEFAULT_OVERHEAD else None

    def _costs(self, outline: Sequence[MessageOutline], full: dict[int, Message]) -> list[int]:
        """Prompt costs: the stored counts, else counted now (those messages are in ``full``)."""
        counter, ov = self.engine.counter, self.engine.overhead
        costs = []
        for i, o in enumerate(outline):
            cost = self._stored_cost(o)
            if cost is None:
                cost = count_message(counter, self._view(full[i])[0], ov)
            costs.append(cost)
        return costs

    async def _read_full(
        self, conversation: str, tenant: str, outline: Sequence[MessageOutline],
        full: dict[int, Message], start: int, stop: int,
    ) -> None:  # fmt: skip
        """Read into ``full`` the stored messages of ``outline[start:stop]`` it lacks."""
        missing = [i for i in range(start, stop) if i not in full]
        if not missing:
            return
        lo, hi = missing[0], missing[-1]
        more = await self.db.read(
            conversation, tenant=tenant, after_seq=outline[lo].seq - 1, upto_seq=outline[hi].seq
        )
        if [m.seq for m in more] != [o.seq for o in outline[lo : hi + 1]]:
            raise StoreError(f"the stored messages of {conversation!r} changed during a compaction")
        full.update(zip(range(lo, hi + 1), more, strict=True))

    async def compact(
        self, conversation: str, *, tenant: str = "default", user: str = "anonymous",
        preview: bool = False, force: bool = True,
    ) -> CompactionResult:  # fmt: skip
        """Compact now (``preview``: compute without writing). ``force`` summarises even under the soft threshold."""
        tail = await self._tail(conversation, tenant)
        if await self.db.get_conversation(conversation, tenant=tenant) is None:
            raise UserError(f"no conversation {conversation!r} for tenant {tenant!r}")
        running = self._jobs.get((tenant, conversation))
        if running is not None:
            # A background summary is under way (a bulk import schedules one): let it
            # land and compact what follows it. Racing it summarised the same messages
            # twice, each half slowed by the other, and could count them twice.
            await asyncio.wait([asyncio.wrap_future(running)])
        return await self._compact(
            conversation, tenant, user, tail, None, wait=True, preview=preview, force=force
        )

    async def check(
        self, conversation: str, *, tenant: str = "default", budget: Budget | int | None = None
    ) -> CompactionCheck:
        return self._check(await self._tail(conversation, tenant), budget)

    async def read_back(
        self, conversation: str, key: str, page: int = 1, *, tenant: str = "default"
    ) -> str:
        """The read-back tool's answer: a page of an offloaded tool result."""
        item = await self.db.get_working(conversation, key, tenant=tenant)
        if item is None:
            return f"[nothing stored under {key!r}: it may have expired]"
        return readback_page(item.content, page, self.engine.counter)

    async def wait_idle(self, timeout: float | None = 30.0) -> None:
        """Wait for background summaries (tests, shutdown)."""
        await asyncio.to_thread(self._bg.wait, timeout)

    # -- sync facade ---------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise UserError("this is the sync API; inside an event loop use the async methods")
        with self._sync_lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(coro)

    def append_sync(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str = "default",
        user: str = "anonymous",
    ) -> list[Message]:
        """`append` for code without an event loop.

        The batch goes straight to the store on the caller's thread (the store is
        thread-safe), skipping the event loop and the worker-thread hop: that hop
        was most of a small append's cost, and a bulk batch spent a quarter of its
        time waiting for it. A bulk batch then brings the tail up to date and
        schedules its background summary, as `append` does.
        """
        if isinstance(messages, Message):
            messages = [messages]
        bulk = len(messages) >= self.compaction.summary_message_threshold
        if bulk:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                raise UserError("this is the sync API; inside an event loop use the async methods")
        batch, views, tokens = self._prepare(messages)
        stored = self._store(conversation, batch, views, tokens, tenant, user)
        self._grow_tail(conversation, tenant, stored, views, tokens)
        if bulk and len(stored) >= self.compaction.summary_message_threshold:
            tail = self._run(self._tail(conversation, tenant))
            if self._check(tail, None).summary_due:
                self._schedule(conversation, tenant, user, routine=True)
        return stored

    def build_sync(self, conversation: str, message: str | Message, **kw: Any) -> BuiltContext:
        return self._run(self.build(conversation, message, **kw))

    def compact_sync(self, conversation: str, **kw: Any) -> CompactionResult:
        return self._run(self.compact(conversation, **kw))

    def wait_idle_sync(self, timeout: float | None = 30.0) -> None:
        self._bg.wait(timeout)

    def close(self) -> None:
        self._bg.wait(10.0)
        self._bg.close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        close = getattr(self.store, "close", None)
        if callable(close):
            close()
