"""The in-process vector index of one scope: exact search, or binary quantisation with rescoring.

Each scope's vectors live in one float32 matrix in memory, grown in place by
writes (never re-read per query). Up to ``exact_max`` rows (8,192, under 1 ms) a
query is an exact matrix-vector product. Beyond, the product alone would blow the
10 ms budget (100,000 × 384 float32 is 150 MB of memory traffic: 13-17 ms on the
development machine), so the index also keeps 1 bit per dimension (the sign of the
vector minus the scope's mean: 48 bytes per row, one contiguous array per 64-bit
word), ranks every row by Hamming distance with ``numpy.bitwise_count`` (~0.6 ms
at 100,000 rows, cut-off from a histogram instead of a sort), and rescores exactly
the best ``max(1024, 32 × k)`` rows: binary quantisation with rescoring, ~1 ms in
all. It is approximate only in which rows reach the rescoring; recall against
exact search is measured in ``bench/bench_memory.py``.

The index is an accelerator: the vectors' home is the store, which loads and
invalidates it by its scope's version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError

__all__ = ["Matrix", "VectorIndex"]


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
