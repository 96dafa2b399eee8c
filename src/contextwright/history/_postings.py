"""Recall's full-text index, in process: the turns' terms, and BM25 over them.

Recall searches a conversation's old turns on every build. The store's FTS5 index
answered that in about 0.35 ms a search at 10,000 messages (two thirds of it
FTS5's own lookups of each term in each index segment and its BM25 statistics),
more than the rest of a build's history work. Recall already keeps every turn of
the conversation in process (`TurnIndex`), so it keeps their terms too, and a
search walks only the postings of the query's rarest terms: a few dozen
microseconds. The store's index stays what `Store.search` answers from.

The terms are the store's, so that both find the same turns:

- text is split as FTS5's ``unicode61`` tokenizer splits it (runs of letters and
  digits, lower-cased, diacritics removed from Latin letters, final sigma
  folded) and each word is stemmed as its ``porter`` tokenizer does (`stem`: M.
  F. Porter's 1980 algorithm, on the UTF-8 bytes, nothing over 64 bytes);
- CJK runs become their overlapping bigrams plus the run's last character alone
  (``storage/_fts.py``'s `segment`);
- a query is read as the store reads it (`query_units`): words, CJK bigrams, the
  phrase of a longer CJK run (an exact substring, found in the turn's text) and a
  lone CJK character as a prefix of the bigrams it starts.

The score is FTS5's ``bm25()`` (k1 1.2, b 0.75, each term's IDF floored just
above zero), with the statistics of this conversation's turns rather than of
every message in the file. Postings are kept per term as ascending integers,
``position << 8 | min(tf, 255)``, so a search cut at the window's oldest turn is
a bisection, and a term costs 8 bytes (an array item) per turn that holds it:
27 MB for the benchmark's 100,000 messages, whose turn texts take 39 MB.

``tests/test_postings.py`` checks the terms against a real FTS5 table's and the
scores against its ``bm25()``. Known differences: symbols and emoji, private-use
characters and a few case foldings (FTS5's tables are Unicode 6.1's), and a term
repeated more than 255 times in one turn (its count is capped).
"""

from __future__ import annotations

import bisect
import math
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Sequence

from ..stores.sqlite._fts import query_units, segment, starts_cjk

__all__ = ["Postings", "stem", "text_terms"]

# unicode61's tokens: letters and digits, with the combining diacritics that follow
# them (it removes those; Python's \w does not count them as word characters)
_TOKEN = re.compile(r"(?:[^\W_][\u0300-\u036f]*)+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # the same, for lower-cased ASCII text (faster)
_K1 = 1.2
_B = 0.75
_TF_BITS = 8
_TF_MAX = (1 << _TF_BITS) - 1


# -- Porter's stemmer ---------------------------------------------------------------------


def _consonant(w: str, i: int) -> bool:
    c = w[i]
    if c in "aeiou":
        return False
    if c == "y":
        return i == 0 or not _consonant(w, i - 1)
    return True


def _measure(w: str) -> int:
    """m in [C](VC){m}[V]: how many vowel-consonant sequences ``w`` has."""
    m = 0
    vowel = False
    for i in range(len(w)):
        if _consonant(w, i):
            if vowel:
                m += 1
            vowel = False
        else:
            vowel = True
    return m


def _has_vowel(w: str) -> bool:
    return any(not _consonant(w, i) for i in range(len(w)))


def _double(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _consonant(w, len(w) - 1)


def _cvc(w: str) -> bool:
    """Consonant-vowel-consonant at the end, the last not w, x or y ("hop", not "snow")."""
    n = len(w)
    return (
        n >= 3
        and _consonant(w, n - 3)
        and not _consonant(w, n - 2)
        and _consonant(w, n - 1)
        and w[-1] not in "wxy"
    )


def _longest(suffixes: dict[str, str], w: str) -> str | None:
    for k in range(min(len(w), 7), 0, -1):
        if w[-k:] in suffixes:
            return w[-k:]
    return None


_STEP2 = {
    "ational": "ate", "tional": "tion", "enci": "ence", "anci": "ance", "izer": "ize",
    "bli": "ble", "alli": "al", "entli": "ent", "eli": "e", "ousli": "ous",
    "ization": "ize", "ation": "ate", "ator": "ate", "alism": "al", "iveness": "ive",
    "fulness": "ful", "ousness": "ous", "aliti": "al", "iviti": "ive", "biliti": "ble",
    "logi": "log",
}  # fmt: skip
_STEP3 = {
    "icate": "ic", "ative": "", "alize": "al", "iciti": "ic", "ical": "ic", "ful": "",
    "ness": "",
}  # fmt: skip
_STEP4 = dict.fromkeys(
    [
        "al",
        "ance",
        "ence",
        "er",
        "ic",
        "able",
        "ible",
        "ant",
        "ement",
        "ment",
        "ent",
        "ion",
        "ou",
        "ism",
        "ate",
        "iti",
        "ous",
        "ive",
        "ize",
    ],
    "",
)


def stem(word: str) -> str:
    """The Porter stem of a lower-case ASCII token ("recitals" → "recit"); others unchanged.

    Digits count as consonants, as in SQLite's stemmer ("1900s" → "1900"), and
    as there, tokens shorter than 3 or longer than 64 bytes are left alone.
    """
    if not 2 < len(word) <= 64 or not word.isascii():
        return word
    return _porter(word)


def _porter(word: str) -> str:
    """Porter's steps on ``word`` (any characters; only ASCII vowels count as vowels)."""
    w = word
    # step 1a: plurals
    if w.endswith(("sses", "ies")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # step 1b: -eed, -ed, -ing
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    else:
        cut = 2 if w.endswith("ed") else 3 if w.endswith("ing") else 0
        if cut and _has_vowel(w[:-cut]):
            w = w[:-cut]
            if w.endswith(("at", "bl", "iz")):
                w += "e"
            elif _double(w) and w[-1] not in "lsz":
                w = w[:-1]
            elif _measure(w) == 1 and _cvc(w):
                w += "e"
    # step 1c: y -> i after a vowel somewhere
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    # steps 2-4: the longest listed suffix, replaced if the stem before it is long enough
    for table, least in ((_STEP2, 1), (_STEP3, 1), (_STEP4, 2)):
        suffix = _longest(table, w)
        if suffix is not None:
            base = w[: -len(suffix)]
            if _measure(base) >= least and (suffix != "ion" or base.endswith(("s", "t"))):
                w = base + table[suffix]
    # step 5: a final -e, a double l
    if w.endswith("e"):
        m = _measure(w[:-1])
        if m > 1 or (m == 1 and not _cvc(w[:-1])):
            w = w[:-1]
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w


# -- terms ---------------------------------------------------------------------------------


_FOLDED: dict[str, str] = {}  # token -> term; a conversation's vocabulary is small
_FOLDED_MAX = 1 << 17


def _fold(token: str) -> str:
    """A lower-cased token as the index keeps it: without diacritics, stemmed (memoised)."""
    term = _FOLDED.get(token)
    if term is None:
        term = _fold_new(token)
        if len(_FOLDED) >= _FOLDED_MAX:
            _FOLDED.clear()
        _FOLDED[token] = term
    return term


def _is_latin(c: str) -> bool:
    return c < "\u0250" or "\u1e00" <= c <= "\u1eff"


def _strip_latin_diacritics(token: str) -> str:
    """``remove_diacritics 2``: marks go from Latin letters only ("é" → "e"; "ё", "ά" stay)."""
    kept: list[str] = []
    latin = False
    for c in unicodedata.normalize("NFD", token):
        if unicodedata.combining(c):
            if latin:
                continue
        else:
            latin = _is_latin(c)
        kept.append(c)
    return unicodedata.normalize("NFC", "".join(kept))


def _fold_new(token: str) -> str:
    if token.isascii():
        return stem(token)
    if starts_cjk(token):  # a bigram or a lone character: kept as it is (kana keep ゛)
        return token
    plain = _strip_latin_diacritics(token).replace("ς", "σ")  # unicode61 folds final sigma
    if plain.isascii():
        return stem(plain)
    # SQLite's stemmer works on UTF-8 bytes, a non-ASCII byte counting as a consonant
    raw = plain.encode()
    if not 2 < len(raw) <= 64:
        return plain
    try:
        return _porter(raw.decode("latin-1")).encode("latin-1").decode()
    except UnicodeDecodeError:  # a suffix rule split a character (FTS5 would keep the bytes)
        return plain


def _tokens(text: str) -> list[str]:
    """``text`` split as unicode61 splits the store's segmented text, lower-cased, unfolded."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return _TOKEN.findall(segment(text).lower())


def text_terms(text: str) -> list[str]:
    """The index terms of ``text``, in order, repeats kept (their number is its length)."""
    return [_fold(t) for t in _tokens(text)]


def _occurrences(text: str, run: str) -> int:
    """How often ``run`` occurs in ``text``, overlaps included (as FTS5 counts a phrase)."""
    n = 0
    i = text.find(run)
    while i >= 0:
        n += 1
        i = text.find(run, i + 1)
    return n


def _in_sequence(terms: list[str], run: list[str]) -> int:
    """How often ``run`` occurs in ``terms`` at consecutive positions, overlaps included."""
    k = len(run)
    return sum(terms[i : i + k] == run for i in range(len(terms) - k + 1))


class Postings:
    """Which turns (by position) hold each term, and how often; BM25 search over them."""

    def __init__(self) -> None:
        # arrays of 8-byte integers: a list of ints took 36 bytes a posting (130 MB
        # for the 3.2 million postings of the benchmark's 100,000 messages)
        self.postings: dict[str, array[int]] = {}
        self.lengths = array("q")  # each turn's length in terms
        self.total_length = 0
        self._by_first: dict[str, list[str]] = {}  # CJK terms by their first character

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, text: str) -> None:
        """Index the next turn (its position is the number of turns before it)."""
        tokens = _tokens(text)
        position = len(self.lengths) << _TF_BITS
        self.lengths.append(len(tokens))
        self.total_length += len(tokens)
        memo = _FOLDED
        try:
            terms = [memo[t] for t in tokens]  # every token seen before: the usual case
        except KeyError:
            terms = [_fold(t) for t in tokens]
        postings = self.postings
        for term, tf in Counter(terms).items():
            entries = postings.get(term)
            if entries is None:
                entries = postings[term] = array("q")
                if not term.isascii():
                    self._by_first.setdefault(term[0], []).append(term)
            entries.append(position | (tf if tf < _TF_MAX else _TF_MAX))

    def df(self, term: str) -> int:
        """Turns holding ``term`` (an index term: see `text_terms`)."""
        return len(self.postings.get(term, ()))

    def _unit(self, kind: str, text: str, text_of: Callable[[int], str]) -> Sequence[int]:
        """The postings of one query unit (see `query_units`)."""
        if kind == "word":
            return self.postings.get(_fold(text.lower()), [])
        if kind == "gram":  # as FTS5 reads the quoted bigram: "ン・" is the token ン
            tokens = _TOKEN.findall(text)
            return self.postings.get(tokens[0], []) if len(tokens) == 1 else []
        if kind == "prefix":  # every indexed CJK term that starts with the character
            merged: Counter[int] = Counter()
            for term in self._by_first.get(text, ()):
                for code in self.postings[term]:
                    merged[code >> _TF_BITS] += code & _TF_MAX
            return [p << _TF_BITS | min(tf, _TF_MAX) for p, tf in sorted(merged.items())]
        # a phrase: the turns holding its rarest token that hold the whole sequence
        # (its bigrams as FTS5 tokenizes them: "ン・" is the token ン)
        grams = [text[i : i + 2] for i in range(len(text) - 1)]
        tokens = _TOKEN.findall(" ".join(grams))
        if not tokens:
            return []
        rarest = min(tokens, key=lambda t: len(self.postings.get(t, ())))
        # Bigrams of letters follow one another only inside one run of the text,
        # so the run itself is found. A character that is no letter (a katakana
        # middle dot) makes shorter tokens that other text makes too ("の・" and
        # "のの" end in the same の): those are matched as a sequence of terms.
        whole = tokens == grams
        out: list[int] = []
        for code in self.postings.get(rarest, ()):
            turn = text_of(code >> _TF_BITS)
            tf = _occurrences(turn, text) if whole else _in_sequence(text_terms(turn), tokens)
            if tf:
                out.append(code & ~_TF_MAX | min(tf, _TF_MAX))
        return out

    def search(
        self,
        query: str,
        *,
        before: int,
        limit: int,
        budget: int | None = None,
        text_of: Callable[[int], str],
    ) -> dict[int, float]:
        """The ``limit`` best turns among the first ``before`` for ``query``: position → BM25.

        ``budget`` bounds the work: the query's units are taken rarest first (by
        the turns that hold them) while their turn counts add up to at most
        ``budget``; the common rest says least about which turn is meant. Ties go
        to the newer turn. ``text_of`` gives a turn's text (for CJK phrases).
        """
        n_docs = len(self.lengths)
        if n_docs == 0 or before <= 0 or limit <= 0:
            return {}
        lists = [self._unit(kind, text, text_of) for kind, text in query_units(query)]
        if budget is not None:
            lists.sort(key=len)  # stable: the query's order among equals
            kept, spent = 0, 0
            for entries in lists:
                if spent + len(entries) > budget:
                    break
                spent += len(entries)
                kept += 1
            del lists[kept:]
        avg = self.total_length / n_docs
        lengths = self.lengths
        scores: dict[int, float] = {}
        get = scores.get
        cut = before << _TF_BITS
        # bm25's length norm k1 * (1 - b + b * length / avg), as fixed + per * length
        fixed = _K1 * (1.0 - _B)
        per = _K1 * _B / avg if avg else 0.0  # no terms at all: nothing to score
        for entries in lists:
            df = len(entries)
            if not df:
                continue
            idf = math.log((n_docs - df + 0.5) / (df + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            weight = idf * (_K1 + 1.0)
            for code in entries[: bisect.bisect_left(entries, cut)]:
                p = code >> _TF_BITS
                tf = code & _TF_MAX
                scores[p] = get(p, 0.0) + weight * tf / (tf + (fixed + per * lengths[p]))
        if len(scores) <= limit:
            return scores
        # best first, ties to the newer turn: positions newest first, then a stable
        # sort by score (plain numbers, no key tuples)
        order = sorted(scores, reverse=True)
        order.sort(key=scores.__getitem__, reverse=True)
        return {p: scores[p] for p in order[:limit]}
