"""Scores: how well a text matches a query, how lexical and vector similarity fuse, near duplicates.

**Lexical relevance for hybrid search** (0..1, what ``min_score`` cuts) is
IDF-weighted coverage: the share of the query's information present in the text,
Σ idf(found units) / Σ idf(query units) (`coverage`), with BM25's IDF over the
whole index (`idf`). BM25 itself is unbounded and relative to the corpus, so it
cannot carry a threshold; coverage can ("the rare half of what was asked is
there"), and memories are a sentence or two, where BM25's term-frequency and
length factors add little. BM25 still picks the candidates, and equal coverage is
ordered by importance and recency.

**Fusion** (`SearchWeights.relevance`): with a cosine, relevance = α · max(cosine,
0) + (1 − α) · lexical, α = 0.6; without one (no embedder, or a row stored without
a vector), relevance = lexical. A normalised weighted sum rather than
reciprocal-rank fusion: RRF throws the scores away (one strong match and one weak
one get the same credit for the same rank) and yields no absolute number to cut
on. Measured with MiniLM on the labelled paraphrase set in
``bench/bench_memory.py``; see bench/README.md.

**Weighting** (importance ranks; recency breaks ties in time)::

    score = relevance × (1 − wᵢ·(1 − importance/100)) × (1 − wᵣ·(1 − 2^(−age/half_life)))

with wᵢ = wᵣ = 0.2 and a 30-day half-life: a memory of importance 0 keeps 80% of
its relevance, one created a year ago about 80%. Both factors are at most 1, so
the score stays in 0..1 and never exceeds the relevance.

**In-process scans** (the in-memory stores) score with `lexical_score`, a
BM25-like sum over the query terms present (`terms`), saturated by term frequency
and normalised by length.

**Near duplicates** (`normalize_text`, `fingerprint`, `shingle_similarity`): NFKC,
case-folded text without punctuation, hashed for an exact-duplicate column, and
character-trigram Jaccard similarity for any language.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .._errors import ConfigError
from ._query import Unit
from ._terms import cached_terms

__all__ = [
    "SearchWeights", "coverage", "fingerprint", "idf", "lexical_score", "normalize_text",
    "shingle_similarity", "weighted_score",
]  # fmt: skip


def idf(df: int, n: int) -> float:
    """BM25's inverse document frequency (always > 0), counting an unseen term as seen once.

    A term no document has cannot tell documents apart; at its raw IDF it would weigh
    more than the rarest real match, and one typo would sink every score.
    """
    df = max(df, 1)
    n = max(n, df)
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def coverage(units: Sequence[Unit], idfs: Sequence[float], text: str) -> float:
    """The IDF-weighted share of the query's units present in ``text``, 0..1."""
    total = sum(idfs)
    if total <= 0.0:
        return 0.0
    folded = text.casefold()
    got = sum(w for u, w in zip(units, idfs, strict=True) if u.found_in(text, folded))
    return got / total


@dataclass(frozen=True, slots=True)
class SearchWeights:
    """How lexical and semantic similarity, importance and recency combine (module docstring).

    ``fusion="rrf"`` replaces the weighted sum by reciprocal-rank fusion (k = 60),
    scaled to 0..1; it is here to be measured against, not recommended.
    """

    semantic: float = 0.6
    importance: float = 0.2
    recency: float = 0.2
    half_life_days: float = 30.0
    fusion: str = "weighted"

    def __post_init__(self) -> None:
        for name in ("semantic", "importance", "recency"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ConfigError(f"SearchWeights.{name} must be within 0..1, got {value!r}")
        if not self.half_life_days > 0:
            raise ConfigError(f"half_life_days must be > 0, got {self.half_life_days!r}")
        if self.fusion not in ("weighted", "rrf"):
            raise ConfigError(f"fusion must be 'weighted' or 'rrf', got {self.fusion!r}")

    def relevance(
        self,
        lexical: float,
        cosine: float | None,
        *,
        lexical_rank: int | None = None,
        vector_rank: int | None = None,
    ) -> float:
        if self.fusion == "rrf":
            ranks = [r for r in (lexical_rank, vector_rank) if r is not None]
            return sum(1.0 / (61 + r) for r in ranks) / (2.0 / 61)
        if cosine is None:
            return lexical
        return self.semantic * max(cosine, 0.0) + (1.0 - self.semantic) * lexical


def weighted_score(
    relevance: float, importance: int, age_seconds: float, w: SearchWeights
) -> float:
    """relevance × importance factor × recency factor (each factor in [1 − w, 1])."""
    importance_factor = 1.0 - w.importance * (1.0 - importance / 100.0)
    fresh: float = 0.5 ** (max(age_seconds, 0.0) / (w.half_life_days * 86_400.0))
    recency_factor = 1.0 - w.recency * (1.0 - fresh)
    return relevance * importance_factor * recency_factor


# -- near duplicates -------------------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]+", re.UNICODE)


def normalize_text(text: str) -> str:
    """NFKC, case-folded, punctuation dropped, whitespace collapsed: what "the same" means."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCT.sub(" ", text).split())


def fingerprint(text: str) -> str:
    """A short hash of `normalize_text` (an indexed column finds exact duplicates)."""
    return hashlib.blake2b(normalize_text(text).encode(), digest_size=12).hexdigest()


def _shingles(norm: str, n: int = 3) -> set[str]:
    if len(norm) <= n:
        return {norm}
    return {norm[i : i + n] for i in range(len(norm) - n + 1)}


def shingle_similarity(a: str, b: str) -> float:
    """Jaccard similarity of character trigrams of the normalised texts (any language)."""
    na, nb = normalize_text(a), normalize_text(b)
    if na == nb:
        return 1.0
    sa, sb = _shingles(na), _shingles(nb)
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


# -- in-process scans ------------------------------------------------------------


@lru_cache(maxsize=8192)
def _document(text: str) -> tuple[dict[str, int], int]:
    """Term frequencies of ``text`` and its length in terms (read-only: shared)."""
    doc = Counter(cached_terms(text))
    return dict(doc), sum(doc.values())


def lexical_score(
    query_terms: Iterable[str], text: str, *, k1: float = 1.2, b: float = 0.5
) -> float:
    """How well ``text`` matches the query terms (0 when none occurs)."""
    doc, length = _document(text)
    if not doc:
        return 0.0
    norm = 1 - b + b * length / 24.0
    score = 0.0
    for t in set(query_terms):
        tf = doc.get(t, 0)
        if tf:
            # longer terms are rarer and say more; CJK bigrams count like a word
            weight = 1.0 + math.log1p(len(t))
            score += weight * tf * (k1 + 1) / (tf + k1 * norm)
    return score
