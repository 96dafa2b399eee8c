"""The deterministic 384-d embedder of the scale data set, shared by generator and bench.

Each term of a text (a lower-cased run of ASCII letters and digits, or a CJK
bigram, or a lone CJK character) gets a fixed pseudo-random vector: the bytes of
its SHAKE-256 digest as signed integers (never Python's salted ``hash``, so every
process, the generator and the bench alike, computes the same vector; a digest
is ~50x cheaper than seeding a generator per term); a text's vector
is the normalised sum of its terms' vectors. Texts sharing terms are close, as
with a real model, and the cost of storing and searching 384-d vectors is the
real one. Nothing here knows the store: it is an `Embedder` like any other.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ScaleEmbedder"]

_TERM = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]+")
_CJK = re.compile(r"[\u3400-\u9fff]")


def _terms(text: str) -> list[str]:
    out: list[str] = []
    for run in _TERM.findall(text.lower()):
        if _CJK.match(run):
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
            out.append(run[-1])
        else:
            out.append(run)
    return out


class ScaleEmbedder:
    """Seeded hash/random-projection embedder: ``dimension`` floats, unit rows."""

    def __init__(self, dimension: int = 384, seed: int = 0) -> None:
        self.name = f"scale-hash-{dimension}-s{seed}"
        self.dimension = dimension
        self.seed = seed
        self._index: dict[str, int] = {}
        self._table = np.zeros((1024, dimension), dtype=np.float32)

    def _row(self, term: str) -> int:
        i = self._index.get(term)
        if i is None:
            digest = hashlib.shake_256(f"{self.seed}:{term}".encode()).digest(self.dimension)
            i = len(self._index)
            if i == len(self._table):
                grown = np.zeros((2 * i, self.dimension), dtype=np.float32)
                grown[:i] = self._table
                self._table = grown
            self._table[i] = np.frombuffer(digest, dtype=np.int8)
            self._index[term] = i
        return i

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        zero = self._row("")  # the empty term never occurs: a zero row for padding
        self._table[zero] = 0.0
        for start in range(0, len(texts), 1024):
            ids = [[self._row(t) for t in _terms(text)] for text in texts[start : start + 1024]]
            width = max(map(len, ids), default=0)
            if width:
                padded = np.full((len(ids), width), zero, dtype=np.intp)
                for k, row in enumerate(ids):
                    padded[k, : len(row)] = row
                out[start : start + len(ids)] = self._table[padded].sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out
