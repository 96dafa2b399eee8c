"""Stateful mode: conversations kept in a store, built against by id.

`Conversations` puts a `ContextEngine` on top of a `Store`. Messages are appended
once, with a sequence number and their prompt cost; each build reads only what is
new since the last one, so a turn costs the same in a conversation of 100 messages
and of 100,000:

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
window; `compact` (soft: background, hard: before the build returns; docs/design-notes.md,
Compaction) keeps only the last N messages out of it. Nothing is ever deleted: the
summary replaces old messages in the prompt only, every version is kept, and
the originals stay searchable — the recall source brings exact old turns back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from .._errors import ConfigError, InvalidMessageError, UserError
from ..budget._budget import Budget
from ..history import (
    CompactionCheck,
    CompactionConfig,
    CompactionResult,
    RankWeights,
    RecallSource,
    RuleSummarizer,
    Summarizer,
    ToolResultCompressor,
    TurnRanker,
    check,
    readback_page,
    summary_boundary,
)
from ..model._messages import Message, ToolResultPart
from ..pipeline._engine import ContextEngine
from ..pipeline._receipt import BuiltContext
from ..stores import AsyncStore, CompactionEntry, ConversationInfo, SQLiteStore, Store, Summary
from ..stores._records import not_owner
from ..tokens._count import count_message
from ._compact import MemoryFlush, Offload, _CompactionMixin, _Written
from ._tail import Background, StoreCalls, Tail, TailCache

__all__ = ["Conversations", "MemoryFlush"]

T = TypeVar("T")
_NO_OFFLOADS: tuple[Offload, ...] = ()
# More new messages than this from another process, and a tail is read afresh (as
# at a cold start) instead of taking in every one of them.
_RELOAD_AFTER = 256


def _check_owner(tail: Tail, conversation: str, tenant: str, user: str) -> None:
    """`InvalidMessageError` (``user``) if the conversation is known to be another user's."""
    if tail.owner is not None and tail.owner != user:
        raise not_owner(conversation, tenant, user)


class Conversations(_CompactionMixin):
    """Conversations persisted in ``store`` and built with ``engine``.

    ``store`` is a `Store` (or a path for an `SQLiteStore`). ``summarizer`` defaults
    to the rule summariser; ``memory_flush`` runs on messages about to be
    summarised away. ``window_tokens`` bounds the in-process tail (default: the
    engine's budget).

    ``max_cached_conversations`` bounds the conversations whose tail is kept in
    process (least recently used evicted first; default 1,024): memory stays flat
    however many conversations one process serves. A tail holds up to twice the
    window, typically tens of kilobytes; an evicted conversation's next build
    reads it from the store again (one cold start) and builds the same context.
    `cache_sizes` says what is held. The other per-conversation caches are bounded
    too: recall's turn indexes (`RecallSource.max_conversations`), the engine's
    window memos and shortened messages.

    Call `close` when done. At interpreter exit, background summaries still
    running get a few seconds and are otherwise abandoned whole (see
    `Background`): the next build that finds one due makes it.
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
        max_cached_conversations: int = 1024,
    ) -> None:
        if (
            isinstance(max_cached_conversations, bool)
            or not isinstance(max_cached_conversations, int)
            or max_cached_conversations < 1
        ):
            raise ConfigError(
                "max_cached_conversations must be a positive integer, "
                f"got {max_cached_conversations!r}"
            )
        if store is None or isinstance(store, str):
            store = SQLiteStore(store or ":memory:")
        self.engine = engine
        self.store: Store = store
        self.db: AsyncStore = StoreCalls(store, self._inline)
        self.compaction = compaction or CompactionConfig()
        self.summarizer = summarizer or RuleSummarizer(engine.counter)
        self.compressor = compressor or ToolResultCompressor(engine.counter)
        self.memory_flush = memory_flush
        budget = engine.budget.input_tokens if engine.budget is not None else None
        self.window_tokens = window_tokens or budget or 32_000
        self.clock = clock
        self._tails = TailCache(max_cached_conversations, self._busy)
        self._change_token: Callable[[], tuple[int, int]] | None = getattr(
            store, "change_token", None
        )
        self._bg = Background()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_lock = threading.Lock()
        self._jobs: dict[tuple[str, str], concurrent.futures.Future[None]] = {}
        # conversations whose background summary is to give way to a forced compaction
        self._yield_to: set[tuple[str, str]] = set()
        # The stateful default recalls sparingly, so that a turn stays cheap however
        # long the conversation: a few dozen full-text hits, no second (feedback)
        # search, and only the rarest terms, up to 200 postings in all (BM25 scores
        # every match: common words made the search grow with the conversation;
        # on LoCoMo's old evidence turns, 568 of 1,079 come back with 200, 570
        # with every term, 561 with 100: `bench_recall_default.py`). The memory-QA configuration
        # (`RecallSource.for_memory_qa`) spends more.
        cheap = TurnRanker(RankWeights(feedback_weight=0.0))
        recall_source = RecallSource(
            store=self.db, search_limit=32, ranker=cheap, match_budget=200,
            counter=engine.counter,
        )  # fmt: skip
        self._extra = [recall_source] if recall else []
        self._recall = recall_source if recall else None
        self._indexing: set[tuple[str, str]] = set()  # conversations with an index job pending

    def _busy(self, key: tuple[str, str]) -> bool:
        """Whether a background summary of the conversation is under way (its tail stays)."""
        job = self._jobs.get(key)
        return job is not None and not job.done()

    def cache_sizes(self) -> dict[str, int]:
        """How many conversations each in-process cache holds now (all bounded).

        ``tails`` (at most ``max_cached_conversations``, plus any with a background
        summary under way), ``recall_indexes`` (at most the recall source's
        ``max_conversations``), ``window_memos`` (the engine's), ``jobs`` (background
        summaries under way).
        """
        return {
            "tails": len(self._tails),
            "recall_indexes": len(self._recall._indexes) if self._recall is not None else 0,
            "window_memos": len(self.engine._memos),
            "jobs": sum(1 for j in list(self._jobs.values()) if not j.done()),
        }

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
        self, messages: Sequence[Message] | Message, count: bool = True
    ) -> tuple[list[Message], list[tuple[Message, Sequence[Offload]]], list[int]]:
        """Validate, make the prompt views and count them: the pure half of an append.

        ``count=False`` only validates (views and counts come back empty).
        """
        batch = [messages] if isinstance(messages, Message) else list(messages)
        for i, m in enumerate(batch):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"messages[{i}]", f"must be a Message, got {type(m).__name__}"
                )
        if not count:
            return batch, [], []
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
    ) -> tuple[list[Message], _Written]:
        """Store a prepared batch and its offloaded tool results, on the calling thread.

        A batch without offloads is a plain `Store.append`. With offloads, an
        `SQLiteStore` keeps the messages and their read-back keys in one
        transaction (``append_with_readback``), the keys referring to the stored
        tool results (the store already keeps them verbatim: no second copy);
        another `Store` gets the originals with `put_working`, one call each,
        after the messages. Also returns the store's change tokens around that one
        transaction, when it has them (see `_tail`).
        """
        counter = self.engine.count_key
        store = self.store
        readback = [
            (i, call_id, key, ttl)
            for i, (_, offloads) in enumerate(views)
            for key, call_id, _, ttl in offloads
        ]
        if readback and isinstance(store, SQLiteStore):
            stored = store.append_with_readback(
                conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter,
                readback=readback,
            )  # fmt: skip
        else:
            stored = store.append(
                conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter
            )
            self._put_originals(conversation, tenant, views)  # none for an SQLiteStore
        return stored, self._written()

    def _save_compaction(
        self, summary: Summary, entry: CompactionEntry, tenant: str
    ) -> tuple[Summary, _Written]:
        """`Store.save_compaction` on the calling thread, and the change tokens around it."""
        saved, _ = self.store.save_compaction(summary, entry, tenant=tenant)
        return saved, self._written()

    def _written(self) -> _Written:
        """The store's change tokens around this thread's last write, if it has them."""
        store = self.store
        return store.last_write_tokens() if isinstance(store, SQLiteStore) else None

    def _put_originals(
        self, conversation: str, tenant: str, views: Sequence[tuple[Message, Sequence[Offload]]]
    ) -> None:
        """Offloaded tool results as working-memory copies: for a `Store` that cannot
        keep read-back keys to its stored messages (an `SQLiteStore` can)."""
        for _, offloads in views:
            for key, _, original, ttl in offloads:
                self.store.put_working(
                    conversation, key, original, tenant=tenant, ttl=ttl,
                    meta={"kind": "tool_result"},
                )  # fmt: skip

    def _grow_tail(
        self,
        conversation: str,
        tenant: str,
        user: str,
        stored: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
        first: int = 0,
        written: _Written = None,
    ) -> None:
        """Add freshly stored messages to the tail, if nobody else wrote in between.

        ``written`` are the store's change tokens around the write that stored
        them: a tail that was current just before it stays current after it.

        ``views`` and ``tokens`` belong to ``stored[first:]``; the messages before
        ``first`` were stored uncounted by a bulk import (see `_settle`), which
        counted enough of the newest ones to fill the tail. Only the newest
        messages that fit the tail's limit stay in it, so only those get a prompt
        copy: a bulk batch of 1,000 used to copy and push all 1,000 and pop most of
        them again. The running totals count every counted message, as the store's
        do. The result is what `_push`-ing them one by one would leave.
        """
        tail = self._tails.get((tenant, conversation))
        if tail is None or not stored:
            return
        with tail.lock:  # the store took them for ``user``: it owns the conversation
            tail.owner = user
        if tail.last_seq != (stored[0].seq or 0) - 1:
            return
        limit = 2 * self.window_tokens
        key = self.engine.count_key
        counted = stored[first:]
        n = len(counted)
        start, acc = n - 1, tokens[-1]
        while start > 0 and acc + tokens[start - 1] <= limit:
            start -= 1
            acc += tokens[start]
        kept: list[Message] = []
        for j in range(start, n):
            saved, view = counted[j], views[j][0]
            # An unchanged message is its own view, and the store's copy of it (same
            # parts) is that view with seq and created_at: no copy needed.
            if view.parts is not saved.parts:
                saved = view._stamped(saved.seq or 0, saved.created_at)
            saved._token_cache[key] = tokens[j]  # popping it later needs no recount
            kept.append(saved)
        users = sum(1 for m in stored if m.role == "user")
        with tail.lock:
            tail.synced = written[1] if written and tail.synced == written[0] else None
            last = tail.last_seq
            for saved, cost in zip(counted, tokens, strict=True):
                seq = saved.seq or 0
                if seq > last:
                    tail.total_tokens += cost
                    last = seq
            tail.last_seq = max(last, stored[-1].seq or 0)
            tail.user_turns += users
            if start > 0 or first > 0:  # the batch alone fills the tail: nothing older stays
                tail.messages.clear()
                tail.costs.clear()
                tail.tokens = 0
            while tail.messages and tail.tokens + acc > limit:
                tail.messages.popleft()
                tail.tokens -= tail.costs.popleft()
            tail.messages.extend(kept)
            tail.costs.extend(tokens[start:])
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
        return await self._append(conversation, messages, tenant, user, index_later=True)

    async def _append(
        self,
        conversation: str,
        messages: Sequence[Message],
        tenant: str,
        user: str,
        *,
        index_later: bool,
    ) -> list[Message]:
        """`append`; ``index_later`` brings recall's turn index up to date in the
        background (see `_index_later`): not for a build's own message, whose turn
        is still being built."""
        stored = await self._write(conversation, messages, tenant, user)
        if len(stored) >= self.compaction.summary_message_threshold:
            await self._summarise_if_due(conversation, tenant, user)
        elif index_later:
            self._index_later(conversation, tenant)
        return stored

    def _index_later(self, conversation: str, tenant: str) -> None:
        """Index the conversation's new turns for recall on the background thread.

        An append that is not a build's own message (the assistant's reply, a tool
        result) usually ends a turn: the conversation waits for the user. The turns
        stored since recall last looked are indexed then, so that the next build
        finds its index up to date instead of indexing them on its own time (about
        a tenth of a default build at 10,000 messages). Only a conversation whose
        index is in memory and at most a few turns behind is caught up (see
        `RecallSource.catch_up`); one job per conversation is pending at a time.
        A build that comes first indexes what is missing itself, as before.
        """
        recall = self._recall
        key = (tenant, conversation)
        if recall is None or key in self._indexing or not recall.has_index(conversation, tenant):
            return
        self._indexing.add(key)

        async def job() -> None:
            self._indexing.discard(key)  # an append from now on schedules another
            tail = self._tails.get(key)
            recent = tail.snapshot()[0] if tail is not None else []
            await recall.catch_up(conversation, tenant, recent)

        self._bg.submit(job())

    async def _write(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str
    ) -> list[Message]:
        """Prepare, store (one transaction) and add to the tail: one batch of an append."""
        batch, views, tokens = self._prepare(messages)
        # one hop to the store's worker for the messages and their read-back keys
        # (AsyncStore._run is what its own methods use)
        stored, written = await self.db._run(
            functools.partial(self._store, conversation, batch, views, tokens, tenant, user)
        )
        self._grow_tail(conversation, tenant, user, stored, views, tokens, written=written)
        return stored

    async def _write_uncounted(
        self, conversation: str, messages: list[Message], tenant: str, user: str
    ) -> list[Message]:
        """Store a batch of a bulk import without counts or prompt views (see `_settle`)."""
        batch, _, _ = self._prepare(messages, count=False)
        return await self.db._run(
            functools.partial(
                self.store.append, conversation, batch, tenant=tenant, user=user,
                tokens=None, counter="",
            )
        )  # fmt: skip

    def _count_newest(
        self, messages: Sequence[Message]
    ) -> tuple[int, list[tuple[Message, Sequence[Offload]]], list[int]]:
        """(first, views, counts) of ``messages[first:]``: the newest that fill the tail.

        Counting goes newest first and stops at the first message that does not fit
        (counted too: it took counting to know), so it reaches everything a window
        or the tail can hold.
        """
        limit = 2 * self.window_tokens
        counter, ov = self.engine.counter, self.engine.overhead
        views: list[tuple[Message, Sequence[Offload]]] = []
        tokens: list[int] = []
        acc, first = 0, len(messages)
        while first > 0 and acc <= limit:
            first -= 1
            view = self._view(messages[first])
            cost = count_message(counter, view[0], ov)
            views.append(view)
            tokens.append(cost)
            acc += cost
        views.reverse()
        tokens.reverse()
        return first, views, tokens

    def _store_counts(
        self,
        conversation: str,
        tenant: str,
        messages: Sequence[Message],
        views: Sequence[tuple[Message, Sequence[Offload]]],
        tokens: Sequence[int],
    ) -> None:
        """Store counts (and read-back keys) for stored messages that lacked them, on the calling thread."""
        counts = {m.seq or 0: n for m, n in zip(messages, tokens, strict=True)}
        refs = [
            (m.seq or 0, call_id, key, ttl)
            for m, (_, offloads) in zip(messages, views, strict=True)
            for key, call_id, _, ttl in offloads
        ]
        store, name = self.store, self.engine.count_key
        if isinstance(store, SQLiteStore):
            store.set_message_tokens_with_readback(
                conversation, tenant=tenant, counts=counts, counter=name, readback=refs
            )
            return
        store.set_message_tokens(conversation, tenant=tenant, counts=counts, counter=name)
        self._put_originals(conversation, tenant, views)

    async def _settle(
        self, conversation: str, tenant: str, user: str, stored: list[Message]
    ) -> None:
        """Count what a bulk import stored uncounted, as far as the tail reaches.

        A long import is stored without counts or prompt views: almost all of it is
        summarised away at once and never sent, and counting and viewing it was
        about half of the import's time. The newest messages that fill the tail (twice the window)
        are counted here, their counts and read-back keys stored in one more
        transaction, and the tail grows with them. The others stay uncounted: they
        are not in the conversation's ``token_total`` (nor in the ``covered_tokens``
        of the summary that covers them), and a compaction that needs one counts it
        then.
        """
        name = self.engine.count_key
        # a retry returns what an earlier run stored (and counted): not written again
        counted = {id(m) for m in stored if name in m._token_cache}
        first, views, tokens = self._count_newest(stored)
        newest = stored[first:]
        pending = [
            (m, v, n) for m, v, n in zip(newest, views, tokens, strict=True) if id(m) not in counted
        ]
        if pending:
            ms, vs, ns = zip(*pending, strict=True)
            await self.db._run(
                functools.partial(self._store_counts, conversation, tenant, ms, vs, ns)
            )
        self._grow_tail(conversation, tenant, user, stored, views, tokens, first)

    async def _summarise_if_due(self, conversation: str, tenant: str, user: str) -> None:
        """After a bulk write: summarise what is outside the window now, in the
        background, so that the first build does not have to. Below the summary
        triggers too if the tail could not hold all that is not summarised: a bulk
        import leaves those messages uncounted, for this summary to cover."""
        tail = await self._tail(conversation, tenant, user)
        with tail.lock:
            past_tail = tail.last_seq - tail.boundary > len(tail.messages)
        if past_tail or self._check(tail, None).summary_due:
            self._schedule(conversation, tenant, user, routine=True)

    async def import_messages(
        self,
        conversation: str,
        messages: Iterable[Message],
        *,
        tenant: str = "default",
        user: str = "anonymous",
        batch_size: int = 1000,
        progress: Callable[[int], object] | None = None,
        optimize_index: bool = False,
    ) -> list[Message]:
        """Append a long history (oldest first) in batches; returns the stored messages.

        Each batch of ``batch_size`` is one transaction, as `append` of it would
        be, and ``progress`` is called with the number of messages after each.
        Unlike a loop of `append` calls, the summary of what lies outside the
        window is scheduled once, at the end, instead of after every batch while
        the next one is being written. A failure leaves the batches before it
        stored; importing the same messages (same ids) again skips those.

        An import of more than one batch stores its messages without token counts
        or tool-result views, then counts the newest ones that fill the tail (twice
        the window) and stores those counts and read-back keys in one more
        transaction (`_settle`). The rest is what the summary scheduled at the end
        covers; it is never sent, and counting and viewing it was about half the
        import's time. Those
        messages stay uncounted in the store: they are not in ``token_total``, and
        anything that needs their count later (a cold start that finds them in
        its tail, a compaction that keeps them) counts them then. Nothing is lost:
        they are stored, searchable and summarised like any other.
        ``optimize_index`` then indexes what was stored for full-text search and
        merges the index (`SQLiteStore.optimize_search_index`: the whole file's,
        so for large imports; the CLI's ``import`` does it). Without it the
        messages are indexed when the conversation is first searched
        (`Store.search`; recall keeps its own index in process).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(messages, Message):
            raise InvalidMessageError("messages", "must be an iterable of Message, got one Message")
        stored: list[Message] = []
        it = iter(messages)
        chunk = list(itertools.islice(it, batch_size))
        deferred = False
        try:
            while chunk:
                after = list(itertools.islice(it, batch_size))
                if after or deferred:
                    # more than one batch: stored uncounted, the newest counted at the end
                    deferred = True
                    stored += await self._write_uncounted(conversation, chunk, tenant, user)
                else:  # a single batch is counted and stored as `append` would
                    stored += await self._write(conversation, chunk, tenant, user)
                if progress is not None:
                    progress(len(chunk))
                chunk = after
        except BaseException:
            if deferred and stored:  # what was stored still gets its tail counted
                with contextlib.suppress(Exception):
                    await self._settle(conversation, tenant, user, stored)
            raise
        if deferred:
            await self._settle(conversation, tenant, user, stored)
        optimize = getattr(self.store, "optimize_search_index", None)
        if stored and optimize_index and optimize is not None:
            await self.db._run(optimize)
        if stored:
            await self._summarise_if_due(conversation, tenant, user)
        return stored

    def _push(self, tail: Tail, message: Message, cost: int) -> None:
        limit = 2 * self.window_tokens  # enough for the largest window, with room to spare
        with tail.lock:
            tail.messages.append(message)
            tail.costs.append(cost)
            tail.tokens += cost
            if (message.seq or 0) > tail.last_seq:
                tail.total_tokens += cost
            tail.last_seq = max(tail.last_seq, message.seq or 0)
            if message.role == "user":
                tail.user_turns += 1
            while tail.tokens > limit and len(tail.messages) > 1:
                tail.messages.popleft()
                tail.tokens -= tail.costs.popleft()

    # -- reading -------------------------------------------------------------------------

    async def _tail(self, conversation: str, tenant: str, user: str) -> Tail:
        """The conversation's tail, up to date, for ``user`` only.

        Every public method that reads or writes a stored conversation starts
        here (`append` and `import_messages` are refused by the store as well): a
        conversation belongs to the user who first wrote to it, and anyone else
        gets `InvalidMessageError` (``user``, `_check_owner`) before anything of
        it is read or written. The tail learns its owner before any message
        enters it; see `_owned` for one that knows none yet.
        """
        tail = await self._synced_tail(conversation, tenant)
        _check_owner(tail, conversation, tenant, user)
        return tail

    async def _owned(self, tail: Tail, conversation: str, tenant: str, user: str) -> None:
        """`_tail`'s check again, after reading, for a tail that knew no owner.

        Such a tail had nothing of the conversation when `_tail` checked it, but
        another process may have made the conversation since: what was read from
        the store for it (recall's turns, a read-back) is only handed out after
        this has asked the store whose the conversation is now.
        """
        if tail.owner is None:
            info = await self.db.get_conversation(conversation, tenant=tenant)
            if info is not None:
                with tail.lock:
                    tail.owner = info.user
        _check_owner(tail, conversation, tenant, user)

    async def _synced_tail(self, conversation: str, tenant: str) -> Tail:
        """The conversation's tail, brought up to date with the store (O(new messages)).

        With a store that has change tokens (`SQLiteStore.change_token`), a tail
        that was current at the store's present token is returned as it is: nothing
        was written since, by this process or another, so the conversation need
        not be asked for. Its own appends keep it current (`_grow_tail`).
        """
        key = (tenant, conversation)
        tail = self._tails.get(key)
        token: tuple[int, int] | None = None
        if self._change_token is not None:
            token = await self.db._run(self._change_token)
            if tail is not None and tail.synced == token:
                return tail
        info = await self.db.get_conversation(conversation, tenant=tenant)
        if tail is None:
            tail = Tail()
            if info is not None:
                # cold start (once per conversation per process)
                tail.owner = info.user
                await self._load_tail(tail, conversation, tenant, info)
            self._tails.put(key, tail)
            tail.synced = token  # if the load wrote counts, the token moved on: checked again
            return tail
        with tail.lock:
            tail.synced = None  # until brought up to date below
            if info is not None:
                tail.owner = info.user
        if info is not None and info.last_seq > tail.last_seq:
            if info.last_seq - tail.last_seq > _RELOAD_AFTER:
                # Much was written elsewhere (another process imported, say): read
                # the tail afresh, as a new process would, instead of every message.
                await self._load_tail(tail, conversation, tenant, info)
                tail.synced = token
                return tail
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
        with tail.lock:
            tail.synced = token
        return tail

    async def _load_tail(
        self, tail: Tail, conversation: str, tenant: str, info: ConversationInfo
    ) -> None:
        """(Re)fill ``tail`` from the store: the summary, the newest messages after it, totals."""
        summary = await self.db.latest_summary(conversation, tenant=tenant)
        msgs = await self.db.read_tail(
            conversation, tenant=tenant, max_tokens=2 * self.window_tokens,
            after_seq=summary.upto_seq if summary else 0, counter=self.engine.count_key,
        )  # fmt: skip
        users = await self.db.count_messages(conversation, tenant=tenant, role="user")
        before = users - sum(1 for m in msgs if m.role == "user")
        covered = await self._covered_tokens(conversation, tenant, summary, info.token_total)
        with tail.lock:
            newer = (
                tail.summary
                if tail.summary and summary and tail.summary.version > summary.version
                else None
            )
            tail.messages.clear()
            tail.costs.clear()
            tail.tokens = tail.user_turns = tail.last_seq = 0
            tail.summary = summary
        # Messages stored with no count (a bulk import cut short before its newest
        # were counted) are counted now, and those counts stored.
        uncounted = [m for m in msgs if not m._token_cache]
        absorbed = self._absorb(tail, msgs, uncounted)
        added = 0
        if absorbed:
            ms, vs, ns = zip(*absorbed, strict=True)
            await self.db._run(
                functools.partial(self._store_counts, conversation, tenant, ms, vs, ns)
            )
            added = sum(ns)
        with tail.lock:
            tail.user_turns += before
            tail.last_seq = max(tail.last_seq, info.last_seq)
            tail.total_tokens = info.token_total + added
            tail.covered_tokens = covered
        if newer is not None:  # adopted meanwhile by a background summary of this process
            self._apply_summary(tail, newer)

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

    def _absorb(
        self, tail: Tail, messages: Sequence[Message], report: Sequence[Message] = ()
    ) -> list[tuple[Message, tuple[Message, Sequence[Offload]], int]]:
        """Push stored ``messages`` (their views) onto the tail; returns
        ``(message, (view, offloads), cost)`` of those that are in ``report``."""
        counter, ov = self.engine.counter, self.engine.overhead
        wanted = {id(m) for m in report}
        out: list[tuple[Message, tuple[Message, Sequence[Offload]], int]] = []
        for m in messages:
            made = self._view(m)
            cost = count_message(counter, made[0], ov)
            self._push(tail, made[0], cost)
            if id(m) in wanted:
                out.append((m, made, cost))
        return out

    def _apply_summary(self, tail: Tail, summary: Summary, written: _Written = None) -> None:
        """Adopt a new summary: drop tail messages it covers.

        ``written`` are the store's change tokens around the write that saved it,
        when this process saved it: a tail that was current just before that write
        stays current (see `_tail`), so the next build need not ask the store.
        """
        with tail.lock:
            if written and tail.synced == written[0]:
                tail.synced = written[1]
            if tail.summary is not None and tail.summary.version >= summary.version:
                return
            tail.summary = summary
            recorded = summary.meta.get("covered_tokens")
            if isinstance(recorded, int):
                tail.covered_tokens = recorded
            while tail.messages and (tail.messages[0].seq or 0) <= summary.upto_seq:
                tail.messages.popleft()
                tail.tokens -= tail.costs.popleft()

    async def build(
        self,
        conversation: str,
        message: str | Message | None,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
        store_message: bool = True,
        **kw: Any,
    ) -> BuiltContext:
        """Build the context for a new user ``message`` in ``conversation``.

        The message is stored (``store_message``) once the context is built, so a
        call that raises — a bad message or budget, a protected zone that does not
        fit — stores nothing and may simply be retried. Extra keywords go to
        `ContextEngine.build` (state, locale, provider…). With ``message`` None, or
        a tool-role message (stored first, whatever ``store_message`` says, as it
        belongs to the history), the build is the agent's next step after the
        stored tool results (see `ContextEngine.build`).

        A first build that would leave out history no summary covers yet
        summarises it before it returns, as a conversation over its hard threshold
        is compacted; later summaries are made in the background.

        A conversation belongs to the user who first wrote to it: a build by anyone
        else raises `InvalidMessageError` (``user``), with ``store_message=False``
        too, and nothing of the conversation is read or written for them.
        """
        # Everything that can be checked before the build is, before anything is
        # written (a compaction below writes a summary).
        current, _ = self.engine._precheck(
            message, budget, tenant=tenant, user=user, conversation=conversation
        )
        if isinstance(message, Message) and message.role == "tool":
            # refused before it is stored unless it completes the last tool call
            owned = await self._tail(conversation, tenant, user)
            self.engine._next_step(message, owned.snapshot()[0])
            await self._append(conversation, [message], tenant, user, index_later=False)
        tail = await self._tail(conversation, tenant, user)
        urgency = self._check(tail, budget)
        compacted: CompactionResult | None = None
        running = self._jobs.get((tenant, conversation))
        # nothing summarised yet, the window cannot hold what is there, and a summary
        # could cut something (decided from the stored messages alone, so that an
        # evicted or restarted tail decides the same: no per-process "tried" flag)
        first = urgency.summary_due and tail.summary is None and self._can_cut(tail)
        if (urgency.urgency in ("hard", "emergency") or first) and running is not None:
            await asyncio.wrap_future(running)  # the same work is already under way
            urgency = self._check(tail, budget)
            first = first and urgency.summary_due and tail.summary is None
        if urgency.urgency in ("hard", "emergency"):
            compacted = await self._compact(conversation, tenant, user, tail, urgency, wait=True)
        elif first:
            compacted = await self._compact(
                conversation, tenant, user, tail, None, wait=True, routine=True, budget=budget,
            )  # fmt: skip
            urgency = self._check(tail, budget)
        history, turns, summary_rec = tail.snapshot()
        summary = summary_rec.content if summary_rec else None
        built = await self.engine.build(
            current, history=history, budget=budget, summary=summary, tenant=tenant,
            user=user, conversation=conversation, user_turns=turns, extra_sources=self._extra, **kw,
        )  # fmt: skip
        await self._owned(tail, conversation, tenant, user)  # made by another meanwhile?
        # Stored only now: a build that raised (its protected zone, with the P0
        # blocks the sources fetched, over the budget; a bad keyword) must leave
        # nothing behind, or a retry would store the message twice.
        if store_message and current is not None:
            await self._append(conversation, [current], tenant, user, index_later=False)
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

    def _can_cut(self, tail: Tail) -> bool:
        """Whether a first summary could cover anything (`summary_boundary` > 0).

        A tail that does not start at the conversation's first message has older
        messages before it, which a summary covers; one that does holds the whole
        conversation, and the boundary is computed on it. One unit a summary cannot
        cut (a call with all its results) then costs no compaction per build.
        """
        with tail.lock:
            if not tail.messages or (tail.messages[0].seq or 0) > 1:
                return bool(tail.messages)
            messages = list(tail.messages)
        return summary_boundary(messages, self.compaction.keep_recent_messages) > 0

    def _check(self, tail: Tail, budget: Budget | int | None) -> CompactionCheck:
        """How big the live conversation is (summary + everything after it), O(tail).

        No emergency zone here: the window already keeps every build within its
        budget; the zone (95 % of the budget) is for callers who send whole histories.
        """
        window = self._window_allowance(budget)
        keep = self.compaction.keep_recent_messages
        acc = kept = 0
        in_window: int | None = None
        with tail.lock:  # newest first, past the window and the kept ones (no copy)
            summary = tail.summary
            n = len(tail.messages)
            last = tail.last_seq
            for k, cost in enumerate(reversed(tail.costs)):
                acc += cost
                if k < keep:
                    kept = acc  # the newest messages, which a summary must leave out
                if in_window is None and acc > window:
                    in_window = k
                if in_window is not None and k + 1 >= keep:
                    break
        summary_tokens = summary.tokens if summary else 0
        unsummarized = tail.unsummarized_tokens
        # The summary triggers count what lies outside the window and a summary may
        # cover: not the newest ``keep_recent_messages``, even where the window
        # cannot show them all (else every build found a summary due that could
        # cover almost nothing). By seq (gapless), so that messages older than the
        # tail count too, uncounted ones (a bulk import) included.
        pending = max(0, last - (summary.upto_seq if summary else 0))
        coverable = max(0, pending - keep)
        outside_msgs = min(max(0, pending - (n if in_window is None else in_window)), coverable)
        if n >= min(keep, pending):
            coverable_tokens = max(0, unsummarized - kept)
        else:  # the kept messages reach back past the tail: share the tokens evenly
            coverable_tokens = unsummarized * coverable // pending
        outside = min(max(0, unsummarized - window), coverable_tokens)
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

    async def check(
        self,
        conversation: str,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
    ) -> CompactionCheck:
        """How big the live conversation is and whether it is due a summary (``user``'s only)."""
        return self._check(await self._tail(conversation, tenant, user), budget)

    async def read_back(
        self,
        conversation: str,
        key: str,
        page: int = 1,
        *,
        tenant: str = "default",
        user: str = "anonymous",
    ) -> str:
        """The read-back tool's answer: a page of an offloaded tool result.

        Only for the conversation's owner, as every method here: ``user`` defaults
        to ``"anonymous"`` like `build` and `append`; anyone else gets
        `InvalidMessageError` (``user``).
        """
        tail = await self._tail(conversation, tenant, user)
        item = await self.db.get_working(conversation, key, tenant=tenant)
        await self._owned(tail, conversation, tenant, user)
        if item is None:
            return f"[nothing stored under {key!r}: it may have expired]"
        return readback_page(item.content, page, self.engine.counter)

    async def messages(
        self,
        conversation: str,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        after_seq: int = 0,
        page_size: int = 500,
    ) -> AsyncIterator[Message]:
        """The stored originals of ``conversation``, oldest first, with their ``seq``.

        What was stored, byte for byte: tool results in full (the prompt shows large
        ones compressed), summarised messages too (compaction never deletes). Read
        from the store in pages of ``page_size``, so a long conversation is never
        held whole; ``after_seq`` starts after that sequence number. Only for the
        conversation's owner (`InvalidMessageError`, ``user``, for anyone else); a
        conversation that does not exist yields nothing.
        """
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
            raise InvalidMessageError("after_seq", f"must be an integer >= 0, got {after_seq!r}")
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
            raise ConfigError(f"page_size must be a positive integer, got {page_size!r}")
        tail = await self._tail(conversation, tenant, user)
        await self._owned(tail, conversation, tenant, user)
        seq = after_seq
        while True:
            page = await self.db.read(conversation, tenant=tenant, after_seq=seq, limit=page_size)
            for m in page:
                yield m
            if len(page) < page_size:
                return
            last = page[-1].seq
            assert last is not None  # stored messages carry their seq
            seq = last

    def messages_sync(
        self,
        conversation: str,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        after_seq: int = 0,
    ) -> list[Message]:
        """`messages` for code without an event loop, as a list."""

        async def collect() -> list[Message]:
            return [
                m
                async for m in self.messages(
                    conversation, tenant=tenant, user=user, after_seq=after_seq
                )
            ]

        return self._run(collect())

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
        stored, written = self._store(conversation, batch, views, tokens, tenant, user)
        self._grow_tail(conversation, tenant, user, stored, views, tokens, written=written)
        if bulk and len(stored) >= self.compaction.summary_message_threshold:
            self._run(self._summarise_if_due(conversation, tenant, user))
        else:
            self._index_later(conversation, tenant)
        return stored

    def import_sync(
        self,
        conversation: str,
        messages: Iterable[Message],
        *,
        tenant: str = "default",
        user: str = "anonymous",
        batch_size: int = 1000,
        progress: Callable[[int], object] | None = None,
        optimize_index: bool = False,
    ) -> list[Message]:
        """`import_messages` for code without an event loop (the store is called inline)."""
        return self._run(
            self.import_messages(
                conversation, messages, tenant=tenant, user=user, batch_size=batch_size,
                progress=progress, optimize_index=optimize_index,
            )
        )  # fmt: skip

    def build_sync(
        self, conversation: str, message: str | Message | None, **kw: Any
    ) -> BuiltContext:
        return self._run(self.build(conversation, message, **kw))

    def compact_sync(self, conversation: str, **kw: Any) -> CompactionResult:
        return self._run(self.compact(conversation, **kw))

    def wait_idle_sync(self, timeout: float | None = 30.0) -> None:
        self._bg.wait(timeout)

    def close(self) -> None:
        """Let background summaries finish (up to 10 s), stop the background thread,
        and close the store. Also at the end of a ``with`` or ``async with`` block."""
        self._bg.wait(10.0)
        self._bg.close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        close = getattr(self.store, "close", None)
        if callable(close):
            close()

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Conversations:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Conversations:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
