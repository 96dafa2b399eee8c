"""The `TokenCounter` protocol and the counters that need no vocabulary file.

A `TokenCounter` needs a ``name`` (which identifies its vocabulary and settings, and
keys every cache) and ``count(text)``. Here: `HeuristicCounter` (no dependencies; a
conservative estimate meant never to count fewer tokens than cl100k_base or
o200k_base would, see `_estimate`) and `CachedCounter` (memoises counts of arbitrary
text by content). The exact counters (`TiktokenCounter`, `HFTokenizerCounter`) and
`default_counter` are in `_exact`; a message's cost with its framing
(`count_message`, `MessageOverhead`) in `_frame`; `truncate_to_tokens` in `_truncate`.
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict
from typing import Protocol, runtime_checkable

from .._errors import ConfigError
from ._estimate import estimate_tokens

__all__ = ["CachedCounter", "HeuristicCounter", "TokenCounter"]


@runtime_checkable
class TokenCounter(Protocol):
    """What the engine needs from a tokenizer: a stable name and a count.

    ``name`` must change whenever counts could change (another vocabulary, another
    setting), because counts are cached under it. A counter may set ``exact = True``
    when its counts are the provider's own; the engine then also guarantees the
    budget by that count.
    """

    name: str

    def count(self, text: str) -> int: ...


class HeuristicCounter:
    """Tokenizer-free estimate, tuned to never undercount cl100k_base or o200k_base.

    Words found in a shipped list of 80,000 strings that are one token in both
    encodings cost 1; other words, CJK, code, numbers and whitespace follow
    conservative rules (see `_estimate`). On the LoCoMo turns and a corpus
    of Chinese design documents with code it undercounts no text and over-counts by 4-12 %;
    ``bench/bench_heuristic.py`` measures it. The list loads on first use (about
    40 ms, 13 MB).
    """

    exact = False

    def __init__(self) -> None:
        # v3: with the word list; v4: bare rare words topped up (both 2026-11-21); v5:
        # runs of letters bounded by how BPE can cut them (2026-11-26).
        # Stored counts carry this name, so counts of an older version are redone.
        self.name = "heuristic-v5"

    def count(self, text: str) -> int:
        return estimate_tokens(text)

    def __repr__(self) -> str:
        return "HeuristicCounter()"


# -- tiktoken --------------------------------------------------------------------------


# A cut just after a newline followed by neither whitespace nor "/" (see TiktokenCounter).
_LINE_CUTS = re.compile(r"(?<=\n)(?=[^\s/])")


def line_pieces(text: str) -> list[str]:
    """``_LINE_CUTS.split(text)``, found from the text's line breaks.

    The regex tries its look-behind at every character; splitting on the line breaks
    (in C) and deciding at each by the character after it took a sixth of its time
    on a 4 KB summary (which is cut and counted a dozen times when it does not fit).
    ``str.isspace`` is the regex's whitespace class (both Unicode whitespace).
    """
    lines = text.split("\n")
    if len(lines) == 1:
        return lines
    out: list[str] = []
    start = 0
    at = len(lines[0])  # the newline after each line
    for line in lines[1:]:
        if line and line[0] != "/" and not line[0].isspace():
            out.append(text[start : at + 1])
            start = at + 1
        at += 1 + len(line)
    out.append(text[start:])
    return out


# characters; shorter texts are counted whole. 256 takes in the goal restatement
# (about 400 characters, of which only the quoted goal changes from turn to turn).
_SPLIT_ABOVE = 256


class CachedCounter:
    """Memoises another counter's counts by content: at most ``maxsize`` texts and
    about ``max_bytes`` of them (their memory and the cache's per entry), least
    recently used out first.

    The bound in bytes matters as much as the count: the texts counted include
    whole composed blocks and every prefix a truncation tries, a few KB each, so
    65,536 of them could hold a hundred MB in a long-running process.

    When the inner counter is ``line_additive`` (tiktoken), a long text is counted as
    the sum of its lines' cached counts — exactly what counting it whole gives — so
    a composed message that differs from the last build's in one block (a system
    message, the dynamic tail) costs the tokenizer only that block's lines.
    """

    def __init__(self, inner: TokenCounter, maxsize: int = 65536, max_bytes: int = 8 << 20) -> None:
        if maxsize < 1:
            raise ConfigError("CachedCounter maxsize must be at least 1")
        if max_bytes < 1:
            raise ConfigError("CachedCounter max_bytes must be at least 1")
        self.inner = inner
        self.name = inner.name
        self.exact = bool(getattr(inner, "exact", False))
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.nbytes = 0  # what the entries take, by `_entry_bytes`
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._by_lines = bool(getattr(inner, "line_additive", False))
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        cache = self._cache
        hit = cache.get(text)
        if hit is not None:
            self.hits += 1
            cache.move_to_end(text)
            return hit
        if self._by_lines and len(text) > _SPLIT_ABOVE and "\n" in text:
            pieces = line_pieces(text)
            if len(pieces) > 1:
                n = sum(map(self._count_piece, pieces))
                self._remember(text, n)
                return n
        return self._count_piece(text)

    def _count_piece(self, text: str) -> int:
        hit = self._cache.get(text)
        if hit is not None:
            self.hits += 1
            self._cache.move_to_end(text)
            return hit
        self.misses += 1
        n = self.inner.count(text)
        self._remember(text, n)
        return n

    def _remember(self, text: str, n: int) -> None:
        cache = self._cache
        if text not in cache:
            self.nbytes += _entry_bytes(text)
        cache[text] = n
        while cache and (len(cache) > self.maxsize or self.nbytes > self.max_bytes):
            old, _ = cache.popitem(last=False)
            self.nbytes -= _entry_bytes(old)

    def __repr__(self) -> str:
        return f"CachedCounter({self.inner!r})"


# an entry's memory besides its text: the ordered dict's slot and link node, the int
_ENTRY_OVERHEAD = 100


def _entry_bytes(text: str) -> int:
    return sys.getsizeof(text) + _ENTRY_OVERHEAD


# -- messages --------------------------------------------------------------------------


# -- truncation ------------------------------------------------------------------------
