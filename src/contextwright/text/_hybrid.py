"""Hybrid search, the pure part: terms, scores, fusion, weighting, and the vector index.

No I/O here; `SQLiteMemoryStore` and `SQLiteKnowledgeStore` feed it what FTS5 and
their cached vectors return.

**Candidates.** A query collects up to ``4 × limit`` (at least 32) candidates from
each side: FTS5 (``_textindex.py``; CJK pre-split into bigrams exactly as the
message index does, ``stores/sqlite/_fts.py``; English stop words dropped from the query
so "where does she work" asks for "work") and the vector index by cosine. Each
candidate in the union then gets *both* signals, exactly: its cosine from the
cached matrix, its lexical score from its text.

**Relevance** (0..1, what ``min_score`` cuts):

- lexical = IDF-weighted coverage: the share of the query's information present in
  the text, Σ idf(found terms) / Σ idf(query terms), with BM25's IDF over the whole
  index. Terms are stemmed words (stop words dropped) and CJK bigrams. BM25 itself
  is unbounded and relative to the corpus, so it cannot carry a threshold; coverage
  can ("the rare half of what was asked is there"), and memories are a sentence or
  two, where BM25's term-frequency and length factors add little. BM25 still picks
  the candidates (``_textindex.py``), and equal coverage is ordered by importance
  and recency below.
- with vectors: relevance = α · max(cosine, 0) + (1 − α) · lexical, α = 0.6.
- without (no embedder, or a memory stored without a vector): relevance = lexical.

A normalised weighted sum rather than reciprocal-rank fusion: RRF throws the scores
away (one strong match and one weak one get the same credit for the same rank)
and yields no absolute number to cut on. Measured with MiniLM on the labelled
paraphrase set in ``bench/bench_memory.py``; see bench/README.md.

**Weighting** (importance ranks; recency breaks ties in time; docs/design-notes.md,
Built-in sources)::

    score = relevance × (1 − wᵢ·(1 − importance/100)) × (1 − wᵣ·(1 − 2^(−age/half_life)))

with wᵢ = wᵣ = 0.2 and a 30-day half-life: a memory of importance 0 keeps 80% of
its relevance, one created a year ago about 80%. Both factors are at most 1, so
the score stays in 0..1 and never exceeds the relevance; ranking among equally
relevant memories follows importance and age, while a clearly more relevant one
still wins.

**Vector index.** Each scope's vectors live in one float32 matrix in memory, grown
in place by writes (never re-read per query). Up to ``exact_max`` rows (8,192, under
1 ms) a query is an exact matrix-vector product. Beyond, the product alone would
blow the 10 ms budget (100,000 × 384 float32 is 150 MB of memory traffic: 13-17 ms
on the development machine), so the index also keeps 1 bit per dimension (the sign
of the vector minus the scope's mean: 48 bytes per row, one contiguous array per
64-bit word), ranks every row by Hamming distance with ``numpy.bitwise_count``
(~0.6 ms at 100,000 rows, cut-off from a histogram instead of a sort), and rescores
exactly the best ``max(1024, 32 × k)`` rows: binary quantisation with rescoring,
~1 ms in all. It is approximate only in which rows reach the rescoring; recall
against exact search is measured in ``bench/bench_memory.py``.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError

__all__ = [
    "SearchWeights",
    "Unit",
    "VectorIndex",
    "coverage",
    "fingerprint",
    "idf",
    "normalize_text",
    "query_units",
    "shingle_similarity",
    "weighted_score",
]

# Function words that say nothing about what a memory is about; dropped from queries.
STOP_WORDS = frozenset(
    ["a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "myself", "no", "not", "now", "of", "on", "or", "our", "ours", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "tell", "know", "remember", "said", "say", "much", "many", "please"]
)  # fmt: skip

# Chinese function characters: a bigram holding one ("通的", "是什", "我还") is almost
# always an artefact of cutting a sentence into pairs, not a word; such bigrams are
# dropped from queries (unless nothing else is left), as stop words are in English.
CJK_STOP_CHARS = frozenset("的了吗呢吧啊么什怎哪我你他她它们这那些还就很都也是")

_CJK = "\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_TOKEN = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>(?:(?![{_CJK}])[^\\W_])+)")


def _root(word: str) -> str:
    """A deliberately crude stem: one of -ies/-es/-ing/-ed/-s off, then a final e.

    Coverage looks for a word *starting* with the root and at most four letters
    longer, so "work" meets works/worked/working, "like" (root "lik") meets
    likes/liked, "cities" (root "cit") meets city. FTS5 itself stems with Porter;
    this only scores, and a rare miss lowers a score, it never hides a result.
    """
    if len(word) > 3 and word.isalpha():
        for suffix in ("ies", "es", "ing", "ed", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
                word = word[: -len(suffix)]
                break
        if word.endswith("e") and len(word) > 3:
            word = word[:-1]
    return word


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Unit:
    """One query term: what coverage looks for, and its one-term FTS5 expression."""

    term: str
    expr: str
    cjk: bool = False
    pattern: re.Pattern[str] | None = field(default=None, compare=False)

    def found_in(self, text: str, folded: str) -> bool:
        """Whether ``text`` (``folded`` is its casefold) contains this term."""
        if self.pattern is None:
            return self.term in text
        return self.pattern.search(folded) is not None


def _word_unit(word: str) -> Unit:
    root = _root(word)
    tail = r"\w{0,4}" if root != word or len(word) > 3 else ""
    return Unit(root, _quote(word), pattern=re.compile(rf"(?<!\w){re.escape(root)}{tail}(?!\w)"))


def query_units(query: str, limit: int = 32) -> list[Unit]:
    """The content terms of ``query``: words and CJK bigrams (a lone CJK character as a
    prefix query, as ``stores/sqlite/_fts`` does), stop words and bigrams of function
    characters dropped unless nothing else is left, without repeats, at most ``limit``
    (a pasted essay is not a query)."""
    units: list[tuple[Unit, bool]] = []
    for m in _TOKEN.finditer(query):
        run = m.group("cjk")
        if run is None:
            word = m.group("word").casefold()
            units.append((_word_unit(word), word in STOP_WORDS))
        elif len(run) == 1:
            units.append((Unit(run, _quote(run) + "*", cjk=True), run in CJK_STOP_CHARS))
        else:
            for i in range(len(run) - 1):
                pair = run[i : i + 2]
                stop = pair[0] in CJK_STOP_CHARS or pair[1] in CJK_STOP_CHARS
                units.append((Unit(pair, _quote(pair), cjk=True), stop))
    kept = [u for u, stop in units if not stop] or [u for u, _ in units]
    unique: dict[str, Unit] = {}
    for u in kept:
        unique.setdefault(u.term, u)
    return list(unique.values())[:limit]


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


# -- the vector index --------------------------------------------------------------------

Matrix = npt.NDArray[np.float32]
_SUPERSEDED, _INACTIVE, _GONE = 1, 2, 4


def _dot(matrix: Matrix, q: Matrix) -> Matrix:
    """Row-wise dot products in numpy's own loop, not BLAS: BLAS hands a product of this
    size to worker threads that spin for a core, and on a busy machine that turned a
    1 ms search into a 5-6 ms p95 (einsum: same p50, p95 1.1 ms; measured on 2 cores)."""
    out: Matrix = np.einsum("ij,j->i", matrix, q)
    return out


def _pack_signs(x: Matrix, words: int) -> npt.NDArray[np.uint64]:
    bits = np.packbits(x > 0, axis=1)
    pad = words * 8 - bits.shape[1]
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


class VectorIndex:
    """The vectors of one scope: ids ascending, flags, category codes, and the matrix.

    ``version`` is the scope's write counter in the database when the index was
    loaded; the store compares it with the database's to notice other writers.
    """

    def __init__(
        self,
        dimension: int,
        version: int = 0,
        *,
        exact_max: int = 20_000,
        pool: int = 1024,
        capacity: int = 64,
    ) -> None:
        self.dimension = dimension
        self.version = version
        self.exact_max = exact_max
        self.pool = pool
        self.n = 0
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._flags = np.zeros(capacity, dtype=np.uint8)
        self._cats = np.zeros(capacity, dtype=np.int32)
        self._vectors = np.zeros((capacity, dimension), dtype=np.float32)
        self._codes: dict[str, int] = {}
        self._words = (dimension + 63) // 64
        self._bits: npt.NDArray[np.uint64] | None = None  # (words, capacity): one row per word
        self._mean: Matrix | None = None
        self._flagged = 0  # rows with any flag set: none means no mask to build

    @property
    def nbytes(self) -> int:
        return int(self._vectors.nbytes + (0 if self._bits is None else self._bits.nbytes))

    def _code(self, category: str) -> int:
        return self._codes.setdefault(category, len(self._codes))

    def _grow(self, need: int) -> None:
        cap = len(self._ids)
        if need <= cap:
            return
        new = max(need, cap * 2)
        self._ids = np.resize(self._ids, new)
        self._flags = np.resize(self._flags, new)
        self._cats = np.resize(self._cats, new)
        vectors = np.zeros((new, self.dimension), dtype=np.float32)
        vectors[: self.n] = self._vectors[: self.n]
        self._vectors = vectors
        if self._bits is not None:
            bits = np.zeros((self._words, new), dtype=np.uint64)
            bits[:, : self.n] = self._bits[:, : self.n]
            self._bits = bits

    def append(
        self,
        ids: Sequence[int],
        vectors: Matrix,
        categories: Sequence[str],
        *,
        superseded: Sequence[bool] | None = None,
        active: Sequence[bool] | None = None,
    ) -> None:
        k = len(ids)
        if k == 0:
            return
        if vectors.shape != (k, self.dimension):
            raise ConfigError(f"vectors of shape {vectors.shape}, expected ({k}, {self.dimension})")
        ids_arr = np.asarray(ids, dtype=np.int64)
        if (self.n and ids_arr[0] <= self._ids[self.n - 1]) or np.any(np.diff(ids_arr) <= 0):
            raise ConfigError("vector ids must be appended in ascending order")
        self._grow(self.n + k)
        end = self.n + k
        self._ids[self.n : end] = ids_arr
        self._vectors[self.n : end] = vectors
        self._cats[self.n : end] = [self._code(c) for c in categories]
        flags = np.zeros(k, dtype=np.uint8)
        if superseded is not None:
            flags |= np.asarray(superseded, dtype=bool).astype(np.uint8) * _SUPERSEDED
        if active is not None:
            flags |= (~np.asarray(active, dtype=bool)).astype(np.uint8) * _INACTIVE
        self._flags[self.n : end] = flags
        self._flagged += int(np.count_nonzero(flags))
        if self._bits is not None and self._mean is not None:
            self._bits[:, self.n : end] = _pack_signs(vectors - self._mean, self._words).T
        self.n = end

    def position(self, id_: int) -> int | None:
        i = int(np.searchsorted(self._ids[: self.n], id_))
        return i if i < self.n and self._ids[i] == id_ else None

    def _set(self, id_: int, flag: int, on: bool) -> None:
        i = self.position(id_)
        if i is not None:
            was = self._flags[i] != 0
            self._flags[i] = (self._flags[i] | flag) if on else (self._flags[i] & ~flag)
            self._flagged += int(self._flags[i] != 0) - int(was)

    def set_superseded(self, id_: int, superseded: bool = True) -> None:
        self._set(id_, _SUPERSEDED, superseded)

    def set_active(self, id_: int, active: bool) -> None:
        self._set(id_, _INACTIVE, not active)

    def remove(self, id_: int) -> None:
        self._set(id_, _GONE, True)

    def _mask(
        self, categories: Iterable[str] | None, include_superseded: bool
    ) -> npt.NDArray[np.bool_] | None:
        """Which rows pass the filters; None when all do (the common case, no work)."""
        mask: npt.NDArray[np.bool_] | None = None
        if self._flagged:
            blocked = _INACTIVE | _GONE | (0 if include_superseded else _SUPERSEDED)
            mask = (self._flags[: self.n] & blocked) == 0
        if categories is not None:
            codes = [self._codes[c] for c in categories if c in self._codes]
            in_cats = np.isin(self._cats[: self.n], codes)
            mask = in_cats if mask is None else mask & in_cats
        return mask

    def _build_bits(self) -> npt.NDArray[np.uint64]:
        live = self._vectors[: self.n]
        self._mean = live.mean(axis=0, dtype=np.float64).astype(np.float32)
        bits = np.zeros((self._words, len(self._ids)), dtype=np.uint64)
        for start in range(0, self.n, 16_384):  # bounded temporaries
            stop = min(start + 16_384, self.n)
            bits[:, start:stop] = _pack_signs(live[start:stop] - self._mean, self._words).T
        self._bits = bits
        return bits

    def _prefilter(
        self, q: Matrix, mask: npt.NDArray[np.bool_] | None, m: int
    ) -> npt.NDArray[np.intp]:
        """The ``m`` rows (or a few more, on ties) nearest ``q`` by Hamming distance of signs."""
        bits = self._bits if self._bits is not None else self._build_bits()
        assert self._mean is not None
        qbits = _pack_signs((q - self._mean).reshape(1, -1), self._words)[0]
        # One contiguous pass per 64-bit word: 6 passes for 384-d, ~1 ms at 100,000 rows.
        distance = np.bitwise_count(bits[0, : self.n] ^ qbits[0]).astype(np.uint16)
        for w in range(1, self._words):
            distance += np.bitwise_count(bits[w, : self.n] ^ qbits[w])
        ceiling = 64 * self._words + 1
        if mask is not None:
            distance[~mask] = ceiling
        # The distance that m rows reach, from a histogram: cheaper than argpartition.
        counts = np.cumsum(np.bincount(distance, minlength=ceiling + 1))
        cut = int(np.searchsorted(counts, m))
        return np.flatnonzero(distance <= min(cut, ceiling - 1))

    def nearest(
        self,
        query: Matrix,
        k: int,
        *,
        categories: Iterable[str] | None = None,
        include_superseded: bool = False,
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (id, cosine) pairs, best first, among rows passing the filters."""
        if self.n == 0 or k <= 0:
            return []
        mask = self._mask(categories, include_superseded)
        live = self.n if mask is None else int(np.count_nonzero(mask))
        if live == 0:
            return []
        q = query.reshape(-1)
        rows: npt.NDArray[np.intp] | None
        if self.n <= self.exact_max or live <= self.pool:
            rows = None if mask is None else np.flatnonzero(mask)
            scores = _dot(self._vectors[: self.n] if rows is None else self._vectors[rows], q)
        else:
            rows = self._prefilter(q, mask, min(max(self.pool, 32 * k), live))
            scores = _dot(self._vectors[rows], q)
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        best = best[np.argsort(-scores[best], kind="stable")]
        picked = best if rows is None else rows[best]
        return [(int(self._ids[i]), float(scores[j])) for i, j in zip(picked, best, strict=True)]

    def cosines(self, ids: Iterable[int], query: Matrix) -> dict[int, float]:
        """Exact cosines of the given ids that have a vector here (others are left out)."""
        wanted = np.fromiter(ids, dtype=np.int64)
        if self.n == 0 or len(wanted) == 0:
            return {}
        at = np.searchsorted(self._ids[: self.n], wanted)
        at[at >= self.n] = 0
        hit = self._ids[at] == wanted
        rows = at[hit]
        scores = _dot(self._vectors[rows], query.reshape(-1))
        return {int(i): float(v) for i, v in zip(wanted[hit], scores, strict=True)}
