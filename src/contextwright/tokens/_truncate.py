"""Cutting text to a number of tokens without splitting a character, a grapheme cluster or an emoji sequence."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Literal

from .._errors import ConfigError
from ._count import TokenCounter

__all__ = [
    "_JOINERS",
    "_is_regional_indicator",
    "_largest_fitting",
    "_safe_cut",
    "truncate_to_tokens",
]


_JOINERS = {"\u200d", "\u200c"}


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _safe_cut(text: str, i: int) -> int:
    """Move a cut point left until it does not split a character cluster.

    Combining marks (every mark, category M*, including those of combining class 0 such
    as Thai and Devanagari vowel signs or the keycap), variation selectors and
    zero-width joiners belong to the character before them, so a cut never lands just
    before one (nor right after a joiner); nor does it split a flag (a pair of
    regional indicators). Python strings hold code points, so no code point is ever
    split.
    """
    while 0 < i < len(text):
        ch = text[i]
        prev = text[i - 1]
        if (
            unicodedata.category(ch)[0] == "M"
            or ch in _JOINERS
            or prev in _JOINERS
            or 0xFE00 <= ord(ch) <= 0xFE0F
            or 0x1F3FB <= ord(ch) <= 0x1F3FF  # skin-tone modifiers
        ):
            i -= 1
        elif _is_regional_indicator(ch) and _is_regional_indicator(prev):
            run = 1  # regional indicators pair up from the start of their run
            while i - run - 1 >= 0 and _is_regional_indicator(text[i - run - 1]):
                run += 1
            if run % 2 == 0:
                break
            i -= 1
        else:
            break
    return i


def _largest_fitting(n: int, fits: Callable[[int], bool], guess: int) -> int:
    """The largest k in [0, n] with fits(k), given fits is monotone and fits(0) holds."""
    guess = max(0, min(n, guess))
    if fits(guess):
        lo, step = guess, max(1, (n - guess) // 16)
        while lo < n:
            hi = min(n, lo + step)
            if not fits(hi):
                break
            lo, step = hi, step * 2
        else:
            return n
        lo_ok, hi_bad = lo, min(n, lo + step)
    else:
        hi_bad, step = guess, max(1, guess // 16)
        while True:
            lo = max(0, hi_bad - step)
            if lo == 0 or fits(lo):
                lo_ok = lo
                break
            hi_bad, step = lo, step * 2
    while hi_bad - lo_ok > 1:
        mid = (lo_ok + hi_bad) // 2
        if fits(mid):
            lo_ok = mid
        else:
            hi_bad = mid
    return lo_ok


def truncate_to_tokens(
    text: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    keep: Literal["head", "tail", "both"] = "head",
    marker: str = "…[truncated {omitted} chars]",
) -> str:
    """Cut ``text`` so that ``counter.count(result) <= max_tokens``, marking the cut.

    ``keep`` says which end survives ("both" keeps head and tail around the marker).
    ``marker`` may use ``{omitted}`` (characters removed); it is left out when even
    the marker does not fit, and the result is ``""`` when nothing fits.
    The cut never splits a character (see `_safe_cut`).
    """
    if max_tokens < 0:
        raise ConfigError(f"max_tokens must be >= 0, got {max_tokens}")
    total = counter.count(text)
    if total <= max_tokens:
        return text
    n = len(text)

    def build(k: int) -> str:
        if keep == "head":
            cut = _safe_cut(text, k)
            return text[:cut] + marker.format(omitted=n - cut) if marker else text[:cut]
        if keep == "tail":
            start = _safe_cut(text, n - k) if k else n
            return marker.format(omitted=start) + text[start:] if marker else text[start:]
        head = _safe_cut(text, (k + 1) // 2)
        tail_start = _safe_cut(text, n - k // 2) if k // 2 else n
        omitted = tail_start - head
        return text[:head] + marker.format(omitted=omitted) + text[tail_start:]

    if marker and counter.count(build(0)) > max_tokens:
        marker = ""
    if not marker and max_tokens == 0:
        return ""
    guess = int(n * max_tokens / max(total, 1))
    k = _largest_fitting(n - 1, lambda k: counter.count(build(k)) <= max_tokens, guess)
    return build(k)
