"""Compaction in the stateful mode: background summaries and `Conversations.compact`.

A mixin of `Conversations` (``_conversations.py``), kept apart for size: it
plans from the stored outlines, summarises incrementally (previous summary +
what follows it), saves the summary and its log entry in one transaction, and
adopts the result into the in-process tail. See `_CompactionMixin._compact`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import StoreError, SummaryConflictError, UserError
from ..budget._budget import Budget
from ..history import (
    CompactionCheck,
    CompactionConfig,
    CompactionResult,
    OutlineSummarizer,
    Summarizer,
    check,
    plan_compaction,
    summary_boundary,
)
from ..model._messages import Message
from ..pipeline._engine import ContextEngine
from ..stores import AsyncStore, CompactionEntry, MessageOutline, Summary
from ..tokens._count import count_message
from ._tail import Background, Tail, TailCache

__all__ = ["MemoryFlush", "Offload"]

# Called with (tenant, user, conversation, messages about to leave the prompt);
# returns how many memories it wrote. The memory part plugs its extractor in here.
MemoryFlush = Callable[[str, str, str, Sequence[Message]], Awaitable[int]]
# A tool result to offload: (working-memory key, call id, original text, ttl).
Offload = tuple[str, str, str, float]
# An `SQLiteStore` write's change tokens, before and after it (see `Conversations._tail`).
_Written = tuple[tuple[int, int], tuple[int, int]] | None


class _StoodDown(Exception):
    """A background summary gave way to a forced compaction (see `compact`)."""


class _CompactionMixin:
    """`Conversations`' summaries and compaction (its attributes are declared here for typing)."""

    engine: ContextEngine
    db: AsyncStore
    compaction: CompactionConfig
    summarizer: Summarizer
    memory_flush: MemoryFlush | None
    clock: Callable[[], float]
    _tails: TailCache
    _jobs: dict[tuple[str, str], concurrent.futures.Future[None]]
    _yield_to: set[tuple[str, str]]
    _bg: Background

    if TYPE_CHECKING:

        def _view(self, message: Message) -> tuple[Message, Sequence[Offload]]: ...
        def _inline(self) -> bool: ...
        def _apply_summary(
            self, tail: Tail, summary: Summary, written: _Written = None
        ) -> None: ...
        def _save_compaction(
            self, summary: Summary, entry: CompactionEntry, tenant: str
        ) -> tuple[Summary, _Written]: ...
        async def _tail(self, conversation: str, tenant: str, user: str) -> Tail: ...
        async def _owned(self, tail: Tail, conversation: str, tenant: str, user: str) -> None: ...
        def _window_allowance(self, budget: Budget | int | None) -> int: ...
        def _store_counts(
            self, conversation: str, tenant: str, messages: Sequence[Message],
            views: Sequence[tuple[Message, Sequence[Offload]]], tokens: Sequence[int],
        ) -> None: ...  # fmt: skip

    def _schedule(self, conversation: str, tenant: str, user: str, *, routine: bool) -> None:
        """Summarise in the background, once per conversation at a time."""
        key = (tenant, conversation)
        running = self._jobs.get(key)
        # Done, yet still listed: the job ran to its end (and its ``finally``) on
        # the background thread before ``submit`` returned here and listed it.
        # Read as "under way", it stopped every later summary of the conversation.
        if running is not None and not running.done():
            return
        tail = self._tails.get(key)
        if tail is None:  # evicted meanwhile: the next build finds the summary due again
            return

        async def job() -> None:
            try:
                await self._compact(
                    conversation, tenant, user, tail, None, wait=False, routine=routine,
                    prompt=False, background=True,
                )  # fmt: skip
            except _StoodDown:
                pass  # a forced compaction waiting for this job covers what it would have
            finally:
                self._jobs.pop(key, None)

        self._jobs[key] = self._bg.submit(job())

    async def _compact(
        self, conversation: str, tenant: str, user: str, tail: Tail, urgency: CompactionCheck | None,
        *, wait: bool, routine: bool = False, preview: bool = False, force: bool = False,
        explicit: bool = False, prompt: bool = True, background: bool = False,
        budget: Budget | int | None = None,
    ) -> CompactionResult:  # fmt: skip
        """Summarise early turns into a new summary version and log it.

        The plan needs only the stored outlines (`Store.read_outline`: counts, roles,
        tool-call units). Messages are read in full only where they are used: any
        whose count is needed and was not stored by this counter (a routine summary
        needs counts only as far back as the window reaches; the rest of a bulk
        import stays uncounted, out of the token figures), what the summariser reads — the
        newest turns for an `OutlineSummarizer` (the rules), everything covered for
        another one or for the memory flush — and, with ``prompt``, the kept ones
        (a background job drops its result: its ``compacted_messages`` hold only the
        summary). Decoding every stored message, its tool results above all, was
        most of a compaction's cost.

        A ``background`` job gives way (raises `_StoodDown`, having written nothing)
        when a forced compaction of the conversation is waiting for it: checked
        before it reads the outlines and again before it reads messages in full and
        summarises.
        """
        key = (tenant, conversation)
        if background and key in self._yield_to:
            raise _StoodDown
        counter = self.engine.counter
        with tail.lock:  # one snapshot: a summary adopted meanwhile must not be counted twice
            before_summary, covered_before = tail.summary, tail.covered_tokens
        after = before_summary.upto_seq if before_summary else 0
        outline = await self.db.read_outline(conversation, tenant=tenant, after_seq=after)
        n = len(outline)
        full: dict[int, Message] = {}  # by index in outline
        costs: list[int | None] = [self._stored_cost(o) for o in outline]
        # views of the messages counted here that were stored with no count at all
        fresh: dict[int, tuple[Message, Sequence[Offload]]] = {}
        fill = functools.partial(
            self._fill_costs, conversation, tenant, outline, full, costs, fresh
        )
        summary_tokens = before_summary.tokens if before_summary else 0
        if routine:
            # a routine summary covers what has left the window, keeping the recent N:
            # only the messages the window can hold need a count (a bulk import
            # stores the rest uncounted), counted here if they have none
            window, acc, keep, i = self._window_allowance(budget), 0, 0, n
            while i > 0:
                i -= 1
                if costs[i] is None:
                    await fill(max(0, i - 63), i + 1)
                acc += costs[i] or 0
                if acc > window:
                    break
                keep += 1
            keep = max(keep, self.compaction.keep_recent_messages)
            cut = summary_boundary(outline, keep)
            await fill(cut, n)  # what stays is shown: counted
            await fill(0, cut, uncounted=False)  # counted by another counter: recounted
        else:
            await fill(0, n)
        # Uncounted and covered: not in the figures. Covered ones counted here (in
        # ``fresh``) stay out of ``covered_tokens`` too, as they are out of the
        # store's total (their counts are not stored).
        unknown = sum(1 for c in costs if c is None)
        known = [c or 0 for c in costs]
        if urgency is None:
            urgency = check(
                self.compaction, live_tokens=summary_tokens + sum(known),
                unsummarized_messages=len(outline), unsummarized_tokens=sum(known),
            )  # fmt: skip
        if routine:
            strategies: tuple[str, ...] = ("summarize_early_turns",) if cut else ()
            notes: tuple[str, ...] = (f"routine summary of {cut} message(s) outside the window",)
        else:
            # a tool message's size is the length of its text
            compressed = sum(
                1
                for o, c in zip(outline, known, strict=True)
                if o.role == "tool" and c < o.size // 8
            )
            plan = plan_compaction(
                self.compaction, outline, known, summary_tokens=summary_tokens,
                compressed_tool_results=compressed, urgency=urgency.urgency, force_summary=force,
            )  # fmt: skip
            cut, strategies, notes = plan.summarize_count, plan.strategies, plan.notes
        if unknown:
            notes = (
                *notes,
                f"{unknown} covered message(s) stored without a token count (bulk import) "
                "are not in the token figures",
            )
        if background and key in self._yield_to:
            raise _StoodDown  # nothing written yet; the summarising is still to come
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
            # Waited for by an async caller: on the background thread, so that the
            # rules' CPU time does not hold up the caller's event loop. The sync API's
            # private loop serves only this call: the rules run on it, with no hops.
            hop = wait and not self._inline()
            draft = await (asyncio.wrap_future(self._bg.submit(runner)) if hop else runner)
            content, method = draft.content, draft.method
            new_summary = Summary(
                conversation, 0, before_summary.from_seq if before_summary else outline[0].seq,
                outline[cut - 1].seq, content, counter.count(content), method, self.clock(),
                {"messages": draft.messages, "covered_tokens": covered_before + sum(c for i, c in enumerate(known[:cut]) if i not in fresh)},
            )  # fmt: skip
        kept_views = [self._view(full[i])[0] for i in range(cut, n)] if prompt else []
        kept_fresh = sorted(i for i in fresh if i >= cut)
        if kept_fresh and not preview:
            # uncounted messages that stay outside the summary get their counts
            # stored, so that the store's totals cover everything not summarised
            counted = [costs[i] or 0 for i in kept_fresh]
            await self.db._run(
                functools.partial(
                    self._store_counts, conversation, tenant, [full[i] for i in kept_fresh],
                    [fresh[i] for i in kept_fresh], counted,
                )
            )  # fmt: skip
            with tail.lock:
                tail.total_tokens += sum(counted)
        new_tokens = (new_summary.tokens if new_summary else summary_tokens) + sum(known[cut:])
        before_tokens = summary_tokens + sum(known)
        version: int | None = None
        if new_summary is not None and not preview:
            entry = CompactionEntry(
                0, conversation, self.clock(), "routine" if routine else urgency.urgency, True,
                before_tokens, new_tokens, None, new_summary.upto_seq, strategies,
                {"notes": list(notes), "flushed_memories": flushed, "method": method},
            )  # fmt: skip
            # summary and log entry in one transaction: a crash leaves both or neither
            try:
                saved, written = await self.db._run(
                    functools.partial(self._save_compaction, new_summary, entry, tenant)
                )
            except SummaryConflictError as lost:
                # Another process saved a summary reaching as far first: a lost race,
                # not an error. Nothing was written; adopt the winner and stand down.
                self._apply_summary(tail, lost.latest)
                if background:
                    raise _StoodDown from None
                return self._stood_down(lost.latest, outline, full, n, before_tokens, urgency,
                                        notes, flushed, prompt)  # fmt: skip
            version = saved.version
            self._apply_summary(tail, saved, written)
            current = self._tails.get(key)
            if current is not None and current is not tail:  # evicted and read afresh meanwhile
                self._apply_summary(current, saved)
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

    def _stood_down(
        self, latest: Summary, outline: Sequence[MessageOutline], full: dict[int, Message],
        n: int, before_tokens: int, urgency: CompactionCheck, notes: tuple[str, ...],
        flushed: int, prompt: bool,
    ) -> CompactionResult:  # fmt: skip
        """The result of a compaction that lost the race to save its summary.

        The prompt view is the winning summary and the messages after it that this
        compaction read; nothing was saved (``applied`` is False).
        """
        kept = [i for i in range(n) if outline[i].seq > latest.upto_seq and i in full]
        shown = [Message.system(latest.content)] + (
            [self._view(full[i])[0] for i in kept] if prompt else []
        )
        note = (
            f"stood down: summary version {latest.version}, saved meanwhile by another "
            f"writer, already covers up to seq {latest.upto_seq}"
        )
        return CompactionResult(
            shown, latest.content, n, len(kept), flushed, before_tokens, before_tokens,
            urgency.urgency, (), False, None, None, latest.method, (*notes, note),
        )  # fmt: skip

    def _stored_cost(self, o: MessageOutline) -> int | None:
        """The prompt cost stored with a message, if this counter made it."""
        if not o.counter or o.counter != self.engine.count_key:
            return None
        return o.tokens

    async def _fill_costs(
        self, conversation: str, tenant: str, outline: Sequence[MessageOutline],
        full: dict[int, Message], costs: list[int | None],
        fresh: dict[int, tuple[Message, Sequence[Offload]]], start: int, stop: int,
        uncounted: bool = True,
    ) -> None:  # fmt: skip
        """Count the messages of ``outline[start:stop]`` whose ``costs`` are unknown.

        ``uncounted=False`` leaves out those stored with no count at all (only
        those counted by another counter are recounted). The views of those stored
        with no count go into ``fresh``.
        """
        todo = [
            i for i in range(start, stop) if costs[i] is None and (uncounted or outline[i].counter)
        ]
        if not todo:
            return
        await self._read_full(conversation, tenant, outline, full, todo[0], todo[-1] + 1)
        counter, ov = self.engine.counter, self.engine.overhead
        for i in todo:
            made = self._view(full[i])
            costs[i] = count_message(counter, made[0], ov)
            if not outline[i].counter:
                fresh[i] = made

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
        """Compact now (``preview``: compute without writing). ``force`` summarises even under the soft threshold.

        Only the conversation's owner may, a preview too: anyone else gets
        `InvalidMessageError` (``user``) before anything is read or written.
        """
        tail = await self._tail(conversation, tenant, user)
        await self._owned(tail, conversation, tenant, user)
        if tail.owner is None:
            raise UserError(f"no conversation {conversation!r} for tenant {tenant!r}")
        # A background summary may be under way (a bulk import schedules one). A
        # forced compaction summarises all it would (everything but the newest
        # ``keep_recent_messages``), so it is told at once to give way: it stands
        # down if it has not begun summarising. Otherwise it lands and this compacts
        # what follows it. Racing it summarised the same messages twice, each half
        # slowed by the other, and could count them twice.
        key = (tenant, conversation)
        yielding = force and not preview and key not in self._yield_to
        if yielding:
            self._yield_to.add(key)
        try:
            running = self._jobs.get(key)
            if running is not None:
                await asyncio.wait([asyncio.wrap_future(running)])
        finally:
            if yielding:
                self._yield_to.discard(key)
        return await self._compact(
            conversation, tenant, user, tail, None, wait=True, preview=preview, force=force
        )
