"""Turn vectors pooled with conversation-frequency (SIF) weights: ``RankWeights.sif``.

A hand-made table stands in for the static vectors, so that what the weighting
should do is visible: a word said in every turn stops deciding which turn is
closest to the question. The incremental pooling must keep one vector per turn
and weights never staler than a tenth of the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Message
from contextwright.history._query import analyse
from contextwright.history._rank import RankWeights, TurnIndex, TurnRanker, default_weights
from contextwright.history._sif import SifPool, can_weigh
from contextwright.llm._embed import normalize_rows
from contextwright.llm._embed_static import StaticEmbedder, bundled_wordllama_path

# one axis per word but "chat", which is long: said in every turn, it dominates a plain mean
WORDS = ["chat", "trail", "walk", "pizza", "bye"]
_TABLE = np.zeros((len(WORDS) + 1, 8), dtype=np.float32)
for _i in range(1, len(WORDS) + 1):
    _TABLE[_i, _i] = 1.0
_TABLE[1] *= 3.0


class WordTable:
    """A static embedder over `WORDS` (token id = position + 1, 0 = unknown)."""

    name = "words"
    dimension = 8
    vocabulary = len(_TABLE)

    def tokens(self, texts: Sequence[str]) -> list[Any]:
        ids = {w: i + 1 for i, w in enumerate(WORDS)}
        return [np.array([ids.get(w, 0) for w in t.lower().split()], dtype=np.int64) for t in texts]

    def pool(self, tokens: Sequence[Any], weights: Any = None) -> Any:
        out = np.zeros((len(tokens), 8), dtype=np.float32)
        for i, ids in enumerate(tokens):
            if len(ids):
                w = np.ones(len(ids), np.float32) if weights is None else weights[ids]
                out[i] = w @ _TABLE[ids]
        return normalize_rows(out, 8)

    def embed(self, texts: Sequence[str]) -> Any:
        return self.pool(self.tokens(texts))


def _index(texts: Sequence[str]) -> TurnIndex:
    index = TurnIndex()
    index.add(
        [Message("user", t, name="Ada", created_at=1e9 + i, seq=i + 1) for i, t in enumerate(texts)]
    )
    return index


def _dense_order(sif: float, texts: Sequence[str], question: str) -> list[str]:
    index = _index(texts)
    ranker = TurnRanker(RankWeights(sif=sif), embedder=WordTable())
    ranker.embed_new(index)
    a = analyse(question, index.speakers)
    ranked = ranker.rank(
        index, a, {}, len(index), query_vector=ranker.embed_query(a, index), fill=True
    )
    return [index.turn(p).text for p, _ in ranked]


TURNS = [*["chat bye"] * 10, "chat trail", "pizza walk", *["chat bye"] * 10]


def test_a_word_said_everywhere_stops_deciding_the_closest_turn():
    # The plain mean puts "pizza walk" (one word of the question) above the turn
    # about the trail, whose vector is mostly "chat"; weighted, "chat" counts little.
    assert _dense_order(0.0, TURNS, "trail walk")[0] == "pizza walk"
    assert _dense_order(0.01, TURNS, "trail walk")[0] == "chat trail"


def test_switching_the_weighting_embeds_the_turns_again():
    index = _index(TURNS)
    TurnRanker(embedder=WordTable()).embed_new(index)
    plain = index.vectors.copy()
    assert index.pooling is None
    assert TurnRanker(RankWeights(sif=0.01), embedder=WordTable()).embed_new(index) == len(TURNS)
    assert index.embedded_by == "words+sif0.01"
    assert index.pooling is not None
    assert not np.allclose(plain, index.vectors)
    assert TurnRanker(embedder=WordTable()).embed_new(index) == len(TURNS)
    assert index.pooling is None
    assert np.allclose(plain, index.vectors)


def test_chinese_turns_are_pooled_plainly():
    # measured to lose on the Chinese set: only the languages of SIF_LOCALES are weighted
    index = _index(TURNS)
    index.locale = "zh-CN"
    TurnRanker(RankWeights(sif=0.01), embedder=WordTable()).embed_new(index)
    assert index.embedded_by == "words"
    assert index.pooling is None
    english = _index(TURNS)
    english.locale = "en-GB"
    TurnRanker(RankWeights(sif=0.01), embedder=WordTable()).embed_new(english)
    assert english.pooling is not None


def test_the_static_defaults_weigh_tokens():
    assert default_weights(StaticEmbedder()).sif == 0.002
    assert default_weights(None).sif == 0.0


def test_an_embedder_without_tokens_is_pooled_as_before():
    class Opaque:
        name, dimension = "opaque", 8

        def embed(self, texts: Sequence[str]) -> Any:
            return WordTable().embed(texts)

    assert not can_weigh(Opaque())
    assert can_weigh(WordTable())
    index = _index(TURNS)
    TurnRanker(RankWeights(sif=0.01), embedder=Opaque()).embed_new(index)
    assert index.embedded_by == "opaque"
    assert index.pooling is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*WORDS, "?"]), max_size=5).map(" ".join), max_size=30),
       st.lists(st.integers(1, 6), max_size=30))  # fmt: skip
def test_incremental_pooling_keeps_one_row_a_turn_and_fresh_weights(
    texts: list[str], cuts: list[int]
):
    pool = SifPool(WordTable(), 0.01)
    vectors: Any = None
    done = 0
    for size in [*cuts, len(texts)]:
        batch = texts[done : done + size]
        if not batch:
            continue
        vectors = pool.add(batch, vectors)
        done += len(batch)
        assert len(vectors) == done == len(pool.ids)
        counts = np.bincount(np.concatenate(pool.ids), minlength=len(_TABLE))
        assert np.array_equal(pool.counts, counts)
        assert pool.total < 1.1 * pool.pooled_at or pool.total == 0
        # every row is its turn pooled with weights from when it was pooled: after a
        # fresh pooling they are all the current ones
        if pool.pooled_at == pool.total:
            assert np.allclose(vectors, WordTable().pool(pool.ids, pool.weights), atol=1e-6)


needs_static = pytest.mark.skipif(
    bundled_wordllama_path() is None, reason="the static extra is not installed"
)


@needs_static
def test_static_pooling_is_the_mean_unless_weighted():
    emb = StaticEmbedder()
    texts = ["Hey Mel! How was the camping trip?", "", "I love painting sunsets"]
    ids = emb.tokens(texts)
    assert len(ids) == 3
    assert len(ids[1]) == 0
    assert np.allclose(emb.pool(ids), emb.embed(texts))
    ones = np.ones(emb.vocabulary, dtype=np.float32)
    assert np.allclose(emb.pool(ids, ones), emb.embed(texts), atol=1e-6)
    rare_mel = ones.copy()
    rare_mel[ids[0][:3]] = 0.0  # leave out the greeting
    assert not np.allclose(emb.pool(ids, rare_mel)[0], emb.embed(texts)[0])
