"""Compaction in the stateful mode: `Compactor`, the background summaries and `Conversations.compact`.

`Conversations` (``_conversations.py``) holds one `Compactor`. It plans from the stored outlines, summarises
incrementally (previous summary + what follows it), saves the summary and its
log entry in one transaction (with the expected version: a lost race stands
down), and adopts the result into the in-process tail. Background summaries
are durable 'summarise' jobs in the backend's queue (`JobRunner`), scheduled by
builds and after bulk writes (`summarise_if_due`); see `Compactor.compact_now`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import StoreError, SummaryConflictError, UserError
from ..budget._budget import Budget
from ..history import (
    CompactionCheck,
    CompactionResult,
    OutlineSummarizer,
    check,
    plan_compaction,
)
from ..model._messages import Message
from ..stores import CompactionEntry, Job, MessageOutline, Summary
from ..stores._inline import runs_inline
from ..tokens._frame import count_message
from ._clearing import routine_cut
from ._provider_compact import previous_kw, stand_in_meta
from ._tail import Tail
from ._tracing import COMPACTION, SUMMARY, compaction_attributes, conversation_attributes, tracer_of

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["SUMMARISE", "Compactor", "MemoryFlush", "Offload"]

SUMMARISE = "summarise"  # the job kind of a background summary

# Called with (tenant, user, conversation, messages about to leave the prompt);
# returns how many memories it wrote. The memory part plugs its extractor in here.
MemoryFlush = Callable[[str, str, str, Sequence[Message]], Awaitable[int]]
# A tool result to offload: (working-memory key, call id, original text, ttl).
Offload = tuple[str, str, str, float]


class _StoodDown(Exception):
    """A background summary gave way to a forced compaction (see `compact`)."""


class Compactor:
    """`Conversations`' summaries and compaction, held by it (``conv``): plan, summarise, save, adopt.

    Background summaries are durable 'summarise' jobs keyed by the conversation
    (`schedule`), run by the conversation's `JobRunner` through `run_job`.
    ``running`` gives the future of one this process enqueued or runs, so that a
    build or a forced compaction can wait for the same work instead of doing it
    twice; ``_yield_to`` lists the conversations whose background summary is to
    give way to a forced compaction (see `compact`).
    """

    def __init__(self, conv: Conversations) -> None:
        self.c = conv
        self._yield_to: set[tuple[str, str]] = set()
        # conversations with a summary job this process enqueued or runs, until it has run
        self._pending: dict[tuple[str, str], concurrent.futures.Future[None]] = {}

    def running(self, key: tuple[str, str]) -> concurrent.futures.Future[None] | None:
        """The future of the conversation's summary job enqueued or run here, until it has run."""
        fut = self._pending.get(key)
        return fut if fut is not None and not fut.done() else None

    def busy(self, key: tuple[str, str]) -> bool:
        """Whether a summary of the conversation is pending or under way here (its tail stays)."""
        return self.running(key) is not None

    async def schedule(
        self, conversation: str, tenant: str, user: str, *, routine: bool, window: int | None = None
    ) -> None:
        """Summarise in the background: enqueue the conversation's 'summarise' job.

        One job per conversation is pending or running, in every process that
        shares the store (the queue's dedup); a job enqueued here and not yet run
        is not enqueued again (that would only find it). ``window``: the room the
        history had, when less than the allowance (`window_after`).
        """
        key = (tenant, conversation)
        if self.running(key) is not None:
            return
        payload = {"conversation": conversation, "user": user, "routine": routine}
        if window is not None:
            payload["window"] = window
        _, done = await self.c._runner.enqueue(SUMMARISE, conversation, payload, tenant=tenant)
        if not done.done():
            self._pending[key] = done
            done.add_done_callback(lambda _: self._forget(key, done))

    async def before_build(
        self, conversation: str, tenant: str, user: str, tail: Tail, budget: Budget | int | None
    ) -> tuple[CompactionCheck, CompactionResult | None]:
        """What a build must do first: compact a conversation over its hard threshold,
        or make the first summary of one whose window cannot hold what is there.

        Returns the check the build reports and the compaction, if one ran. A
        summary of the conversation already under way here is waited for instead.
        """
        urgency = self.c._check(tail, budget)
        compacted: CompactionResult | None = None
        running = self.running((tenant, conversation))
        # nothing summarised yet, the window cannot hold what is there, and a summary
        # could cut something (decided from the stored messages alone, so that an
        # evicted or restarted tail decides the same: no per-process "tried" flag)
        first = urgency.summary_due and tail.summary is None and self.c._can_cut(tail)
        if (urgency.urgency in ("hard", "emergency") or first) and running is not None:
            await asyncio.wrap_future(running)  # the same work is already under way
            urgency = self.c._check(tail, budget)
            first = first and urgency.summary_due and tail.summary is None
        if urgency.urgency in ("hard", "emergency"):
            compacted = await self.compact_now(conversation, tenant, user, tail, urgency, wait=True)
        elif first:
            compacted = await self.compact_now(
                conversation, tenant, user, tail, None, wait=True, routine=True, budget=budget,
            )  # fmt: skip
            urgency = self.c._check(tail, budget)
        return urgency, compacted

    async def summarise_if_due(self, conversation: str, tenant: str, user: str) -> None:
        """After a bulk write: summarise what is outside the window now, in the
        background, so that the first build does not have to. Below the summary
        triggers too if the tail could not hold all that is not summarised: a bulk
        import leaves those messages uncounted, for this summary to cover."""
        tail = await self.c._tail(conversation, tenant, user)
        with tail.lock:
            past_tail = tail.last_seq - tail.boundary > len(tail.messages)
        if past_tail or self.c._check(tail, None).summary_due:
            await self.schedule(conversation, tenant, user, routine=True)

    @contextlib.asynccontextmanager
    async def held_off(self, key: tuple[str, str]) -> AsyncIterator[None]:
        """Run the block with no summary of the conversation under way in this process:
        a background one is told to give way (as by `compact`) and waited for first,
        and one that starts meanwhile gives way at once (`Conversations.delete`)."""
        mine = key not in self._yield_to
        if mine:
            self._yield_to.add(key)
        try:
            running = self.running(key)
            if running is not None:
                await asyncio.wait([asyncio.wrap_future(running)])
            yield
        finally:
            if mine:
                self._yield_to.discard(key)

    def _forget(self, key: tuple[str, str], done: concurrent.futures.Future[None]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]

    async def run_job(self, job: Job) -> None:
        """The 'summarise' handler: a background summary of the job's conversation."""
        p = job.payload
        conversation, user, routine = p["conversation"], p["user"], bool(p.get("routine"))
        window = p.get("window") if isinstance(p.get("window"), int) else None
        key = (job.tenant, conversation)
        mine = self._pending.get(key)
        here: concurrent.futures.Future[None] = concurrent.futures.Future()
        if mine is None:  # another process's job: waited for here while it runs
            self._pending[key] = here
        try:
            tail = await self.c._tail(conversation, job.tenant, user)
            await self.compact_now(
                conversation, job.tenant, user, tail, None, wait=False, routine=routine,
                prompt=False, background=True, window=window,
            )  # fmt: skip
        except _StoodDown:
            pass  # a forced compaction waiting for this job covers what it would have
        except UserError:
            # The conversation was deleted meanwhile (in another process, say), or
            # deleted and made again by someone else: the job's work went with it.
            info = await self.c.backend.conversations.get_conversation(
                conversation, tenant=job.tenant
            )
            if info is not None and info.user == user:
                raise
        finally:
            self._forget(key, here)
            here.set_result(None)

    async def compact_now(
        self, conversation: str, tenant: str, user: str, tail: Tail, urgency: CompactionCheck | None,
        *, wait: bool, routine: bool = False, preview: bool = False, force: bool = False,
        explicit: bool = False, prompt: bool = True, background: bool = False,
        budget: Budget | int | None = None, window: int | None = None,
    ) -> CompactionResult:  # fmt: skip
        """`_compact_now`, in a ``contextwright.compaction`` span when tracing."""
        run = functools.partial(
            self._compact_now, conversation, tenant, user, tail, urgency, wait=wait,
            routine=routine, preview=preview, force=force, explicit=explicit, prompt=prompt,
            background=background, budget=budget, window=window,
        )  # fmt: skip
        tracer = tracer_of(self.c)
        if not tracer.enabled:
            return await run()
        attrs = conversation_attributes(conversation, tenant)
        attrs.update({"contextwright.compaction.routine": routine,
                      "contextwright.compaction.background": background,
                      "contextwright.compaction.preview": preview})  # fmt: skip
        result: CompactionResult | None = None
        with tracer.span(COMPACTION, attrs) as span:
            try:
                result = await run()
            except _StoodDown:  # gave way to a forced compaction: not a failure
                span.set("contextwright.compaction.stood_down", True)
            else:
                span.update(compaction_attributes(result))
        if result is None:
            raise _StoodDown
        return result

    async def _compact_now(
        self, conversation: str, tenant: str, user: str, tail: Tail, urgency: CompactionCheck | None,
        *, wait: bool, routine: bool = False, preview: bool = False, force: bool = False,
        explicit: bool = False, prompt: bool = True, background: bool = False,
        budget: Budget | int | None = None, window: int | None = None,
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
        counter = self.c.engine.counter
        with tail.lock:  # one snapshot: a summary adopted meanwhile must not be counted twice
            before_summary, covered_before = tail.summary, tail.covered_tokens
        after = before_summary.upto_seq if before_summary else 0
        log = self.c.backend.conversations
        outline = await log.read_outline(conversation, tenant=tenant, after_seq=after)
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
            # a routine summary covers what has left the window (cache-aware: at least
            # ``clear_at_least`` tokens), keeping the recent N (`routine_cut`)
            window = window or self.c._window_allowance(budget)
            cut = await routine_cut(self.c, outline, costs, fill, window)
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
                self.c.compaction, live_tokens=summary_tokens + sum(known),
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
                self.c.compaction, outline, known, summary_tokens=summary_tokens,
                compressed_tool_results=compressed, urgency=urgency.urgency, force_summary=force,
                clear_at_least=self.c.compaction.clear_at_least(self.c._window_allowance(budget)),
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
            and self.c.memory_flush is not None
            and self.c.compaction.memory_flush_enabled
            and not preview
        )
        outliner = self.c.summarizer if isinstance(self.c.summarizer, OutlineSummarizer) else None
        # the first message the summariser (or the flush) reads in full
        first = cut - outliner.full_messages([o.role for o in outline[:cut]]) if outliner else 0
        first = 0 if flush else first
        await self._read_full(conversation, tenant, outline, full, first, n if prompt else cut)
        flushed = 0
        if flush and self.c.memory_flush is not None:
            try:
                covered = [full[i] for i in range(cut)]
                flushed = await self.c.memory_flush(tenant, user, conversation, covered)
            except Exception as exc:  # a failing hook must not block compaction
                notes = (*notes, f"memory flush failed: {type(exc).__name__}: {exc}")
        content = before_summary.content if before_summary else ""
        method = before_summary.method if before_summary else ""
        new_summary: Summary | None = None
        if cut:
            kw: dict[str, Any] = {
                "previous": content or None,
                "max_tokens": self.c.compaction.summary_max_tokens,
                "locale": "auto",
                **previous_kw(self.c.summarizer, before_summary),
            }
            newest = [full[i] for i in range(first, cut)]
            runner = (
                outliner.summarize_outlined(outline[:first], newest, **kw)
                if outliner is not None and not flush
                else self.c.summarizer.summarize(newest, **kw)  # first is 0 here
            )
            # Waited for by an async caller: on the background thread, so that the
            # rules' CPU time does not hold up the caller's event loop. The sync API's
            # private loop serves only this call: the rules run on it, with no hops.
            hop = wait and not runs_inline()
            tracer = tracer_of(self.c)
            with tracer.span(SUMMARY, {"contextwright.summary.messages": cut}) as span:
                draft = await (
                    asyncio.wrap_future(self.c._runner.submit(runner)) if hop else runner
                )
                if span.recording:
                    span.update({"contextwright.summary.method": draft.method,
                                 "contextwright.summary.tokens": counter.count(draft.content)})  # fmt: skip
                    if tracer.capture_content:
                        span.set("contextwright.content", draft.content)
            content, method = draft.content, draft.method
            new_summary = Summary(
                conversation, 0, before_summary.from_seq if before_summary else outline[0].seq,
                outline[cut - 1].seq, content, counter.count(content), method, self.c.clock(),
                {"messages": draft.messages, "covered_tokens": covered_before + sum(c for i, c in enumerate(known[:cut]) if i not in fresh), **stand_in_meta(draft)},
            )  # fmt: skip
        kept_views = [self.c._writes.view(full[i])[0] for i in range(cut, n)] if prompt else []
        kept_fresh = sorted(i for i in fresh if i >= cut)
        if kept_fresh and not preview:
            # uncounted messages that stay outside the summary get their counts
            # stored, so that the store's totals cover everything not summarised
            counted = [costs[i] or 0 for i in kept_fresh]
            await self.c._writes.store_counts(
                conversation, tenant, [full[i] for i in kept_fresh],
                [fresh[i] for i in kept_fresh], counted,
            )  # fmt: skip
            with tail.lock:
                tail.total_tokens += sum(counted)
        new_tokens = (new_summary.tokens if new_summary else summary_tokens) + sum(known[cut:])
        before_tokens = summary_tokens + sum(known)
        version: int | None = None
        if new_summary is not None and not preview:
            entry = CompactionEntry(
                0, conversation, self.c.clock(), "routine" if routine else urgency.urgency, True,
                before_tokens, new_tokens, None, new_summary.upto_seq, strategies,
                {"notes": list(notes), "flushed_memories": flushed, "method": method},
            )  # fmt: skip
            # summary and log entry in one transaction: a crash leaves both or neither
            try:
                saved, written = await self.c._writes.save_compaction(new_summary, entry, tenant)
            except SummaryConflictError as lost:
                # Another process saved a summary reaching as far first: a lost race,
                # not an error. Nothing was written; adopt the winner and stand down.
                self.c._keeper.apply_summary(tail, lost.latest)
                if background:
                    raise _StoodDown from None
                return self._stood_down(lost.latest, outline, full, n, before_tokens, urgency,
                                        notes, flushed, prompt)  # fmt: skip
            version = saved.version
            self.c._keeper.apply_summary(tail, saved, written)
            current = self.c._keeper.cache.get(key)
            if current is not None and current is not tail:  # evicted and read afresh meanwhile
                self.c._keeper.apply_summary(current, saved)
        elif explicit and not preview:
            entry = CompactionEntry(
                0, conversation, self.c.clock(), urgency.urgency, False, before_tokens, before_tokens,
                None, after, strategies, {"notes": list(notes), "reason": "nothing to summarise"},
            )  # fmt: skip
            await self.c.backend.compactions.log_compaction(entry, tenant=tenant)
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
            [self.c._writes.view(full[i])[0] for i in kept] if prompt else []
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
        if not o.counter or o.counter != self.c.engine.count_key:
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
        counter, ov = self.c.engine.counter, self.c.engine.overhead
        for i in todo:
            made = self.c._writes.view(full[i])
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
        more = await self.c.backend.conversations.read(
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
        tail = await self.c._tail(conversation, tenant, user)
        await self.c._keeper.owned(tail, conversation, tenant, user)
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
            running = self.running(key)
            if running is not None:
                await asyncio.wait([asyncio.wrap_future(running)])
        finally:
            if yielding:
                self._yield_to.discard(key)
        return await self.compact_now(
            conversation, tenant, user, tail, None, wait=True, preview=preview, force=force
        )
