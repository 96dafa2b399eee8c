"""Ranking a conversation's old turns for recall: lexical evidence, neighbours, vectors, priors.

`RecallSource` asks this module which stored turns to bring back for a new
message. The turns of a conversation are held in process (`TurnIndex`: text,
speaker, time, session, optional vectors), kept up to date from the store, and
ranked by `TurnRanker` in five steps (`TurnIndex`, ``_turns.py``, holds either
all of a conversation's turns, for the configurations that rank every turn, or
only the store's hits and their surroundings):

1. **Query analysis** (`analyse`, ``_query.py``): stop words and the names of
   the conversation's speakers leave the search words; named speakers, months
   and years become priors.
2. **Lexical evidence**: full-text BM25 over what is left, answered by the
   store's own index (FTS5 on SQLite), not kept in process. A hit's
   score also flows to its neighbours in the same session, decaying by
   ``neighbour_decay`` per step up to ``neighbours`` steps away: the turn that
   holds an answer is often next to the one that names the topic ("How was the
   camping trip?" → "We roasted marshmallows…"), and short replies ("For walking
   or running?") only make sense with the turn before them.
3. **Vector evidence** (optional, an `Embedder`): cosine similarity between the
   message, speaker names left out, and each turn (``dense_neighbours`` can
   spread it to neighbours too; it did not help once the lexical part does).
   **Note evidence** (``note_weight``): terms read from each turn when it is
   indexed, the days its relative dates mean, the kinds of things it names, the
   relations its speaker names (``_notes.py``), matched to the question's.
4. **Fusion** by reciprocal rank, ``Σ w / (k + rank)``: BM25 scores and cosines
   are not on one scale, ranks are. Turns with no lexical evidence share one rank,
   so no arbitrary order among them leaks into the result.
5. **Priors** multiply the fused score: turns *spoken by* the one speaker the
   message names (``speaker_boost``), and turns dated in a month or year the
   message names, or the month after, when such events are usually talked about
   (``date_boost``); and, when the message asks about the present ("now",
   现在, 最近), later turns, by ``1 + recency_boost x position / n``: of facts
   that change, the latest statement is the answer ("where does she live now?"
   ← "next month I move to Xiamen", not "I work in Nanjing now"). On the
   generated Chinese set (``contextwright eval zh``) 0.5 raised recall at
   2,000 tokens from 0.768 to 0.786 (``--seed=0``) and from 0.764 to 0.786
   (``--seed=1``), and every leave-one-conversation-out fold at 2,000 tokens
   chose 0.5 or 1.0 over 0; at 1,000 tokens +0.009 / 0, at 4,000 -0.004 (one
   evidence turn) / 0, at 8,000 no change. LoCoMo recall is the same to the last turn
   with it or without (seven of its questions ask about the present).

Ties go to the newer turn. Measured on the LoCoMo development split (five
conversations of 369-680 turns, 997 questions; ``contextwright eval locomo``),
recall of evidence turns at 1,000 / 8,000 tokens: plain BM25 over the turns
0.64 / 0.79; with the query analysis 0.64 / 0.80; with neighbour evidence
0.74 / 0.90; with the speaker prior 0.76 / 0.92; with the date prior and the
no-evidence factor 0.77 / 0.92 (the default); with MiniLM vectors 0.81 / 0.97.
Each step helped on every one of the five conversations taken alone (but the
speaker prior at 1,000 tokens on one), and the knobs sit on a plateau: chosen
on four conversations, they score within a few points of the defaults on the
fifth.

Pure Python for the lexical path; numpy only when an embedder is configured.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from ._links import link_scores
from ._notes import note_terms
from ._query import STOP_WORDS, QueryAnalysis, analyse, date_matches, speaker_map
from ._sif import SIF_LOCALES, SifPool, can_weigh
from ._turns import IndexedTurn, TurnIndex, day_label, feedback_terms

if TYPE_CHECKING:
    from ..memory import Embedder

__all__ = [
    "STATIC_WEIGHTS", "STOP_WORDS", "IndexedTurn", "QueryAnalysis", "RankWeights", "TurnIndex",
    "TurnRanker", "analyse", "day_label", "default_weights", "speaker_map",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class RankWeights:
    """The knobs of `TurnRanker` (defaults measured on LoCoMo dev; see the module docstring)."""

    neighbours: int = 3
    neighbour_decay: float = 0.5
    dense_weight: float = 0.7
    dense_neighbours: int = 0  # spreading cosines too: no better on LoCoMo (chosen 4 of 5 held-out)
    dense_decay: float = 0.3
    dense_min: float = 0.3  # cosine below which a turn is no evidence on its own
    rrf_k: int = 60
    speaker_boost: float = 0.5
    date_boost: float = 0.5
    no_evidence: float = 0.75  # factor on the fused score of turns without evidence
    feedback_weight: float = 0.3  # RRF weight of the feedback search (lexical ranking only)
    feedback_terms: int = 15
    feedback_docs: int = 8
    feedback_from_hits: bool = True  # seed feedback with the best full-text hits, not the ranking
    recency_boost: float = 0.5  # a question about the present: factor 1 + this x position / n
    link_weight: float = 0.0  # with fill: RRF weight of entity links (``_links.py``; +0.003)
    link_df: int = 5  # a link word is held by at most this many turns
    feedback_with_vectors: bool = False  # keep the feedback search when an embedder is set
    note_weight: float = 0.0  # RRF weight of turn notes (``_notes.py``: dates, entities)
    sif: float = 0.0  # > 0: tokens weighed a / (a + p(w)) in static turn vectors (``_sif.py``)


class TurnRanker:
    """Ranks the turns of a `TurnIndex` for a message (see the module docstring).

    ``embedder`` adds vector evidence; without one the ranking is lexical.
    ``locales`` limits the vectors to conversations of those languages (``"en"``
    covers ``"en-GB"``; None: all): a model that does not read a language would
    only add noise to its ranking (`for_memory_qa`).
    """

    def __init__(
        self, weights: RankWeights | None = None, embedder: Embedder | None = None,
        locales: Iterable[str] | None = None,
    ) -> None:  # fmt: skip
        self.weights = weights or RankWeights()
        self.embedder = embedder
        self.locales = None if locales is None else frozenset(locales)

    @classmethod
    def for_memory_qa(
        cls, weights: RankWeights | None = None, embedder: Any = "auto"
    ) -> TurnRanker:
        """The ranker of the memory-QA configuration (`RecallSource.for_memory_qa`).

        ``embedder="auto"`` (the default) takes the static word vectors of the
        ``static`` extra when it is installed (`llm.auto_embedder`), for the
        languages where they were measured to raise recall (`STATIC_LOCALES`), and
        the lexical ranking otherwise; None is lexical everywhere; an `Embedder` is
        used for every language. ``weights`` replaces the knobs' defaults
        (`default_weights`: they depend on the embedder).
        """
        if isinstance(embedder, str):
            if embedder != "auto":
                raise ConfigError(f"embedder must be an Embedder, None or 'auto': {embedder!r}")
            from ..llm._embed_static import STATIC_LOCALES, auto_embedder

            found = auto_embedder()
            if found is None:
                return cls(weights)
            w = weights if weights is not None else default_weights(found)
            return cls(w, embedder=found, locales=STATIC_LOCALES)
        w = weights if weights is not None else default_weights(embedder)
        return cls(w, embedder=embedder)

    def uses_vectors(self, index: TurnIndex) -> bool:
        """Whether the turns of ``index`` are embedded and ranked by vectors too."""
        if self.embedder is None:
            return False
        return self.locales is None or _language(index.locale) in self.locales

    def embed_new(self, index: TurnIndex) -> int:
        """Embed the index's turns that have no vector yet (a batch); returns how many."""
        if self.embedder is None or not self.uses_vectors(index):
            return 0
        import numpy as np

        sif = self.weights.sif > 0 and can_weigh(self.embedder)
        sif = sif and _language(index.locale) in SIF_LOCALES
        name = self.embedder.name + (f"+sif{self.weights.sif}" if sif else "")
        if index.embedded_by not in (None, name):
            index.vectors, index.embedded_by = None, None  # another model: start over
            index.pooling = None
        done = 0 if index.vectors is None else len(index.vectors)
        todo = [t.text for t in index.turns[done:]]
        if not todo:
            return 0
        if sif:
            if index.pooling is None:
                index.pooling = SifPool(self.embedder, self.weights.sif)
            index.vectors = index.pooling.add(todo, index.vectors)
        else:
            fresh = np.asarray(self.embedder.embed(todo), dtype=np.float32)
            index.vectors = fresh if index.vectors is None else np.vstack([index.vectors, fresh])
        index.embedded_by = name
        return len(todo)

    def embed_query(self, analysis: QueryAnalysis, index: TurnIndex | None = None) -> Any:
        """The message's vector, speaker names left out (they are the speaker prior's).

        Pooled as ``index``'s turns were (`_sif.SifPool`) when they are weighted.
        """
        if self.embedder is None:
            return None
        text = analysis.semantic or analysis.text
        if index is not None and index.pooling is not None:
            return index.pooling.query(text)
        return self.embedder.embed([text])[0]

    def feedback_query(
        self, index: TurnIndex, analysis: QueryAnalysis,
        ranked: Sequence[tuple[int, float]] | Callable[[], Sequence[tuple[int, float]]],
        hits: Mapping[int, float] | None = None,
    ) -> str | None:  # fmt: skip
        """Words for a second search, from the best turns of a first retrieval (or None).

        Pseudo-relevance feedback (as in RM3): the rarest words shared by the
        ``feedback_docs`` best turns name the topic in the conversation's own
        vocabulary ("martial arts" → "kickboxing", "taekwondo"). Their search is
        one more RRF term, weighted ``feedback_weight``. Only without vectors,
        unless ``feedback_with_vectors``: MiniLM's bridge such vocabulary gaps
        already, and feedback did not add to them; static word vectors bridge
        fewer, and it does (`STATIC_WEIGHTS`). The terms are `feedback_terms`:
        Latin-script words of four letters or more, and CJK character bigrams
        (what the full-text indexes hold for CJK), so Chinese gets feedback too;
        joined by spaces, each is one term of the second search on every backend.
        On the generated Chinese set it does not help: with it recall at 1,000 /
        2,000 tokens is 0.673 / 0.786 (``--seed=1``: 0.664 / 0.786), without 0.677
        / 0.791 (0.682 / 0.791), at 4,000 and 8,000 the same; its seeds, the best
        hits of a short question, are mostly small talk sharing one bigram with it.

        The best turns are the full-text ``hits`` with the highest scores
        (``feedback_from_hits``, as RM3 reads the first round's top documents),
        else the first ``ranked`` turns (a ranking, or a function returning one:
        it is called only when the hits seed nothing, so a build ranks its turns
        once, not twice — at 10,000 turns with vectors, a full ranking is most of
        a build's time). The ranking mixes in neighbours and the
        speaker and date priors, so its top may hold turns without a query word,
        whose words lead the second search astray: seeding from the hits raised
        LoCoMo recall at 1,000 tokens from 0.763 to 0.772 (0.848 to 0.851 at
        2,000), on four of five conversations, and every leave-one-conversation-out
        fold chose it.
        """
        w = self.weights
        if (self.uses_vectors(index) and not w.feedback_with_vectors) or w.feedback_weight <= 0:
            return None
        seeds: Sequence[tuple[int, float]] = ()
        if w.feedback_from_hits and hits:
            strongest = heapq.nlargest(w.feedback_docs, hits.items(), key=itemgetter(1, 0))
            seeds = [
                (p, s) for seq, s in strongest if s > 0 and (p := index.position(seq)) is not None
            ]
        if not seeds:  # the first ranking is computed only now, when it is needed
            seeds = ranked() if callable(ranked) else ranked
            if not seeds:
                return None
        n = max(1, len(index))
        asked = feedback_terms(analysis.text)
        names = set(index.speakers) | {g for name in index.speakers for g in feedback_terms(name)}
        df = index.df
        weight: dict[str, float] = {}
        for p, _ in seeds[: w.feedback_docs]:
            for word in feedback_terms(index.turn(p).text):
                if word not in STOP_WORDS and word not in asked and word not in names:
                    idf = math.log(n / max(1, df[word]))
                    weight[word] = weight.get(word, 0.0) + idf
        best = sorted(weight.items(), key=lambda kv: (-kv[1], kv[0]))[: w.feedback_terms]
        return " ".join(word for word, _ in best) or None

    def rank(
        self,
        index: TurnIndex,
        analysis: QueryAnalysis,
        hits: Mapping[int, float],
        n: int,
        *,
        query_vector: Any = None,
        feedback: Mapping[int, float] | None = None,
        fill: bool = False,
        top: int | None = None,
    ) -> list[tuple[int, float]]:
        """Positions among the first ``n`` turns of ``index``, best first, with their scores.

        ``hits`` maps sequence numbers to full-text scores (higher is better);
        ``feedback`` the same for the `feedback_query` search. Without ``fill`` only turns with some evidence (lexical, or a cosine of at
        least ``dense_min``) are returned; with it, every turn, so that a caller
        with room to spare can use it. ``top`` returns only the first ``top`` of
        that list (scores unchanged): a caller that shows a handful of turns
        need not pay for ordering and scoring the two hundred that neighbour
        spreading gives a few dozen hits.
        """
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise ConfigError(f"top must be a non-negative integer or None, got {top!r}")
        w = self.weights
        turn = index.turn
        lexical = self._lexical(index, hits, n)
        k = float(w.rrf_k)
        speaker_hit = next(iter(analysis.speakers)) if len(analysis.speakers) == 1 else None
        dated = bool(analysis.months or analysis.years)
        recency = w.recency_boost / max(1, n - 1) if analysis.present else 0.0
        dense = query_vector is not None and index.vectors is not None and w.dense_weight > 0
        noted: dict[int, float] = {}
        if w.note_weight > 0:
            asked = note_terms(analysis.query, index.speakers)
            noted = _competition_ranks(index.notes.scores(asked, n, STOP_WORDS))
        note_zero = float(max(len(noted), w.rrf_k))
        if not (dense or feedback or fill or dated or recency or noted or speaker_hit is not None):
            return _rrf_order(lexical, k, top)  # lexical evidence alone (the stateful default)
        ranks = _competition_ranks(lexical)
        # Turns without lexical evidence share the rank after the last one that has
        # some, and never a better one than k: with only a handful of hits, RRF
        # scores are so close that a prior could lift a turn with no evidence at
        # all above the best hit.
        zero_rank = float(max(len(lexical), w.rrf_k))
        dense_score: Any = None
        dense_rank: Any = None
        if dense:
            dense_score, dense_rank = self._dense(index, query_vector, n)
        extra: dict[int, float] = {}
        extra_ranks: dict[int, float] = {}
        if feedback:
            extra = self._lexical(index, feedback, n)
            extra_ranks = _competition_ranks(extra)
        extra_zero = float(max(len(extra), w.rrf_k))
        linked: dict[int, float] = {}
        if fill and w.link_weight > 0 and hits:
            linked = _competition_ranks(
                link_scores(index, hits, analysis.text, n, seeds=w.feedback_docs, max_df=w.link_df)
            )
        link_zero = float(max(len(linked), w.rrf_k))
        out: list[tuple[float, int]] = []  # (-score, -position)
        # Without vectors or fill only turns with lexical evidence can be returned:
        # visit those, not every turn (O(hits), not O(conversation)).
        if dense_rank is None and not fill:
            positions: Iterable[int] = sorted(lexical.keys() | extra.keys() | noted.keys())
        else:
            positions = range(n)
        for p in positions:
            has_lex = p in lexical
            s = 1.0 / (k + (ranks[p] if has_lex else zero_rank))
            evidence = has_lex
            if extra:
                s += w.feedback_weight / (k + extra_ranks.get(p, extra_zero))
            if linked:
                s += w.link_weight / (k + linked.get(p, link_zero))
            if noted:
                s += w.note_weight / (k + noted.get(p, note_zero))
                evidence = evidence or p in noted
            if dense_rank is not None and p < len(dense_rank):
                s += w.dense_weight / (k + float(dense_rank[p]))
                evidence = evidence or float(dense_score[p]) >= w.dense_min
            if not evidence:
                if not fill:
                    continue
                s *= w.no_evidence
            t = turn(p)
            if speaker_hit is not None and t.speaker == speaker_hit:
                s *= 1.0 + w.speaker_boost
            if dated and date_matches(t.month, analysis):
                s *= 1.0 + w.date_boost
            if recency:
                s *= 1.0 + recency * p
            out.append((-s, -p))
        out.sort()  # best first, ties to the newer turn (plain tuples: no key function)
        if top is not None:
            del out[top:]
        return [(-q, -v) for v, q in out]

    def _lexical(self, index: TurnIndex, hits: Mapping[int, float], n: int) -> dict[int, float]:
        """Full-text scores by position, each also spread to its same-session neighbours."""
        w = self.weights
        sessions = index.sessions  # nondecreasing: a session is one run of positions
        reach = max(0, w.neighbours)
        share = [w.neighbour_decay ** abs(d) for d in range(-reach, reach + 1)]
        where = index.positions.get  # `TurnIndex.position`
        out: dict[int, float] = {}
        get = out.get
        for seq, score in hits.items():
            p = where(seq)
            if p is None or p >= n or score <= 0:
                continue
            session = sessions[p]
            # the neighbours within reach that share p's session (and lie before n)
            lo = p - reach if p > reach else 0
            while sessions[lo] != session:
                lo += 1
            hi = p + reach if p + reach < n else n - 1
            while sessions[hi] != session:
                hi -= 1
            base = reach - p  # share[q + base] is the share of position q
            for q in range(lo, hi + 1):
                out[q] = get(q, 0.0) + score * share[q + base]
        return out

    def _dense(self, index: TurnIndex, query_vector: Any, n: int) -> tuple[Any, Any]:
        """Cosines of the first ``n`` embedded turns, neighbour-smoothed, and their ranks."""
        import numpy as np

        w = self.weights
        m = min(n, len(index.vectors))
        raw = index.vectors[:m] @ np.asarray(query_vector, dtype=np.float32)
        smooth = raw.astype(np.float64)
        if w.dense_neighbours and m > 1:
            sessions = np.asarray(index.sessions[:m], dtype=np.int64)
            base = smooth.copy()
            for d in range(1, min(w.dense_neighbours, m - 1) + 1):
                same = sessions[:-d] == sessions[d:]
                share = w.dense_decay**d
                smooth[d:] += base[:-d] * share * same
                smooth[:-d] += base[d:] * share * same
        order = np.argsort(-smooth, kind="stable")
        rank = np.empty(m, dtype=np.float64)
        rank[order] = np.arange(m, dtype=np.float64)
        return raw, rank


def _rrf_order(
    scores: Mapping[int, float], k: float, top: int | None = None
) -> list[tuple[int, float]]:
    """`TurnRanker.rank` when only lexical evidence counts: one sort, the same result.

    The fused score ``1 / (k + rank)`` falls as the competition rank grows, so
    the order is that of the scores, ties to the newer turn, as in the full path.
    A competition rank depends only on what comes before, so the first ``top``
    are scored alone.
    """
    # Two sorts of plain numbers (positions, then their scores as the key) instead
    # of one of (score, position) pairs: a fifth fewer instructions for the whole
    # ranking (callgrind), no pair to build. The second sort is stable (reversed
    # too), so equal scores keep the first's newest-first order.
    order = sorted(scores, reverse=True)
    order.sort(key=scores.__getitem__, reverse=True)
    if top is not None:
        del order[top:]
    out: list[tuple[int, float]] = []
    append = out.append
    prev: float | None = None
    fused = 0.0
    for i, p in enumerate(order):
        s = scores[p]
        if s != prev:  # a new score: its competition rank is i
            prev, fused = s, 1.0 / (k + i)
        append((p, fused))
    return out


def _competition_ranks(scores: Mapping[int, float]) -> dict[int, float]:
    """Rank of each key: how many keys score strictly higher (ties share a rank)."""
    ordered = sorted(scores.items(), key=itemgetter(1), reverse=True)
    ranks: dict[int, float] = {}
    prev: float | None = None
    current = 0
    for i, (p, s) in enumerate(ordered):
        if s != prev:
            current, prev = i, s
        ranks[p] = float(current)
    return ranks


def _language(locale: str) -> str:
    """The language of a locale tag: ``"en-GB"`` and ``"en_GB"`` → ``"en"``."""
    return locale.replace("_", "-").split("-", 1)[0].lower()


# The knobs' defaults with static word vectors (`StaticEmbedder`): the feedback search
# stays on. Averaged word vectors bridge fewer vocabulary gaps than MiniLM does, and
# feedback still adds to them: LoCoMo dev recall 0.773 / 0.852 / 0.921 / 0.961 at
# 1k / 2k / 4k / 8k without it, 0.786 / 0.863 / 0.917 / 0.962 with it; chosen by
# every leave-one-conversation-out fold at 1k and 2k (none at 4k). Turn notes
# (``_notes.py``) at 0.1: 0.786 / 0.863 / 0.917 / 0.962 -> 0.792 / 0.871 / 0.924 /
# 0.967, no conversation lower at any budget; cross-validated over 0 / 0.1 / 0.3
# 0.790 / 0.870 / 0.927 / 0.967; the Chinese set unchanged (its questions name no
# date in English). Measured with these vectors only, so only they turn notes on.
# SIF pooling (``_sif.py``) at 0.002 on top: 0.792 / 0.871 / 0.924 / 0.967 -> 0.798 / 0.873
# / 0.928 / 0.968; cross-validated over 0 / 0.001 / 0.002 / 0.004 0.796 / 0.872 / 0.927 /
# 0.966, held out four conversations gain at 1k and three at 2k.
STATIC_WEIGHTS = RankWeights(feedback_with_vectors=True, note_weight=0.1, sif=0.002)


def default_weights(embedder: Any = None) -> RankWeights:
    """The knobs' defaults for ``embedder``: `STATIC_WEIGHTS` for static vectors."""
    from ..llm._embed_static import StaticEmbedder

    return STATIC_WEIGHTS if isinstance(embedder, StaticEmbedder) else RankWeights()
