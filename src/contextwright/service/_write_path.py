"""The write path of stored conversations: prompt views, counts, and store calls.

`Writes` turns messages into what is stored and what the prompt shows: tool
results compressed for the prompt (`ToolResultCompressor`), their originals kept
readable through read-back keys, each message's prompt cost counted once. Its
store calls run on the calling thread (`Conversations` puts them on the store's
worker, or inline under the sync API) and report the conversation's version that
the write left, where the store says (see `Tail.follow`). A store's extra
capabilities (``append_versioned``, ``set_message_tokens_with_readback``,
``save_compaction_versioned``) are used where it has them; the plain `Store`
methods otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .._errors import InvalidMessageError
from ..model._messages import Message
from ..model._parts import ToolResultPart
from ..stores import CompactionEntry, Summary
from ..tokens._frame import count_message

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

    def store_batch(
        self,
        conversation: str,
        batch: list[Message],
        views: list[tuple[Message, Sequence[Offload]]],
        tokens: list[int],
        tenant: str,
        user: str,
    ) -> tuple[list[Message], int | None]:
        """Store a prepared batch and its offloaded tool results, on the calling thread.

        A store with ``append_versioned`` keeps the messages and their read-back
        keys in one transaction, the keys referring to the stored tool results
        (the store already keeps them verbatim: no second copy), and says which
        version of the conversation that write left; another `Store` gets a plain
        `Store.append` and the originals with `put_working`, one call each, after
        the messages (the version is then not known: None).
        """
        counter = self.c.engine.count_key
        store = self.c.store
        readback = [
            (i, call_id, key, ttl)
            for i, (_, offloads) in enumerate(views)
            for key, call_id, _, ttl in offloads
        ]
        versioned = getattr(store, "append_versioned", None)
        if versioned is not None:
            stored, version = versioned(
                conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter,
                readback=readback,
            )  # fmt: skip
            return stored, version
        stored = store.append(
            conversation, batch, tenant=tenant, user=user, tokens=tokens, counter=counter
        )
        self.put_originals(conversation, tenant, views)
        return stored, None

    def save_compaction(
        self, summary: Summary, entry: CompactionEntry, tenant: str
    ) -> tuple[Summary, int | None]:
        """`Store.save_compaction` on the calling thread, and the version it left (if known)."""
        versioned = getattr(self.c.store, "save_compaction_versioned", None)
        if versioned is not None:
            saved, _, version = versioned(summary, entry, tenant=tenant)
            return saved, version
        saved, _ = self.c.store.save_compaction(summary, entry, tenant=tenant)
        return saved, None

    def put_originals(
        self, conversation: str, tenant: str, views: Sequence[tuple[Message, Sequence[Offload]]]
    ) -> None:
        """Offloaded tool results as working-memory copies: for a `Store` that cannot
        keep read-back keys to its stored messages (one with ``append_versioned`` can)."""
        for _, offloads in views:
            for key, _, original, ttl in offloads:
                self.c.store.put_working(
                    conversation, key, original, tenant=tenant, ttl=ttl,
                    meta={"kind": "tool_result"},
                )  # fmt: skip

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

    def store_counts(
        self,
        conversation: str,
        tenant: str,
        messages: Sequence[Message],
        views: Sequence[tuple[Message, Sequence[Offload]]],
        tokens: Sequence[int],
    ) -> int | None:
        """Store counts (and read-back keys) for stored messages that lacked them, on the
        calling thread; the version that left, if known."""
        counts = {m.seq or 0: n for m, n in zip(messages, tokens, strict=True)}
        refs = [
            (m.seq or 0, call_id, key, ttl)
            for m, (_, offloads) in zip(messages, views, strict=True)
            for key, call_id, _, ttl in offloads
        ]
        store, name = self.c.store, self.c.engine.count_key
        with_readback = getattr(store, "set_message_tokens_with_readback", None)
        if with_readback is not None:
            version = with_readback(
                conversation, tenant=tenant, counts=counts, counter=name, readback=refs
            )
            return version if isinstance(version, int) else None
        store.set_message_tokens(conversation, tenant=tenant, counts=counts, counter=name)
        self.put_originals(conversation, tenant, views)
        return None

    async def write(
        self, conversation: str, messages: Sequence[Message] | Message, tenant: str, user: str
    ) -> list[Message]:
        """Prepare, store (one transaction) and add to the tail: one batch of an append."""
        batch, views, tokens = self.prepare(messages)
        # one hop to the store's worker for the messages and their read-back keys
        # (AsyncStore._run is what its own methods use)
        stored, written = await self.c.db._run(
            functools.partial(self.store_batch, conversation, batch, views, tokens, tenant, user)
        )
        self.c._keeper.grow(conversation, tenant, user, stored, views, tokens, written=written)
        return stored

    async def write_uncounted(
        self, conversation: str, messages: list[Message], tenant: str, user: str
    ) -> list[Message]:
        """Store a batch of a bulk import without counts or prompt views (see `settle`)."""
        batch, _, _ = self.prepare(messages, count=False)
        return await self.c.db._run(
            functools.partial(
                self.c.store.append, conversation, batch, tenant=tenant, user=user,
                tokens=None, counter="",
            )
        )  # fmt: skip

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
            await self.c.db._run(
                functools.partial(self.store_counts, conversation, tenant, ms, vs, ns)
            )
        self.c._keeper.grow(conversation, tenant, user, stored, views, tokens, first)

    async def import_batches(
        self, conversation: str, messages: Iterable[Message], tenant: str, user: str,
        batch_size: int, progress: Callable[[int], object] | None,
    ) -> list[Message]:  # fmt: skip
        """Store ``messages`` in batches of ``batch_size`` (`Conversations.import_messages`).

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
