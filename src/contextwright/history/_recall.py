"""Recall: exact old turns relevant to the current message, back from the store.

Once a turn has left the window it survives in the prompt only through the summary, which
keeps the gist and loses the wording. `RecallSource` ranks the conversation's stored turns
that are older than the history window (`TurnRanker`: the store's full-text search — FTS5
BM25 on SQLite —, spread to neighbouring turns, optional vectors, speaker and date priors —
see ``_rank.py``) and packs the best into one block that fits its token allowance
(``_packing.py``: greedy by rank, one date line per day, counted exactly). ``limit`` caps
the number of turns (the default source is sparing); ``fill`` also takes turns with no
evidence at all, ordered by the priors, when the caller gives recall most of the budget
(`MEMORY_QA_SHARES`). With a ``counter`` (give it the engine's: its caching counter then
serves the engine's own count of the block) packing is exact; the allowance is net of the
frame the engine puts around dynamic blocks. Without a counter a conservative heuristic stands in.

The window is decided after the sources are fetched, so recall searches below the engine's
estimate of where it will start (`Turn.window_start`; without one, below the history given),
and the engine leaves out a recalled turn that the final window holds after all
(`RecalledTurns.without`).

Where the turns come from depends on what is ranked:

- **Hits and their surroundings** (the default: a turn limit, no ``fill``, no embedder).
  One store call (`search_outlines`) returns the best full-text hits below the window and
  the outlines of the turns within neighbour reach of each, in one snapshot; they are ranked
  and packed. Stored messages never change, so the outlines read are kept in a cache bounded
  in bytes (``_outlines.py``, ``outline_cache_bytes``) and the store reads only those it
  lacks; the conversation's speaker names are asked of the store once, then extended from
  each window. Neither is needed for a result: a fresh process recalls exactly what a warm
  one does.
- **Every turn** (``fill``, or vectors). The conversation's turns are read from
  the store once (as outlines: the text without decoding whole messages, tool
  results unread) and then extended with what is new (``read_outline(after_seq=…)``,
  only when the history shows newer messages). The full-text evidence still
  comes from the store's search. `prepare` reads ahead of time, which matters
  with an embedder, whose first batch takes a while (MiniLM: about 6 ms a turn
  on CPU), and `catch_up` adds the turns stored since the last fetch, for a
  background job between turns, so that the next fetch finds nothing to read.
  The indexes are read and extended under a lock, never held across an await.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._errors import ConfigError
from ..budget._fit import JOIN_TOKENS
from ..model._blocks import Block, Priority
from ..model._messages import Message
from ..sources._base import FetchResult, SourceBase
from ..sources._state import Turn
from ..sources._templates import templates_for, turn_context
from ..stores import MessageOutline
from ..tokens._count import HeuristicCounter, TokenCounter
from ..tokens._frame import message_frame
from ._outlines import OutlineCache
from ._packing import CostMemo, pack
from ._rank import QueryAnalysis, RankWeights, TurnIndex, TurnRanker, analyse, speaker_map

__all__ = ["MEMORY_QA_SHARES", "RecallSource", "SearchesMessages"]

# Budget shares for assistants that answer questions about a long past
# (`Budget(total, shares=MEMORY_QA_SHARES)`): recalled turns get most of what the
# protected zone leaves. The recent window keeps a little, for continuity, and
# whatever recall leaves. The summary only gets what is left: verbatim turns
# answer questions, a gist rarely does (on LoCoMo, 3% for the summary and 8% for
# the window instead of 0% and 3% cost 3 points of recall at 1,000 tokens). "system" is the target of static blocks
# (profiles, pinned memory); as it is no claim on the rest, it also keeps the
# fetch allowance (retrieved share x whole budget) below the retrieved section's
# grant (its share of the budget less the protected zone), so that a recall
# block packed to its allowance is not cut while system prompt and question
# stay under 5% of the budget.
MEMORY_QA_SHARES: Mapping[Any, float] = {
    "system": 0.05, "summary": 0.0, "retrieved": 0.92, "recent": 0.03, "input": 0.0,
}  # fmt: skip


class SearchesMessages(Protocol):
    """What recall needs from a store (`AsyncStore`): its full-text search, speakers, outlines."""

    def search_outlines(
        self, conversation: str, query: str, *, tenant: str, limit: int = 10,
        before_seq: int | None = None, match_budget: int | None = None, around: int = 0,
        known: Container[int] = (),
    ) -> Awaitable[tuple[list[tuple[int, float]], list[MessageOutline]]]: ...  # fmt: skip

    def speaker_names(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> Awaitable[list[str]]: ...

    def read_outline(
        self, conversation: str, *, tenant: str, after_seq: int = 0, upto_seq: int | None = None
    ) -> Awaitable[list[MessageOutline]]: ...


# `RecallSource.catch_up` leaves an index further behind than this to the next fetch
# (a bulk import is indexed when the conversation is next searched, not in the
# background, where it would hold the index's lock for long).
_CATCH_UP_MOST = 64

_HEADER = {
    "en": "Earlier turns of this conversation related to the current message (verbatim; most relevant days first):",
    "zh": "本次对话中与当前消息相关的较早原话(按日期分组,最相关的在前):",
}


@dataclass
class RecallSource(SourceBase):
    """Stored turns older than the window that bear on the message, packed to the allowance.

    ``store`` is an `AsyncStore` (`SearchesMessages`: its search, speakers and outlines).
    ``limit`` is the most turns shown (None: as many as fit). ``min_score`` drops
    full-text hits scoring below it. ``ranker`` orders the turns (give it an
    embedder for vector evidence). ``counter`` makes packing exact. ``fill``
    takes turns without any match too. ``search_limit`` bounds the full-text hits
    considered per message; ``max_conversations`` the turn indexes kept in memory.
    ``match_budget`` bounds the cost of a search: BM25 scores every turn that
    holds any query term, so the terms are taken rarest first (by the turns that
    hold them) until their turn counts add up to this, and the common rest is
    left out — those say least about which turn is meant, and they made a
    search grow with the conversation (None: every term is searched).
    ``outline_cache_bytes`` bounds the outlines kept of the messages around past
    hits (0: none kept; a smaller cache reads more, never recalls differently).
    """

    store: Any = None  # SearchesMessages
    limit: int | None = 6
    min_score: float = 0.0
    name: str = "recalled_turns"
    priority: int = Priority.P1
    deadline: float = 0.5
    counter: TokenCounter | None = None
    ranker: TurnRanker = field(default_factory=TurnRanker)
    fill: bool = False
    search_limit: int = 500
    match_budget: int | None = None
    session_gap: float = 3600.0
    max_conversations: int = 16
    outline_cache_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        self._indexes: OrderedDict[tuple[str, str], TurnIndex] = OrderedDict()
        self._loading: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._embed_lock = threading.Lock()
        # Guards the turn indexes: a background job (`catch_up`) may extend one while
        # a fetch on another thread reads it. Never held across an await.
        self._lock = threading.Lock()
        self._costs = CostMemo()
        # speakers named before each conversation's window, and how far that goes
        self._names: OrderedDict[tuple[str, str], tuple[int, frozenset[str]]] = OrderedDict()
        size = self.outline_cache_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"outline_cache_bytes must be a non-negative integer, got {size!r}")
        self._outlines = OutlineCache(size)

    @classmethod
    def for_memory_qa(
        cls, store: Any, *, counter: TokenCounter | None = None, embedder: Any = "auto",
        weights: RankWeights | None = None, **kw: Any,
    ) -> RecallSource:  # fmt: skip
        """The recall of the memory-QA configuration: as many turns as fit, exact packing.

        Pair it with ``Budget(total, shares=MEMORY_QA_SHARES)`` and no goal restatement
        (`memory_qa_engine` does both); ``weights``, ``embedder``: see `TurnRanker`.
        """
        kw.setdefault("deadline", 2.0)  # a first call may have to index the conversation
        return cls(store=store, limit=None, fill=True, counter=counter,
                   ranker=TurnRanker.for_memory_qa(weights, embedder), **kw)  # fmt: skip

    # -- the turn index ------------------------------------------------------------------

    async def prepare(
        self, conversation: str, *, tenant: str = "default", locale: str = "en"
    ) -> TurnIndex:
        """Bring the conversation's turn index up to date now (and embed new turns)."""
        return await self._refresh(conversation, tenant, locale)

    def has_index(self, conversation: str, tenant: str = "default") -> bool:
        """Whether the conversation's turn index is in memory (read from the store once)."""
        return (tenant, conversation) in self._indexes

    def drop_indexes(self) -> None:
        """Forget every turn index held in memory; each is read again from the store when next needed."""
        with self._lock:
            self._indexes.clear()
            self._loading.clear()

    def forget(self, conversation: str, tenant: str = "default") -> None:
        """Forget all that is held of a deleted conversation: its index, outlines, speakers."""
        with self._lock:
            for held in (self._indexes, self._loading, self._names):
                held.pop((tenant, conversation), None)
        self._outlines.forget(tenant, conversation)

    async def catch_up(
        self, conversation: str, tenant: str = "default", recent: Sequence[Message] = (),
        *, most: int = _CATCH_UP_MOST,
    ) -> bool:  # fmt: skip
        """Index the turns stored since the index last looked, ahead of the next fetch.

        For a background job between turns (`Conversations` runs one after an
        append): the next fetch then finds nothing new to index. Only an index
        already in memory, and at most ``most`` messages behind the newest of
        ``recent`` (the caller's newest stored messages), is caught up; the rest is
        left to the next fetch, as before. Whether it caught up.
        """
        index = self._indexes.get((tenant, conversation))
        newest = recent[-1].seq if recent else None
        if index is None or newest is None or newest - index.last_seq > most:
            return False
        if newest > index.last_seq:
            await self._refresh(conversation, tenant, index.locale, newest, recent, touch=False)
        return True

    async def _refresh(
        self, conversation: str, tenant: str, locale: str = "en", newest: int | None = None,
        recent: Sequence[Message] = (), *, touch: bool = True,
    ) -> TurnIndex:  # fmt: skip
        """The conversation's turn index, extended with what the store has beyond it.

        ``newest`` is the newest sequence number the caller knows of (the end of
        the history it was given): when the index already has it, the store is
        not asked. ``touch`` marks the index as recently used.
        """
        key = (tenant, conversation)
        with self._lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = TurnIndex(self.session_gap, locale)
                while len(self._indexes) > self.max_conversations:
                    gone, _ = self._indexes.popitem(last=False)
                    self._loading.pop(gone, None)
            elif touch:
                self._indexes.move_to_end(key)
            if recent and newest is not None and newest > index.last_seq:
                # The caller's history usually holds everything newer than the index
                # (a turn or two): take it from there, without a store read, when its
                # sequence numbers continue the index's without a gap.
                new: list[Message] = []
                for m in reversed(recent):  # newest first, only as far as is new
                    if m.seq is None or m.seq <= index.last_seq:
                        break
                    new.append(m)
                new.reverse()
                if new and all(m.seq == index.last_seq + 1 + i for i, m in enumerate(new)):
                    index.add(new)
            stale = newest is None or newest > index.last_seq
        unembedded = self.ranker.uses_vectors(index) and (
            index.vectors is None or len(index.vectors) < len(index)
        )
        if stale or unembedded:
            # Shielded: a fetch that runs out of time stops waiting, but the
            # reading (and embedding) goes on, and the next fetch finds it done
            # or joins it, instead of starting over.
            task = self._loading.get(key)
            if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
                task = asyncio.ensure_future(self._load(index, conversation, tenant, newest))
                self._loading[key] = task
            await asyncio.shield(task)
            with self._lock:
                if key not in self._indexes:  # evicted meanwhile: its load is not kept either
                    self._loading.pop(key, None)
                short = newest is not None and index.last_seq < newest
            if short:  # joined a load that stopped before this caller's newest
                await self._load(index, conversation, tenant, newest)
        return index

    async def _load(
        self, index: TurnIndex, conversation: str, tenant: str, newest: int | None = None
    ) -> None:
        """Extend ``index`` from the store's outlines, up to ``newest`` when given.

        Not past the end of the caller's history: a message stored after it (the
        build's own, stored first under the sync API) would otherwise enter an index
        read from the store and not one extended from the history, and a process
        that read its index afresh would recall differently from one that did not.
        """
        while newest is None or index.last_seq < newest:  # in pages: step by step
            after = index.last_seq
            upto = after + _PAGE if newest is None else min(after + _PAGE, newest)
            new: list[MessageOutline] = await self.store.read_outline(
                conversation, tenant=tenant, after_seq=after, upto_seq=upto
            )
            with self._lock:  # `add` skips what another caller added meanwhile
                index.add(new)
            if len(new) < upto - after:  # sequence numbers are gapless: this was the last page
                break
        if self.ranker.uses_vectors(index) and (
            index.vectors is None or len(index.vectors) < len(index)
        ):
            await asyncio.to_thread(self._embed, index)

    def _embed(self, index: TurnIndex) -> None:
        with self._embed_lock:  # one batch at a time: rows must line up with turns
            self.ranker.embed_new(index)

    # -- fetch ---------------------------------------------------------------------------

    def _whole(self) -> bool:
        """Whether every turn is ranked (``fill``, or vectors), so the whole index is kept."""
        return self.fill or self.ranker.embedder is not None

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.store is None or not turn.query.strip():
            return None
        oldest = _window_start(turn)
        if oldest is not None and oldest <= 1:
            return None  # the window reaches the first message: nothing older
        if not self._whole():
            return await self._fetch_hits(turn, oldest, allowance)
        newest = turn.history[-1].seq if turn.history else None
        index = await self._refresh(
            turn.conversation, turn.tenant, turn.locale, newest, turn.history
        )
        # The index is read under its lock (a background `catch_up` may be adding to
        # it), never held across an await; the first ranking only if feedback needs it.
        with self._lock:
            n = index.count_before(oldest)
            if n == 0:
                return None
            analysis = analyse(turn.query, index.speakers)
        # The message's vector is computed on a worker thread while the store searches.
        vector: asyncio.Future[Any] | None = None
        if self.ranker.uses_vectors(index) and index.vectors is not None:
            embed = self.ranker.embed_query  # pooled as the index's turns were
            vector = asyncio.ensure_future(asyncio.to_thread(embed, analysis, index))
        try:
            scores: dict[int, float] = {}
            if analysis.text.strip():
                scores = await self._search(turn, index, analysis.text, oldest, self.match_budget)
            query_vector = await vector if vector is not None else None
        finally:
            if vector is not None and not vector.done():
                vector.cancel()
        first: list[tuple[list[tuple[int, float]], int | None]] = []

        def ranking() -> list[tuple[int, float]]:
            first.append(self._rank(index, analysis, scores, n, query_vector))
            return first[0][0]

        with self._lock:
            more = self.ranker.feedback_query(index, analysis, ranking, scores) if scores else None
        feedback = await self._search(turn, index, more, oldest, None) if more else None
        with self._lock:
            if feedback or not first:
                first[:] = [self._rank(index, analysis, scores, n, query_vector, feedback)]
            ranked, top = first[0]
            return self._ranked_block(
                index, turn, analysis, scores, n, query_vector, feedback, ranked, top, allowance
            )

    async def _fetch_hits(self, turn: Turn, oldest: int | None, allowance: int) -> FetchResult:
        """The sparing path: rank the store's hits and their surroundings, nothing kept."""
        speakers = await self._speakers(turn, oldest)
        analysis = analyse(turn.query, speakers)
        if not analysis.text.strip():
            return None
        reach = max(0, self.ranker.weights.neighbours)
        cache = self._outlines if oldest is not None and self._outlines.max_bytes > 0 else None
        hits, outlines = await self._search_around(turn, analysis.text, oldest, reach, cache)
        if not hits:
            return None
        index = TurnIndex(self.session_gap, turn.locale, gaps=True)
        index.add(outlines)
        scores = {
            seq: score
            for seq, score in hits
            if score >= self.min_score and index.position(seq) is not None
        }
        if not scores:
            return None
        n = len(index)
        ranked, top = self._rank(index, analysis, scores, n, None)
        return self._ranked_block(
            index, turn, analysis, scores, n, None, None, ranked, top, allowance
        )

    async def _search_around(
        self, turn: Turn, words: str, oldest: int | None, reach: int, cache: OutlineCache | None
    ) -> tuple[list[tuple[int, float]], list[MessageOutline]]:
        """The store's hits below ``oldest`` and the outlines within ``reach`` of them.

        With ``cache`` the store reads only the outlines the cache lacks; every
        sequence number below ``oldest`` is a stored message, so the cache and
        the store's answer together hold them all, unless an entry went while
        the store was asked: then the store is asked again for all of them.
        """
        tenant, conversation = turn.tenant, turn.conversation
        for use_cache in (True, False):
            extra = {"known": cache.known(tenant, conversation)} if cache and use_cache else {}
            hits, outlines = await self.store.search_outlines(
                conversation, words, tenant=tenant, limit=self.search_limit, before_seq=oldest,
                match_budget=self.match_budget, around=reach, **extra,
            )  # fmt: skip
            if cache is None or oldest is None or not hits:
                break
            wanted: set[int] = set()
            for seq, _ in hits:
                wanted.update(range(max(1, seq - reach), min(oldest - 1, seq + reach) + 1))
            got = cache.take(tenant, conversation, sorted(wanted), outlines)
            if got is not None:
                return hits, got
        return hits, outlines

    async def _speakers(self, turn: Turn, oldest: int | None) -> dict[str, str]:
        """The conversation's speakers up to the end of ``turn``'s history (name → label).

        The names before the window are asked of the store once and then kept with
        how far they go: the window's own messages carry the rest, and the next
        window starts within this one, so a warm turn asks the store nothing.
        """
        key = (turn.tenant, turn.conversation)
        with self._lock:
            upto, names = self._names.get(key, (0, frozenset()))
        upper = None if oldest is None else oldest - 1
        if upper is None or upper > upto:
            found = await self.store.speaker_names(
                turn.conversation, tenant=turn.tenant, after_seq=upto, upto_seq=upper
            )
            names = names | frozenset(found)
        in_window = [m.name for m in turn.history if m.name and m.role in ("user", "assistant")]
        names = names | frozenset(in_window)
        newest = turn.history[-1].seq if turn.history else None
        if upper is not None and newest is not None:
            with self._lock:
                self._names[key] = (newest, names)
                self._names.move_to_end(key)
                while len(self._names) > 4 * self.max_conversations:
                    self._names.popitem(last=False)
        return speaker_map(sorted(names))

    def _rank(
        self, index: TurnIndex, analysis: QueryAnalysis, scores: dict[int, float], n: int,
        query_vector: Any, feedback: dict[int, float] | None = None,
    ) -> tuple[list[tuple[int, float]], int | None]:  # fmt: skip
        """The ranking's start (all of it without a turn limit) and how long that start is."""
        # With a turn limit only the best few are ranked in full order at first;
        # packing asks for the rest if those run out (turns too long to fit).
        top = None
        if self.limit is not None:
            top = max(_TOP_PER_TURN * self.limit, self.ranker.weights.feedback_docs)
        return self.ranker.rank(
            index, analysis, scores, n, query_vector=query_vector, feedback=feedback,
            fill=self.fill, top=top,
        ), top  # fmt: skip

    def _ranked_block(
        self, index: TurnIndex, turn: Turn, analysis: QueryAnalysis, scores: dict[int, float], n: int,
        query_vector: Any, feedback: dict[int, float] | None, ranked: list[tuple[int, float]],
        top: int | None, allowance: int,
    ) -> Block | None:  # fmt: skip
        """Pack the best of the ranked first ``n`` turns into the allowance."""

        def rest() -> list[tuple[int, float]]:
            """The whole ranking, of which ``ranked`` is the start."""
            return self.ranker.rank(
                index, analysis, scores, n, query_vector=query_vector, feedback=feedback,
                fill=self.fill,
            )  # fmt: skip

        # The engine puts dynamic blocks in one message under its own frame (a
        # header, and a tag on the user side); that frame comes out of the same
        # section grant as this block. The larger of the two placements is assumed.
        t = templates_for(turn.locale)
        counter = self.counter or _HEURISTIC
        tail = max(
            message_frame(counter, p) + self._costs.count(counter, turn_context(t, (), p))
            for p in ("user", "system")
        )
        frame = tail + JOIN_TOKENS
        full = top is None or len(ranked) < top
        return self._block(index, ranked, allowance - frame, None if full else rest)

    async def _search(
        self, turn: Turn, index: TurnIndex, words: str, oldest: int | None, budget: int | None
    ) -> dict[int, float]:
        """seq → BM25 of the store's best ``search_limit`` turns before ``oldest`` (``min_score`` applied)."""
        hits, _ = await self.store.search_outlines(
            turn.conversation, words, tenant=turn.tenant, limit=self.search_limit,
            before_seq=oldest, match_budget=budget,
        )  # fmt: skip
        # hits of messages that are no turns of the index (system messages) are left out
        return {
            seq: score
            for seq, score in hits
            if score >= self.min_score and index.position(seq) is not None
        }

    # -- packing and rendering -------------------------------------------------------------

    def _block(
        self, index: TurnIndex, ranked: list[tuple[int, float]], allowance: int,
        rest: Callable[[], list[tuple[int, float]]] | None = None,
    ) -> Block | None:  # fmt: skip
        """The best turns that fit ``allowance``, as one block (`pack`)."""
        return pack(
            index, ranked, allowance, counter=self.counter or _HEURISTIC, costs=self._costs,
            name=self.name, header=_HEADER["zh" if index.locale.startswith("zh") else "en"],
            priority=self.priority, limit=self.limit, rest=rest,
        )  # fmt: skip


_HEURISTIC = HeuristicCounter()


def _window_start(turn: Turn) -> int | None:
    """The sequence number recall searches below: where the window is expected to
    start, else the history's first stored message (None: no sequence numbers)."""
    if turn.window_start is not None:
        return turn.window_start
    return next((m.seq for m in turn.history if m.seq is not None), None)


# With a turn limit, candidates ranked in full order at first, per turn shown (the rest is
_TOP_PER_TURN = 4  # ranked only if these run out; never fewer than the feedback search reads)
_PAGE = 5000  # messages read from the store at a time
