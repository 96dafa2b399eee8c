"""Lexical matching for the in-memory stores: terms in any language, and a score.

Latin-script text is split into lower-cased words; Chinese, Japanese and Korean
runs, which have no spaces, are split into overlapping character bigrams (plus
the single characters of a one-character run), the usual trick that lets a
lexical index match CJK without a segmenter. The score is a BM25-like sum over
the query terms present, saturated by term frequency and normalised by length.

The in-memory stores score every item on every search, so the terms of a text
are memoised (the items do not change between searches; a build's three
searches share one query): it halved those sources' share of a build.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["lexical_score", "terms"]

_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_STOP_LIST = """a an and are as at be by do did for from has have i in is it me my of on or so that
    the this to was we were what when where which who why will with you your"""
_STOP = frozenset(_STOP_LIST.split())


def terms(text: str) -> list[str]:
    """Search terms of ``text``: words (stop words removed) and CJK bigrams."""
    return list(_terms(text))


@lru_cache(maxsize=8192)
def _terms(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for run in _CJK.findall(text):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    rest = _CJK.sub(" ", text).lower()
    out.extend(w for w in _WORD.findall(rest) if w not in _STOP)
    return tuple(out)


@lru_cache(maxsize=8192)
def _document(text: str) -> tuple[dict[str, int], int]:
    """Term frequencies of ``text`` and its length in terms (read-only: shared)."""
    doc = Counter(_terms(text))
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
