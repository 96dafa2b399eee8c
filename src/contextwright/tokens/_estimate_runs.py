"""The most tokens BPE can spend on a run of letters, from the word list alone.

`most_tokens` bounds what cl100k_base or o200k_base make of a run of ASCII letters
(with the one character before it that their pre-tokenizers keep with it) without
their vocabularies: only the pieces that are one token in both
(``data/heuristic_words.txt.gz``), which `contextwright.tokens._estimate` loads and
passes in. `letter_runs` charges each unlisted run this bound, beyond what the fitted part of
the estimate gives it.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["letter_runs", "most_tokens"]

# The most tokens a listed word (lower-case or Capitalised; ALL-CAPS) costs bare, by
# length, in either encoding, after any of "", "\t", "(", ".", "“", "\xa0", "—" (that
# character's own tokens apart), made non-decreasing; longer words take the last
# entry. Measured on the word list's 36,879 words with tiktoken 0.14 (2026-11-21).
_BARE_LOWER = (0, 1, 2, 3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5)
_BARE_UPPER = (0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)
# An unlisted run of ASCII letters, with the one character before it that BPE keeps
# with it (a space, a tab, punctuation), maybe followed by non-ASCII letters or marks
# ("miglioŕ", whose own bytes are priced apart).
_RE_LETTER_RUN = re.compile(r"([^\r\nA-Za-z0-9]?)([A-Za-z]+)([^\x00-\x7f]*)")
_RE_ASCII_LETTERS = re.compile(r"[A-Za-z]+")
_RE_ACRONYM = re.compile(r"[A-Z]{2,}")
_RE_CAMEL_CHANGE = re.compile(r"[a-z][A-Z]")

# The longest listed piece `most_tokens` tries as one token.
_LONGEST_TRIED = 8
_beginnings: frozenset[str] | None = None


def _load_beginnings(pieces: frozenset[str]) -> frozenset[str]:
    """The beginnings (2 characters or more) of the listed pieces of one character and
    letters of up to `_LONGEST_TRIED` characters: where to look for a longer piece."""
    global _beginnings
    runs = [p for p in pieces if 2 < len(p) <= _LONGEST_TRIED and p[1:].isalpha() and p.isascii()]
    _beginnings = frozenset({p[:k] for p in runs for k in range(2, len(p))})
    return _beginnings


def most_tokens(run: str, pieces: frozenset[str]) -> int:
    """The most tokens BPE can leave ``run`` in, by the listed pieces.

    BPE (tiktoken's) merges two neighbouring tokens as long as what they make is a
    token, so it never leaves two neighbours that make a listed piece. The answer is
    the longest cut of ``run`` into single characters and listed pieces (of up to
    `_LONGEST_TRIED` characters) in which no two neighbours make a listed piece: a
    bound of the count in either encoding that does not depend on the merge order
    ("datadata...": "dat", "ad", "ata", ... not "data", "data"), that holds on runs
    where the list is of no help ("zqjvxk": one token a letter) and that never exceeds
    the number of characters. Dynamic programming from left to right, one step per
    listed piece found in ``run``.
    """
    beginnings = _beginnings or _load_beginnings(pieces)
    n = len(run)
    # ends[e]: (start, most tokens) of the cuts of run[:e] whose last piece is run[start:e]
    ends: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for start in range(n):
        cuts = ends[start]
        if start and not cuts:
            continue
        end = start + 1
        listed = more = True  # one character, and maybe the start of a piece
        while True:
            if listed:
                most = 1 if start == 0 else 0
                for before, k in cuts:
                    if k >= most and (end - before > 27 or run[before:end] not in pieces):
                        most = k + 1
                if most:
                    ends[end].append((start, most))
            if not more or end == n:
                break
            end += 1
            listed = run[start:end] in pieces
            more = run[start:end] in beginnings
    return max((k for _, k in ends[n]), default=n)


def letter_runs(unknown: list[str], pieces: frozenset[str], weights: dict[str, float]) -> float:
    """What unlisted runs of ASCII letters cost beyond what the fitted part gives them.

    The fitted price of an unknown word (2 and 0.108 a letter for a word of a listed
    shape, 1.221 for one after a non-ASCII character, 1.297 more per run of capitals,
    1.535 per change to a capital, plus a margin that grows with the square root of
    the number of words) was fitted on prose and code, where unknown words are made
    of common parts. Long rare words ("pneumonoultramicroscopicsilicovolcanoconiosis":
    17 tokens), letter soup ("cptpcrd", one token a letter in both encodings) and
    words glued together ("datadatadata": "dat", "ad", "ata", ...) cost far more. Each
    distinct run is topped up to `most_tokens`, and a bare one (no space before it:
    after a newline, a tab, punctuation, a no-break space, a curly quote, a dash) at
    least to the most a listed word of its length costs bare (`_BARE_LOWER`): such
    words merge far less ("bureaucracy" is 5 tokens in cl100k_base, " bureaucracy" 1).
    """
    extra = 0.0
    for piece, n in Counter(unknown).items():
        m = _RE_LETTER_RUN.fullmatch(piece)
        if m is None:
            if not piece.isascii() and _RE_ASCII_LETTERS.search(piece):
                # ASCII runs among non-ASCII letters ("read中read"): each run on its own,
                # priced as another word (the other characters' bytes apart)
                runs = _RE_ASCII_LETTERS.findall(piece)
                worst = sum(most_tokens(run, pieces) for run in runs)
                given = weights["other_words"] * len(runs)
                given += weights["acronyms"] * len(_RE_ACRONYM.findall(piece))
                given += weights["camel"] * len(_RE_CAMEL_CHANGE.findall(piece))
                if worst > given:
                    extra += n * (worst - given)
            continue
        before, word, after = m.groups()
        if before.isascii() and not after:  # one piece with the character before it
            worst = most_tokens(piece, pieces)
        else:  # that character's (or those after) own tokens apart
            worst = most_tokens(word, pieces)
        if before != " " and word not in pieces:  # a bare word
            table = _BARE_UPPER if len(word) > 1 and word.isupper() else _BARE_LOWER
            worst = max(worst, table[min(len(word), len(table) - 1)])
        if (
            piece[0].isascii()
            and not after
            and (word.islower() or word.isupper() or word.istitle())
        ):
            # a listed shape: priced as a plain word
            given = weights["plain_words"] + weights["plain_word_chars"] * (len(piece) - 1)
        else:  # priced as another word
            given = weights["other_words"]
        if not word.islower():  # and its runs of capitals, its changes to a capital
            given += weights["acronyms"] * len(_RE_ACRONYM.findall(word))
            given += weights["camel"] * len(_RE_CAMEL_CHANGE.findall(word))
        if worst > given:
            extra += n * (worst - given)
    return extra
