"""Reading stored conversations into their in-process tails, and keeping those current.

`TailKeeper` owns the `TailCache` of a `Conversations`. Every read or write of a
conversation starts with `TailKeeper.tail`: one cheap query for the
conversation's version (`ConversationLog.version`); a cached tail at that version is
current, whatever any process wrote before; another catches up with what is new
(O(new messages)) or is read afresh, as a new process would; one whose
conversation was deleted since, by any process, is dropped with all this process
holds of the conversation (`forget`), as is all that is held of a conversation
made again after a delete when its tail is read afresh. Writes of this process add what they
stored (`grow`) and adopt the summaries they saved (`apply_summary`), following
the version they left (`Tail.follow`), so that the next build need not catch
up. Nothing here is needed for correctness: dropping every tail at any moment
changes no build.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model._messages import Message
from ..stores import ConversationInfo, Summary
from ..stores._records import not_owner
from ..tokens._frame import count_message
from ._tail import Tail, TailCache
from ._write_path import Offload

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["TailKeeper"]

# More new messages than this from another process, and a tail is read afresh (as
# at a cold start) instead of taking in every one of them.
_RELOAD_AFTER = 256


def _check_owner(tail: Tail, conversation: str, tenant: str, user: str) -> None:
    """`InvalidMessageError` (``user``) if the conversation is known to be another user's."""
    if tail.owner is not None and tail.owner != user:
        raise not_owner(conversation, tenant, user)


def _reborn(tail: Tail, info: ConversationInfo | None) -> bool:
    """Whether the conversation ``tail`` holds was deleted since (and perhaps made again).

    Asked when the version moved. The store never gives a version of an id out
    twice: a conversation made again after a delete (`Conversations.delete`, maybe
    in another process) begins above every version the deleted one had
    (`ConversationInfo.first_version`), so it began after the newest version the
    tail was known current at (`Tail.verified`) exactly when it is another one. A
    tail never known current (0: filled by this process's own writes alone) is
    taken for another's if it holds anything: read afresh, never trusted.
    """
    if info is None:
        return tail.owner is not None or tail.last_seq > 0
    return info.first_version > tail.verified and (tail.last_seq > 0 or tail.owner is not None)


class TailKeeper:
    """The tails of a `Conversations` (``c``: its store, engine and window), kept current."""

    def __init__(self, conv: Conversations, cache: TailCache) -> None:
        self.c = conv
        self.cache = cache

    async def tail(self, conversation: str, tenant: str, user: str) -> Tail:
        """The conversation's tail, up to date, for ``user`` only.

        Every public method that reads or writes a stored conversation starts
        here (`append` and `import_messages` are refused by the store as well): a
        conversation belongs to the user who first wrote to it, and anyone else
        gets `InvalidMessageError` (``user``, `_check_owner`) before anything of
        it is read or written. The tail learns its owner before any message
        enters it; see `_owned` for one that knows none yet.
        """
        tail = await self.synced(conversation, tenant)
        _check_owner(tail, conversation, tenant, user)
        return tail

    def sizes(self) -> dict[str, int]:
        """`Conversations.cache_sizes`: what each in-process cache holds now."""
        recall = self.c._recall
        return {
            "tails": len(self.cache),
            "tail_bytes": self.cache.bytes,
            "recall_indexes": len(recall._indexes) if recall is not None else 0,
            "window_memos": len(self.c.engine._memos),
            "jobs": self.c._runner.pending(),
        }

    def drop_all(self) -> None:
        """`Conversations.drop_caches`: tails, recall's indexes, the engine's accelerators."""
        self.cache.clear()
        if self.c._recall is not None:
            self.c._recall.drop_indexes()
        self.c.engine.drop_caches()

    def forget(self, conversation: str, tenant: str, user: str | None) -> None:
        """Drop what this process holds of a deleted conversation: its tail, recall's
        index, outlines and speakers, and ``user``'s (the owner's) window walk and
        cached blocks in the engine."""
        self.cache.discard((tenant, conversation))
        if self.c._recall is not None:
            self.c._recall.forget(conversation, tenant)
        if user is not None:
            self.c.engine.forget(tenant=tenant, user=user, conversation=conversation)

    async def owned(self, tail: Tail, conversation: str, tenant: str, user: str) -> None:
        """`_tail`'s check again, after reading, for a tail that knew no owner.

        Such a tail had nothing of the conversation when `_tail` checked it, but
        another process may have made the conversation since: what was read from
        the store for it (recall's turns, a read-back) is only handed out after
        this has asked the store whose the conversation is now.
        """
        if tail.owner is None:
            info = await self.c.backend.conversations.get_conversation(conversation, tenant=tenant)
            if info is not None:
                with tail.lock:
                    tail.owner = info.user
        _check_owner(tail, conversation, tenant, user)

    async def synced(self, conversation: str, tenant: str) -> Tail:
        """The conversation's tail, brought up to date with the store (O(new messages)).

        The cached tail is an accelerator keyed by the conversation's version
        (`ConversationLog.version`, one cheap query): at the version it was last current at,
        nothing was written since, by this process or another, and it is returned
        as it is (its own writes keep it current: `Tail.follow`). Otherwise it
        catches up with what is new (messages, counts, a newer summary), or is read
        afresh when much is new; a conversation with no cached tail is read from the
        store, as a new process would.
        """
        key = (tenant, conversation)
        tail = self.cache.get(key)
        version = await self.c.backend.conversations.version(conversation, tenant=tenant)
        if tail is not None and tail.version == version:
            return tail
        info = await self.c.backend.conversations.get_conversation(conversation, tenant=tenant)
        if tail is not None and _reborn(tail, info):
            # deleted since (and made again?) by another process: nothing held of it stays
            self.forget(conversation, tenant, tail.owner)
            tail = None
        if tail is None:
            tail = Tail()
            if info is not None:
                if info.first_version > 1:
                    # Made again after a delete: what recall and the engine hold of the
                    # id may be the deleted one's (its tail was evicted, and with it
                    # the check above). Read afresh, as a new process would.
                    self.forget(conversation, tenant, info.user)
                tail.owner = info.user
                written = await self.load(tail, conversation, tenant, info)
                with tail.lock:
                    tail.current(info.version)
                    tail.follow(written)  # the load stored counts it made: still current
            else:
                tail.version = 0  # no such conversation (yet)
            self.cache.put(key, tail)
            return tail
        if info is None:  # not made yet: the tail has nothing either
            with tail.lock:
                tail.version = 0
            return tail
        with tail.lock:
            tail.version = None  # until brought up to date below
            tail.owner = info.user
        if info.last_seq - tail.last_seq > _RELOAD_AFTER:
            # Much was written elsewhere (another process imported, say): read
            # the tail afresh, as a new process would, instead of every message.
            written = await self.load(tail, conversation, tenant, info)
            with tail.lock:
                if tail.last_seq >= info.last_seq and tail.version is None:
                    # not if an older reload on another thread swapped in after ours
                    tail.current(info.version)
                    tail.follow(written)
            return tail
        if info.last_seq > tail.last_seq:  # another writer's messages
            new = await self.c.backend.conversations.read(
                conversation, tenant=tenant, after_seq=tail.last_seq, upto_seq=info.last_seq
            )
            self.absorb(tail, new)
        latest = await self.c.backend.summaries.latest_summary(conversation, tenant=tenant)
        if latest is not None and (tail.summary is None or latest.version > tail.summary.version):
            self.apply_summary(tail, latest)
        with tail.lock:
            # the store's running total (counts stored since by anyone included)
            tail.total_tokens = info.token_total
            # Current at ``info.version`` only if it holds everything up to
            # ``info.last_seq``: a reload on another thread may have swapped older
            # contents in meanwhile (then it stays unknown, and the next call asks).
            if tail.last_seq >= info.last_seq and (
                tail.version is None or tail.version < info.version
            ):
                tail.current(info.version)
        return tail

    async def load(
        self, tail: Tail, conversation: str, tenant: str, info: ConversationInfo
    ) -> int | None:
        """(Re)fill ``tail`` from the store: the summary, the newest messages after it, totals.

        Returns the version left by storing the counts of messages it found
        uncounted (None if it stored none).
        """
        summary = await self.c.backend.summaries.latest_summary(conversation, tenant=tenant)
        msgs = await self.c.backend.conversations.read_tail(
            conversation, tenant=tenant, max_tokens=2 * self.c.window_tokens,
            after_seq=summary.upto_seq if summary else 0, counter=self.c.engine.count_key,
        )  # fmt: skip
        users = await self.c.backend.conversations.count_messages(
            conversation, tenant=tenant, role="user"
        )
        before = users - sum(1 for m in msgs if m.role == "user")
        covered = await self.covered_tokens(conversation, tenant, summary, info.token_total)
        # Filled apart and swapped in whole under the lock: a build or a background
        # summary reading the tail meanwhile (another thread) sees the old contents
        # or the new, never a half-filled tail.
        fresh = Tail(summary=summary)
        # Messages stored with no count (a bulk import cut short before its newest
        # were counted) are counted now, and those counts stored.
        uncounted = [m for m in msgs if not m._token_cache]
        absorbed = self.absorb(fresh, msgs, uncounted)
        added = 0
        written: int | None = None
        if absorbed:
            ms, vs, ns = zip(*absorbed, strict=True)
            written = await self.c._writes.store_counts(conversation, tenant, ms, vs, ns)
            added = sum(ns)
        with tail.lock:
            if tail.last_seq > max(fresh.last_seq, info.last_seq):
                # A catch-up on another thread took the tail past what this read
                # saw: keep the newer contents (a build may be reading them).
                return written
            newer = (
                tail.summary
                if tail.summary and summary and tail.summary.version > summary.version
                else None
            )
            tail.version = None  # the caller says at which version, once it knows
            tail.clear_messages()
            tail.set_summary(summary)
            tail.extend(list(fresh.messages), list(fresh.costs))
            tail.user_turns = fresh.user_turns + before
            tail.last_seq = max(fresh.last_seq, info.last_seq)
            tail.total_tokens = info.token_total + added
            tail.covered_tokens = covered
        if newer is not None:  # adopted meanwhile by a background summary of this process
            self.apply_summary(tail, newer)
        return written

    async def covered_tokens(
        self, conversation: str, tenant: str, summary: Summary | None, total: int
    ) -> int:
        """Stored tokens of the messages a summary covers (recorded with it in its meta)."""
        if summary is None:
            return 0
        recorded = summary.meta.get("covered_tokens")
        if isinstance(recorded, int):
            return recorded
        _, after = await self.c.backend.conversations.token_total(
            conversation, tenant=tenant, after_seq=summary.upto_seq
        )
        return max(0, total - after)

    def absorb(
        self, tail: Tail, messages: Sequence[Message], report: Sequence[Message] = ()
    ) -> list[tuple[Message, tuple[Message, Sequence[Offload]], int]]:
        """Push stored ``messages`` (their views, oldest first) onto the tail; returns
        ``(message, (view, offloads), cost)`` of those that are in ``report``.

        Idempotent and atomic: the views are made outside the tail's lock, then,
        holding it, only the messages newer than the tail's newest are taken in.
        Two catch-ups of one tail may run at once (a build, and a background
        summary on the job runner's thread, both finding the tail behind); without
        this both pushed the same messages, and a window held them twice.
        """
        counter, ov = self.c.engine.counter, self.c.engine.overhead
        wanted = {id(m) for m in report}
        made_all = []
        out: list[tuple[Message, tuple[Message, Sequence[Offload]], int]] = []
        for m in messages:
            made = self.c._writes.view(m)
            cost = count_message(counter, made[0], ov)
            made_all.append((made[0], cost))
            if id(m) in wanted:
                out.append((m, made, cost))
        with tail.lock:
            for view, cost in made_all:
                self._push_locked(tail, view, cost)
        return out

    def apply_summary(self, tail: Tail, summary: Summary, written: int | None = None) -> None:
        """Adopt a new summary: drop tail messages it covers.

        ``written`` is the version that the write which saved it left, when this
        process saved it: a tail that was current just before that write stays
        current (`Tail.follow`), so the next build need not catch up.
        """
        with tail.lock:
            if written is not None:
                tail.follow(written)
            if tail.summary is not None and tail.summary.version >= summary.version:
                return
            tail.set_summary(summary)
            recorded = summary.meta.get("covered_tokens")
            if isinstance(recorded, int):
                tail.covered_tokens = recorded
            while tail.messages and (tail.messages[0].seq or 0) <= summary.upto_seq:
                tail.pop_oldest()

    def _push_locked(self, tail: Tail, message: Message, cost: int) -> None:
        """Add ``message`` as the tail's newest (under ``tail.lock``), unless it has it."""
        seq = message.seq or 0
        if seq and seq <= tail.last_seq:
            return  # taken in already (by a catch-up on another thread)
        limit = 2 * self.c.window_tokens  # enough for the largest window, with room to spare
        tail.push(message, cost)
        if seq > tail.last_seq:
            tail.total_tokens += cost
        tail.last_seq = max(tail.last_seq, seq)
        if message.role == "user":
            tail.user_turns += 1
        while tail.tokens > limit and len(tail.messages) > 1:
            tail.pop_oldest()

    def grow(
        self,
        conversation: str,
        tenant: str,
        user: str,
        stored: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
        first: int = 0,
        written: int | None = None,
    ) -> None:
        """Add freshly stored messages to the tail, if nobody else wrote in between.

        ``written`` is the conversation's version that the write which stored them
        left: a tail that was current at the version before stays current after it.

        ``views`` and ``tokens`` belong to ``stored[first:]``; the messages before
        ``first`` were stored uncounted by a bulk import (see `_settle`), which
        counted enough of the newest ones to fill the tail. Only the newest
        messages that fit the tail's limit stay in it, so only those get a prompt
        copy: a bulk batch of 1,000 used to copy and push all 1,000 and pop most of
        them again. The running totals count every counted message, as the store's
        do. The result is what `_push`-ing them one by one would leave.
        """
        tail = self.cache.get((tenant, conversation))
        if tail is None or not stored:
            return
        with tail.lock:  # the store took them for ``user``: it owns the conversation
            tail.owner = user
        if tail.last_seq != (stored[0].seq or 0) - 1:
            return
        limit = 2 * self.c.window_tokens
        key = self.c.engine.count_key
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
            if tail.last_seq != (stored[0].seq or 0) - 1:
                # a catch-up on another thread took them in meanwhile (or more)
                tail.version = None
                return
            tail.follow(written)
            last = tail.last_seq
            for saved, cost in zip(counted, tokens, strict=True):
                seq = saved.seq or 0
                if seq > last:
                    tail.total_tokens += cost
                    last = seq
            tail.last_seq = max(last, stored[-1].seq or 0)
            tail.user_turns += users
            if start > 0 or first > 0:  # the batch alone fills the tail: nothing older stays
                tail.clear_messages()
            while tail.messages and tail.tokens + acc > limit:
                tail.pop_oldest()
            tail.extend(kept, tokens[start:])
