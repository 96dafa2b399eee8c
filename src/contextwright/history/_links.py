"""Entity links: a second round from the first round's best hits, in process.

The turns that answer one question are often spread over sessions, and some
share no word with the question, only a rare word (a name, a place, a hobby)
with a turn that does. `link_scores` gives every turn that shares a rare word
(a feedback term, `feedback_terms`: a Latin-script word of four letters or more
or a CJK bigram, held by at most ``link_df`` turns, not a speaker name nor a
question word) with the ``feedback_docs`` best full-text hits the summed idf of
those words;
`TurnRanker.rank`, with ``fill``, ranks the linked turns and adds
``link_weight / (k + rank)`` to their fused score, as it does for the feedback
search. Words and postings come from the stored turns (`TurnIndex.postings`),
so every store backend and a fresh process link alike. Cost: the postings of a
10,000-turn index take about 0.3 s to build, once, and a ranking with links about
2.5 ms more than one without (8.3 → 10.8 ms, synthetic turns; the stateful
default never ranks with ``fill``, so it never pays). Measured on English only.

Off by default (``link_weight = 0``), because it moved little. Measured on
LoCoMo dev (``contextwright eval locomo``, lexical, recall at 1,000 / 2,000 /
4,000 / 8,000 tokens): default 0.772 / 0.851 / 0.892 / 0.947; ``link_weight``
0.1 gave 0.775 / 0.853 (multi-hop 0.581 → 0.588 at 1,000, 0.706 → 0.716 at
2,000; adversarial 0.889 → 0.893), 0.3 lost at 1,000 (0.761: adversarial
questions name the wrong speaker, and any extra evidence on unmatched turns lifts
that speaker's turns under the speaker prior). Chosen by leave-one-conversation-out
among 0, 0.05, 0.1 and 0.2 the cross-validated recall was 0.774 / 0.851 / 0.896 /
0.946. Why so little: of the evidence turns the default misses at 2,000 tokens
whose question had another evidence turn recalled, 25% share a rare word (held
by at most eight turns) with one, and of all it misses 37% are reached by the
feedback search already (``bench/locomo_misses.py``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping
from operator import itemgetter

from ._query import STOP_WORDS
from ._turns import TurnIndex, feedback_terms

__all__ = ["link_scores"]


def link_scores(
    index: TurnIndex, hits: Mapping[int, float], asked: str, n: int, *, seeds: int, max_df: int,
) -> dict[int, float]:  # fmt: skip
    """Position → summed idf of the rare words it shares with the best ``seeds`` hits."""
    df = index.df
    words = index.words
    names = index.speakers
    query = feedback_terms(asked)
    best = heapq.nlargest(seeds, hits.items(), key=itemgetter(1, 0))
    seed_pos = [p for seq, _ in best if (p := index.positions.get(seq)) is not None and p < n]
    log_n = math.log(max(1, len(index)))
    link: dict[str, float] = {}
    for p in seed_pos:
        for w in words[p]:
            c = df[w]
            if 1 < c <= max_df and w not in STOP_WORDS and w not in names and w not in query:
                link[w] = log_n - math.log(c)
    if not link:
        return {}
    postings = index.postings
    out: dict[int, float] = {}
    seeds_set: Collection[int] = set(seed_pos)
    for w, idf in link.items():
        for p in postings[w]:
            if p < n and p not in seeds_set:
                out[p] = out.get(p, 0.0) + idf
    return out
