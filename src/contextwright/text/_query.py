"""How a query becomes search terms and FTS5 expressions (pure strings: no connection here).

A query is scanned once, by `TOKEN`: CJK runs and runs of other letters and
digits. Two readings of that scan:

- **Message search** (`message_units`, the conversations' index): every term is
  kept, in order. A CJK run of two or more characters becomes the phrase of its
  bigrams (an exact substring match) OR-ed with each bigram (partial matches still
  rank); a single CJK character becomes the prefix query ``"上"*``, which matches
  the bigrams it starts and the lone last character of a run, i.e. every
  position; any other word becomes a quoted term. Joined with OR and ranked by
  BM25, a message matching more and rarer terms ranks higher.
- **Hybrid search** (`query_units`, memories and knowledge): the content terms,
  each a `Unit` that coverage looks for in a text and FTS5 finds: words stemmed
  crudely for coverage (`STOP_WORDS` dropped), CJK bigrams (those holding a
  function character dropped), a lone CJK character as a prefix query.

Every term is double-quoted (with ``"`` doubled) and built only from letters and
digits, so no FTS5 syntax from the user survives: ``"foo OR`` or ``NEAR(`` are
searched as words, never parsed. A pasted essay is not a query: repeats are
dropped, and all terms after the first 64 (32 for hybrid search).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._terms import ASCII_TERM, CJK_STOP_CHARS, STOP_WORDS, TOKEN, bigrams

__all__ = [
    "Unit", "any_of", "match_query", "message_units", "query_units", "quote", "unit_expressions",
]  # fmt: skip

_MAX_TERMS = 64  # see `message_units`


def quote(term: str) -> str:
    """``term`` as one FTS5 string (``"`` doubled inside)."""
    return '"' + term.replace('"', '""') + '"'


# -- message search -----------------------------------------------------------------------


def message_units(query: str) -> list[tuple[str, str]]:
    """The terms of ``query`` as the message index is searched, in order, each as ``(kind, text)``.

    Kinds (see the module docstring): ``"word"`` (any non-CJK run of letters and
    digits), ``"prefix"`` (a lone CJK character), ``"phrase"`` (a CJK run of three
    or more characters: its bigrams in a row) and ``"gram"`` (one bigram of a run).
    Repeats are dropped, and all after the first 64. `match_query` and
    `unit_expressions` write them as FTS5.
    """
    if query.isascii():  # no CJK run: only words (a C scan, then one findall)
        words = dict.fromkeys(ASCII_TERM.findall(query))
        return [("word", w) for w in itertools.islice(words, _MAX_TERMS)]
    units: list[tuple[str, str]] = []
    for m in TOKEN.finditer(query):
        cjk = m.group("cjk")
        if cjk is None:
            units.append(("word", m.group("word")))
        elif len(cjk) == 1:
            units.append(("prefix", cjk))
        else:
            grams = bigrams(cjk)
            if len(grams) > 1:
                units.append(("phrase", cjk))
            units.extend(("gram", g) for g in grams)
    return list(dict.fromkeys(units))[:_MAX_TERMS]


def unit_expressions(query: str) -> list[str]:
    """Each term of ``query`` (`message_units`) as its own FTS5 expression, in order."""
    terms: list[str] = []
    for kind, text in message_units(query):
        if kind == "prefix":
            terms.append(quote(text) + "*")
        elif kind == "phrase":
            terms.append(quote(" ".join(bigrams(text))))
        else:
            terms.append(quote(text))
    return terms


def any_of(expressions: Iterable[str]) -> str | None:
    """The FTS5 expression matching any of ``expressions`` in column ``body`` (None if none)."""
    terms = list(expressions)
    return "body : (" + " OR ".join(terms) + ")" if terms else None


def match_query(query: str) -> str | None:
    """The FTS5 expression for ``query`` on column ``body``, or None if it has no terms."""
    return any_of(unit_expressions(query))


# -- hybrid search ------------------------------------------------------------------------


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
    return Unit(root, quote(word), pattern=re.compile(rf"(?<!\w){re.escape(root)}{tail}(?!\w)"))


def query_units(query: str, limit: int = 32) -> list[Unit]:
    """The content terms of ``query`` for hybrid search: words and CJK bigrams (a lone
    CJK character as a prefix query), stop words and bigrams of function characters
    dropped unless nothing else is left, without repeats, at most ``limit``."""
    units: list[tuple[Unit, bool]] = []
    for m in TOKEN.finditer(query):
        run = m.group("cjk")
        if run is None:
            word = m.group("word").casefold()
            units.append((_word_unit(word), word in STOP_WORDS))
        elif len(run) == 1:
            units.append((Unit(run, quote(run) + "*", cjk=True), run in CJK_STOP_CHARS))
        else:
            for pair in bigrams(run):
                stop = pair[0] in CJK_STOP_CHARS or pair[1] in CJK_STOP_CHARS
                units.append((Unit(pair, quote(pair), cjk=True), stop))
    kept = [u for u, stop in units if not stop] or [u for u, _ in units]
    unique: dict[str, Unit] = {}
    for u in kept:
        unique.setdefault(u.term, u)
    return list(unique.values())[:limit]
