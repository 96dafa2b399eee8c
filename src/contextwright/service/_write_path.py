"""The write path of stored conversations: appends, imports, prompt views and counts.

`Writes` turns messages into what is stored and what the prompt shows: tool
results compressed for the prompt (`ToolResultCompressor`), their originals kept
readable through read-back keys that the backend writes in the same transaction
as the messages (`ConversationLog.append`: no second copy), each message's
prompt cost counted once. Every write reports the conversation's version it
left (`Written`), which the tail follows (`Tail.follow`). After a write it
schedules what follows one: the background summary of a bulk write, or recall's
indexing of the turn that ended (`index_later`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .._errors import InvalidMessageError
from ..model._messages import Message
from ..model._parts import ToolResultPart
from ..stores import CompactionEntry, Summary, Written
from ..tokens._frame import count_message
from ._tracing import APPEND, IMPORT, append_attributes, conversation_attributes, tracer_of

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["Offload", "Writes"]

# A tool result to offload: (working-memory key, call id, original text, ttl).
Offload = tuple[str, str, str, float]
_NO_OFFLOADS: tuple[Offload, ...] = ()


class Writes:
    """The write path of a `Conversations` (``c``: its engine, store and compressor)."""

    def __init__(self, conv: Conversations) -> None:
        self.c = conv
        self._indexing: set[tuple[str, str]] = set()  # conversations with an index job pending

    def view(self, message: Message) -> tuple[Message, Sequence[Offload]]:
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
            c = self.c.compressor.compress(p.content, tool=p.name, key=f"tool:{p.call_id}")
            if c.changed:
                changed = True
                parts.append(ToolResultPart(p.call_id, c.text, p.is_error, p.name))
                if c.offload_key and c.original is not None:
                    ttl = self.c.compressor.policy(p.name).ttl
                    offloads.append((c.offload_key, p.call_id, c.original, ttl))
            else:
                parts.append(p)
        if not changed:
            return message, _NO_OFFLOADS
        meta = {**message.metadata, "compressed_view": True}
        return message.replace(parts=tuple(parts), metadata=meta), offloads

    def prepare(
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
        views = [self.view(m) for m in batch]
        counter, ov = self.c.engine.counter, self.c.engine.overhead
        return batch, views, [count_message(counter, v, ov) for v, _ in views]

    async def store_batch(
        self,
        conversation: str,
        batch: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
        tenant: str,
        user: str,
    ) -> Written[list[Message]]:
        """Store a prepared batch, and the read-back keys of its offloaded tool results
        (referring to the stored results: no second copy), in one transaction."""
        readback = [
            (i, call_id, key, ttl)
            for i, (_, offloads) in enumerate(views)
            for key, call_id, _, ttl in offloads
        ]
        return await self.c.backend.conversations.append(
            conversation, batch, tenant=tenant, user=user, tokens=tokens,
            counter=self.c.engine.count_key, readback=readback,
        )  # fmt: skip

    async def save_compaction(
        self, summary: Summary, entry: CompactionEntry, tenant: str
    ) -> tuple[Summary, int]:
        """A summary and its log entry in one transaction; the saved summary and the version left."""
        saved = await self.c.backend.compactions.save_compaction(summary, entry, tenant=tenant)
        return saved.value[0], saved.version

    def count_newest(
        self, messages: Sequence[Message]
    ) -> tuple[int, list[tuple[Message, Sequence[Offload]]], list[int]]:
        """(first, views, counts) of ``messages[first:]``: the newest that fill the tail.

        Counting goes newest first and stops at the first message that does not fit
        (counted too: it took counting to know), so it reaches everything a window
        or the tail can hold.
        """
        limit = 2 * self.c.window_tokens
        counter, ov = self.c.engine.counter, self.c.engine.overhead
        views: list[tuple[Message, Sequence[Offload]]] = []
        tokens: list[int] = []
        acc, first = 0, len(messages)
        while first > 0 and acc <= limit:
            first -= 1
            view = self.view(messages[first])
            cost = count_message(counter, view[0], ov)
            views.append(view)
            tokens.append(cost)
            acc += cost
        views.reverse()
        tokens.reverse()
        return first, views, tokens

    async def store_counts(
        self,
        conversation: str,
        tenant: str,
        messages: Sequence[Message],
        views: Sequence[tuple[Message, Sequence[Offload]]],
        tokens: Sequence[int],
    ) -> int:
        """Store counts (and read-back keys) for stored messages that lacked them; the version left."""
        counts = {m.seq or 0: n for m, n in zip(messages, tokens, strict=True)}
        refs = [
            (m.seq or 0, call_id, key, ttl)
            for m, (_, offloads) in zip(messages, views, strict=True)
            for key, call_id, _, ttl in offloads
        ]
        return await self.c.backend.conversations.set_message_tokens(
            conversation, tenant=tenant, counts=counts, counter=self.c.engine.count_key,
            readback=refs,
        )  # fmt: skip

    async def append(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str,
        index_later: bool,
    ) -> list[Message]:  # fmt: skip
        """`Conversations.append`; ``index_later`` brings recall's turn index up to date
        in the background (`index_later`): not for a build's own message, whose turn
        is still being built. A ``contextwright.append`` span when tracing."""
        tracer = tracer_of(self.c)
        if not tracer.enabled:
            return await self._append(conversation, messages, tenant, user, index_later)
        with tracer.span(APPEND, conversation_attributes(conversation, tenant)) as span:
            stored = await self._append(conversation, messages, tenant, user, index_later)
            span.update(append_attributes(tracer, stored, messages))
        return stored

    async def _append(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str,
        index_later: bool,
    ) -> list[Message]:  # fmt: skip
        stored = await self.write(conversation, messages, tenant, user)
        if len(stored) >= self.c.compaction.summary_message_threshold:
            await self.c._compactor.summarise_if_due(conversation, tenant, user)
        elif index_later:
            self.index_later(conversation, tenant)
        return stored

    def index_later(self, conversation: str, tenant: str) -> None:
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
        recall = self.c._recall
        key = (tenant, conversation)
        if recall is None or key in self._indexing or not recall.has_index(conversation, tenant):
            return
        self._indexing.add(key)

        async def job() -> None:
            self._indexing.discard(key)  # an append from now on schedules another
            tail = self.c._keeper.cache.get(key)
            recent = tail.snapshot()[0] if tail is not None else []
            await recall.catch_up(conversation, tenant, recent)

        self.c._runner.submit(job())

    async def write(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str
    ) -> list[Message]:
        """Prepare, store (one transaction) and add to the tail: one batch of an append."""
        batch, views, tokens = self.prepare(messages)
        written = await self.store_batch(conversation, batch, views, tokens, tenant, user)
        stored = written.value
        self.c._keeper.grow(
            conversation, tenant, user, stored, views, tokens, written=written.version
        )
        return stored

    async def write_uncounted(
        self, conversation: str, messages: list[Message], tenant: str, user: str
    ) -> list[Message]:
        """Store a batch of a bulk import without counts or prompt views (see `settle`)."""
        batch, _, _ = self.prepare(messages, count=False)
        written = await self.c.backend.conversations.append(
            conversation, batch, tenant=tenant, user=user, tokens=None, counter=""
        )
        return written.value

    async def settle(
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
        name = self.c.engine.count_key
        # a retry returns what an earlier run stored (and counted): not written again
        counted = {id(m) for m in stored if name in m._token_cache}
        first, views, tokens = self.count_newest(stored)
        newest = stored[first:]
        pending = [
            (m, v, n) for m, v, n in zip(newest, views, tokens, strict=True) if id(m) not in counted
        ]
        if pending:
            ms, vs, ns = zip(*pending, strict=True)
            await self.store_counts(conversation, tenant, ms, vs, ns)
        self.c._keeper.grow(conversation, tenant, user, stored, views, tokens, first)

    async def import_messages(
        self, conversation: str, messages: Iterable[Message], tenant: str, user: str,
        batch_size: int, progress: Callable[[int], object] | None, optimize_index: bool,
    ) -> list[Message]:  # fmt: skip
        """`Conversations.import_messages`: the batches (`import_batches`), the index
        optimised if asked, then the summary of what lies outside the window scheduled.
        A ``contextwright.import`` span when tracing."""
        tracer = tracer_of(self.c)
        with tracer.span(IMPORT, conversation_attributes(conversation, tenant)) as span:
            stored = await self.import_batches(
                conversation, messages, tenant, user, batch_size, progress
            )
            span.set("contextwright.messages", len(stored))
        if stored and optimize_index:
            await self.c.backend.search.optimize_index()
        if stored:
            await self.c._compactor.summarise_if_due(conversation, tenant, user)
        return stored

    async def import_batches(
        self, conversation: str, messages: Iterable[Message], tenant: str, user: str,
        batch_size: int, progress: Callable[[int], object] | None,
    ) -> list[Message]:  # fmt: skip
        """Store ``messages`` in batches of ``batch_size``.

        One batch is counted and stored as an append would; more are stored
        uncounted, and the newest of them counted at the end (`settle`), also when
        a batch fails part way.
        """
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
                    stored += await self.write_uncounted(conversation, chunk, tenant, user)
                else:  # a single batch is counted and stored as `append` would
                    stored += await self.write(conversation, chunk, tenant, user)
                if progress is not None:
                    progress(len(chunk))
                chunk = after
        except BaseException:
            if deferred and stored:  # what was stored still gets its tail counted
                with contextlib.suppress(Exception):
                    await self.settle(conversation, tenant, user, stored)
            raise
        if deferred:
            await self.settle(conversation, tenant, user, stored)
        return stored
