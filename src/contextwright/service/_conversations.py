"""Stateful mode: conversations kept in a store, built against by id.

`Conversations` puts a `ContextEngine` on top of a store `Backend` (the async
store contract: SQLite by default, any backend that passes the contract suites;
each call goes through one of its roles). Messages are appended once, with a
sequence number and their prompt cost; each build reads only what is new since the
last one, so a turn costs the same in a conversation of 100 messages and of 100,000:

* an in-process *tail* per conversation holds the newest messages after the
  summary boundary, enough to fill the largest window; a build asks the store
  for messages after the tail's last sequence number (usually none or one) and
  never re-reads the thread;
* the running token total and the stored per-message counts answer "how big is
  the live conversation" without counting anything again;
* large tool results are compressed for the prompt when they are appended, the
  original offloaded to working memory behind a read-back pointer
  (`ToolResultCompressor`); the stored message stays verbatim.

Summaries are incremental (previous summary + the messages since) and made in the
background: a build waits for one only over the hard compaction threshold. A
routine summary covers what has left the window, at least ``clear_at_least`` tokens
at once (`_clearing`: the prompt stays append-only between summaries, for the
provider's cache); `compact` (soft: background, hard: before the build returns;
docs/design-notes.md, Compaction) keeps only the last N messages out of it. Nothing is
deleted: summaries replace old messages in the prompt only, every version is kept,
the originals stay searchable (recall brings exact old turns back); `delete` alone does.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from types import SimpleNamespace
from typing import Any, TypeVar

from .._errors import ConfigError, InvalidMessageError
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
    readback_page,
)
from ..history._compaction import compaction_report
from ..model._messages import Message
from ..pipeline._engine import ContextEngine
from ..pipeline._receipt import BuiltContext
from ..stores import Backend, Job, Jobs, MemoryJobs, SQLiteStore
from ..stores._open import open_backend
from ..stores._runner import JobRunner
from ..stores._wakeup import Wakeup, open_wakeup
from ..tokens._correction import Correction
from ._clearing import summarise_after
from ._compact import SUMMARISE, Compactor, MemoryFlush
from ._live import can_cut, live_check, window_allowance
from ._provider_compact import with_stand_in
from ._reads import originals
from ._sync import SyncLoop, sync_list, sync_twin
from ._tail import Tail, TailCache
from ._tail_sync import TailKeeper
from ._tracing import traced_build
from ._usage import UsageKeeper
from ._write_path import Writes

__all__ = ["Conversations", "MemoryFlush"]
T = TypeVar("T")


class Conversations:
    """Conversations persisted in ``store`` and built with ``engine``.

    ``store`` is a `Backend` (kept as ``backend``), a ``postgresql://…`` URL for a
    `PostgresBackend` (with its job queue), or an `SQLiteStore` or a path or ``sqlite:///path``
    (None: in memory) for an `SQLiteBackend` over it; the ``store`` attribute is then that
    `SQLiteStore`, for sync reads (None with another backend). ``summarizer`` defaults to the
    rule summariser (a `ProviderCompactor` also keeps OpenAI's compaction of the same turns:
    `_provider_compact`); ``memory_flush`` runs on messages about to be summarised away.
    ``window_tokens`` bounds the in-process tail (default: the engine's budget).

    ``max_cached_conversations`` bounds the conversations whose tail is kept in process
    (least recently used evicted first; default 1,024): memory stays flat however many
    conversations one process serves. A tail holds up to twice the window, typically tens
    of kilobytes; an evicted conversation's next build reads it from the store again (one
    cold start) and builds the same context. `cache_sizes` says what is held. The other
    per-conversation caches are bounded too: recall's turn indexes
    (`RecallSource.max_conversations`), the engine's window memos and shortened messages.

    Background summaries are durable jobs in ``jobs`` (default: the backend's own queue,
    `Backend.jobs`; `MemoryJobs` if it has none), run on one background thread, or at once on the
    caller's loop with ``inline_jobs`` (the CLI, tests); a job of a process that died is taken over
    after its lease (`JobRunner`). `jobs` lists them, failed ones with their error. ``wakeup``
    tells idle runners in other processes that a job was queued (a `Wakeup`, or ``redis://…`` for a
    `RedisWakeup`; default: the queue's own, e.g. PostgreSQL LISTEN/NOTIFY).

    Call `close` when done. At interpreter exit, background summaries still running get a few
    seconds; one cut short is taken over later. ``recall`` adds the default recall (below)
    unless the engine has a `RecallSource` of its own.
    """

    def __init__(
        self,
        engine: ContextEngine,
        store: Backend | SQLiteStore | str | os.PathLike[str] | None = None,
        *,
        compaction: CompactionConfig | None = None,
        summarizer: Summarizer | None = None,
        compressor: ToolResultCompressor | None = None,
        memory_flush: MemoryFlush | None = None,
        window_tokens: int | None = None,
        recall: bool = True,
        clock: Callable[[], float] = time.time,
        max_cached_conversations: int = 1024,
        cache_bytes: int = 64 << 20,
        jobs: Jobs | None = None,
        inline_jobs: bool = False,
        job_lease: float = 30.0,
        wakeup: Wakeup | str | None = None,
    ) -> None:
        limits = {"max_cached_conversations": max_cached_conversations, "cache_bytes": cache_bytes}
        for label, size in limits.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(f"{label} must be a positive integer, got {size!r}")
        self.store, self.backend = open_backend(store)
        self.engine = engine
        self.compaction = compaction or CompactionConfig()
        self.summarizer = summarizer or RuleSummarizer(engine.counter)
        self.compressor = compressor or ToolResultCompressor(engine.counter)
        self.memory_flush = memory_flush
        budget = engine.budget.input_tokens if engine.budget is not None else None
        self.window_tokens = window_tokens or budget or 32_000
        self.clock = clock
        self._sync = SyncLoop()  # the sync API's private loop
        self._writes = Writes(self)
        self._compactor = Compactor(self)
        self._usage = UsageKeeper(self)
        cache = TailCache(max_cached_conversations, self._compactor.busy, cache_bytes)
        self._keeper = TailKeeper(self, cache)
        if jobs is None:
            jobs = self.backend.jobs if self.backend.jobs is not None else MemoryJobs()
        wakeup, self._close_wakeup = open_wakeup(wakeup, jobs)
        self._runner = JobRunner(
            jobs, {SUMMARISE: self._compactor.run_job}, inline=inline_jobs, lease=job_lease,
            wakeup=wakeup, before_stop=getattr(self.backend.conversations, "release_loop", None),
        )  # fmt: skip
        self._runner.start()  # takes over what dead workers left
        # The stateful default recalls sparingly, so that a turn stays cheap however
        # long the conversation: a few dozen full-text hits, no second (feedback)
        # search, and only the rarest terms, up to 200 postings in all (BM25 scores
        # every match: common words made the search grow with the conversation;
        # on LoCoMo's old evidence turns, 568 of 1,079 come back with 200, 570
        # with every term, 561 with 100: `bench_recall_default.py`). The memory-QA configuration
        # (`RecallSource.for_memory_qa`) spends more; an engine with a recall of its own
        # (as `memory_qa_engine`'s) gets no second one.
        recall = recall and not any(isinstance(s, RecallSource) for s in engine.sources)
        cheap = TurnRanker(RankWeights(feedback_weight=0.0))
        search, log = self.backend.search, self.backend.conversations
        reads = SimpleNamespace(  # what recall reads (`SearchesMessages`)
            search_outlines=search.search_outlines, speaker_names=search.speaker_names,
            read_outline=log.read_outline,
        )  # fmt: skip
        recall_source = RecallSource(
            store=reads, search_limit=32, ranker=cheap, match_budget=200, counter=engine.counter
        )
        self._recall: RecallSource | None = recall_source if recall else None
        self._extra = [recall_source] if recall else []

    def cache_sizes(self) -> dict[str, int]:
        """How many conversations each in-process cache holds now (all bounded).

        ``tails`` (at most ``max_cached_conversations``, plus any with a background
        summary under way), ``tail_bytes`` (their approximate memory, kept under
        ``cache_bytes`` but for the tail in use), ``recall_indexes`` (at most the
        recall source's ``max_conversations``), ``window_memos`` (the engine's),
        ``jobs`` (background jobs this process enqueued that have not run yet, and
        local work under way).
        """
        return self._keeper.sizes()

    def drop_caches(self) -> None:
        """Forget every in-process cache now: tails, recall's turn indexes, the engine's
        window walks and shortened copies.

        Safe at any moment, during a build or a background summary too: what is
        under way keeps the copy it holds, and the next call reads what it needs from
        the store again. Dropping them never changes what a build returns; it only
        costs the next build of each conversation a cold start. (The engine's block
        cache is not an accelerator but a cache with its own expiry: see
        `ContextEngine.invalidate`.)
        """
        self._keeper.drop_all()

    async def _tail(self, conversation: str, tenant: str, user: str) -> Tail:
        """The conversation's tail, up to date, for ``user`` only (`TailKeeper.tail`)."""
        return await self._keeper.tail(conversation, tenant, user)

    # -- writing ---------------------------------------------------------------------

    async def append(
        self,
        conversation: str,
        messages: Sequence[Message],
        *,
        tenant: str = "default",
        user: str = "anonymous",
        usage: Any = None,
    ) -> list[Message]:
        """Store ``messages`` (oldest first); returns them with their sequence numbers.
        ``usage`` (the provider's, for the request they answer) goes to `record_usage`."""
        stored = await self._append(conversation, messages, tenant, user, index_later=True)
        if usage is not None:
            await self.record_usage(conversation, usage, tenant=tenant, user=user)
        return stored

    async def record_usage(
        self, conversation: str, usage: Any, *, tenant: str = "default", user: str = "anonymous",
        built: BuiltContext | None = None,
    ) -> Correction:  # fmt: skip
        """Learn from the provider's ``usage`` (its usage object, a dict, the response) for the
        last build of ``conversation`` (or ``built``), in the store: every worker's next builds
        are fitted by the corrected count (docs/usage-feedback.md). Returns that correction."""
        return await self._usage.record_usage(
            conversation, usage, tenant=tenant, user=user, built=built
        )

    async def _append(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str,
        *, index_later: bool,
    ) -> list[Message]:  # fmt: skip
        return await self._writes.append(conversation, messages, tenant, user, index_later)

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
        import's time. Those messages stay uncounted in the store: they are not in
        ``token_total``, and anything that needs their count later (a cold start that
        finds them in its tail, a compaction that keeps them) counts them then.
        Nothing is lost: they are stored, searchable and summarised like any other.
        ``optimize_index`` then indexes what was stored for full-text search and
        merges the index (`MessageSearch.optimize_index`: on SQLite the whole
        file's, so for large imports; the CLI's ``import`` does it). Without it
        the messages are indexed when the conversation is first searched
        (recall keeps its own index in process).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(messages, Message):
            raise InvalidMessageError("messages", "must be an iterable of Message, got one Message")
        return await self._writes.import_messages(
            conversation, messages, tenant, user, batch_size, progress, optimize_index
        )

    # -- reading -------------------------------------------------------------------------

    @traced_build
    async def build(
        self,
        /,
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
        `ContextEngine.build` (state, locale, provider…); ``retry_after_overflow``, a
        provider's context-length error for the last build, rebuilds it to fit (not
        storing its message twice: `UsageKeeper.rebuild`). With ``message`` None, or
        a tool-role message (stored first, whatever ``store_message`` says, as it
        belongs to the history), the build is the agent's next step after the
        stored tool results (see `ContextEngine.build`).

        A first build that would leave out history no summary covers yet summarises it before it
        returns, as a conversation over its hard threshold is compacted; later summaries are made
        in the background.

        A conversation belongs to the user who first wrote to it: a build by anyone else raises
        `InvalidMessageError` (``user``), with ``store_message=False`` too, and nothing of the
        conversation is read or written for them.
        """
        # Everything that can be checked is, before anything is written (a compaction below)
        current, _ = self.engine._precheck(
            message, budget, tenant=tenant, user=user, conversation=conversation
        )
        if (error := kw.pop("retry_after_overflow", None)) is not None:
            args = (conversation, message, error, tenant, user, budget, store_message)
            return await self._usage.rebuild(*args, kw)
        if isinstance(message, Message) and message.role == "tool":
            # refused before it is stored unless it completes the last tool call
            owned = await self._tail(conversation, tenant, user)
            self.engine._next_step(message, owned.snapshot()[0])
            await self._append(conversation, [message], tenant, user, index_later=False)
        tail = await self._tail(conversation, tenant, user)
        corr, fitted = await self._usage.fitted(tenant, budget, kw.pop("correction", None))
        urgency, compacted = await self._compactor.before_build(
            conversation, tenant, user, tail, fitted
        )
        history, turns, summary_rec, seen = tail.snapshot()
        if kw.pop("_replace_last", False):  # rebuilt after an overflow: the last is current
            history, turns = history[:-1], turns - 1
        history, summary, stood = with_stand_in(summary_rec, history, kw.get("provider"))
        built = await self.engine.build(
            current, history=history, budget=budget, summary=summary, tenant=tenant,
            user=user, conversation=conversation, user_turns=turns, extra_sources=self._extra,
            correction=corr, **kw,
        )  # fmt: skip
        await self._keeper.owned(tail, conversation, tenant, user)  # made by another meanwhile?
        # Stored only now: a build that raised (its protected zone, with the P0
        # blocks the sources fetched, over the budget; a bad keyword) must leave
        # nothing behind, or a retry would store the message twice.
        if store_message and current is not None:
            await self._append(conversation, [current], tenant, user, index_later=False)
        built.report.last_seq = seen
        built.report.blocks.extend(stood)  # a provider compaction this build could not send
        built.report.compaction = compaction_report(urgency, compacted)
        self._usage.remember(tenant, conversation, built)
        await summarise_after(self, tail, urgency, built.report, budget, conversation, tenant, user)
        return built

    def _can_cut(self, tail: Tail) -> bool:
        return can_cut(tail, self.compaction.keep_recent_messages)

    def _check(self, tail: Tail, budget: Budget | int | None) -> CompactionCheck:
        return live_check(self.compaction, tail, self._window_allowance(budget))

    def _window_allowance(self, budget: Budget | int | None) -> int:
        return window_allowance(self.engine.budget, self.window_tokens, budget)

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
        item = await self.backend.working.get_working(conversation, key, tenant=tenant)
        await self._keeper.owned(tail, conversation, tenant, user)
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
        async for m in originals(self, conversation, tenant, user, after_seq, page_size):
            yield m

    async def delete(
        self, conversation: str, *, tenant: str = "default", user: str = "anonymous"
    ) -> bool:
        """Delete the conversation and everything stored under it; False if there is none.

        A user's request to be forgotten, the one call that removes stored messages:
        its messages, summaries, compaction log, working memory, pins and receipts
        go from the store in one transaction, and what this process holds of it from
        its caches. Only the owner may (`InvalidMessageError`, ``user``, for anyone
        else); a background summary of it here gives way first. The id is free after.
        """
        tail = await self._tail(conversation, tenant, user)
        await self._keeper.owned(tail, conversation, tenant, user)
        async with self._compactor.held_off((tenant, conversation)):
            log = self.backend.conversations
            deleted = await log.delete_conversation(conversation, tenant=tenant)
            self._keeper.forget(conversation, tenant, user)
        return deleted

    async def wait_idle(self, timeout: float | None = 30.0, *, all_jobs: bool = False) -> None:
        """Wait until every background job this process enqueued has run (tests, shutdown).

        ``all_jobs``: until the queue holds no pending or running job at all, other
        processes' and dead workers' included (this process takes those over when
        their lease runs out).
        """
        if all_jobs:
            await self._runner.wait_all(timeout)
        else:
            await self._runner.wait_idle(timeout)

    async def jobs(self, *, tenant: str | None = None, state: str | None = None) -> list[Job]:
        """The background jobs in the queue: pending, running, and ``failed`` ones with their error."""
        return await self._runner.jobs.jobs(tenant=tenant, state=state)

    async def compact(
        self, conversation: str, *, tenant: str = "default", user: str = "anonymous",
        preview: bool = False, force: bool = True,
    ) -> CompactionResult:  # fmt: skip
        """Compact now (``preview``: compute without writing). ``force`` summarises even under the soft threshold.

        Only the conversation's owner may, a preview too: anyone else gets
        `InvalidMessageError` (``user``) before anything is read or written.
        """
        return await self._compactor.compact(
            conversation, tenant=tenant, user=user, preview=preview, force=force
        )

    # -- sync facade (the store's calls run inline on its private loop: `inline_loop`) ----

    append_sync = sync_twin(append)
    record_usage_sync = sync_twin(record_usage)
    import_sync = sync_twin(import_messages)
    build_sync = sync_twin(build)
    compact_sync = sync_twin(compact)
    delete_sync = sync_twin(delete)
    check_sync = sync_twin(check)
    read_back_sync = sync_twin(read_back)
    messages_sync = sync_list(messages)
    jobs_sync = sync_twin(jobs)
    wait_idle_sync = sync_twin(wait_idle)

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (e.g. a call of ``self.backend``'s roles) on the sync API's loop.

        For sync tools that read the store directly (the CLI): the backend's
        connections belong to that loop, so its calls must run there.
        """
        return self._sync.run(coro)

    def close(self) -> None:
        """Let background jobs finish (up to 10 s), stop the background thread,
        and close the backend. Also at the end of a ``with`` or ``async with`` block."""
        self._runner.close(10.0)
        if self._close_wakeup is not None:
            self._close_wakeup()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop here: the private one closes the backend
            self._sync.run(self.backend.aclose())
        else:  # called inside a loop: close the backend on a thread's own loop
            closer = threading.Thread(target=asyncio.run, args=(self.backend.aclose(),))
            closer.start()
            closer.join()
        self._sync.close()

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
