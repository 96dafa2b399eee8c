"""What a message asks of recall: search words, the speakers it names, the dates it names.

`analyse` splits a message into the words for full-text search and two priors
for ranking (``_rank.py``):

- Stop words go (English; CJK text is left to the index's bigrams): questions
  are full of function words and question scaffolding ("what kind of…"), and
  with BM25 over OR-ed terms each one still adds to every turn that has it.
- Words naming a *speaker* of the conversation go too: in a dialogue a name
  mostly appears as a vocative addressed to the *other* person ("Thanks,
  Mel!"), so matching it as text favours the wrong speaker; it becomes a speaker
  prior instead (`speaker_map` gives the names as `analyse` takes them).
- Month names and years become a date prior (`date_matches`).
- Words asking about the present ("now", "currently", "latest"; 现在, 目前,
  最近, 如今) set ``present``, for the recency prior (``recency_boost``): of
  facts that change, the latest statement answers "where does she live now?".

Chinese is written without spaces, so a CJK run is one "word" to the pattern
above, and everything in it went to the index whole: the scaffolding of a
question ("叫什么名字", "是什么时候") then matched small talk ("什么正事都没干")
better than the evidence did, and a speaker named inside a run never became a
speaker prior. In a CJK run, then, speakers' names are cut out as in English,
and so are question words (`CJK_QUESTION_WORDS`); what is left of two
characters or more is searched (a lone character would be a prefix query
matching every bigram it starts). Function characters stay: Chinese has many
one-character nouns, and "的猫" is the only bigram that "李明的猫叫什么名字"
shares with "我领养了一只橘色的猫"; splitting at them as well lost such matches
(adversarial recall on the generated Chinese set fell from 1.0 to 0.3).

Measured on the generated Chinese set (``contextwright eval zh``: 5
conversations, 150 questions, 220 evidence turns), recall at 1,000 / 2,000 /
4,000 / 8,000 tokens with ``--seed=0`` (and ``--seed=1``): the run searched
whole 0.63 / 0.67 / 0.80 / 0.98 (0.61 / 0.67 / 0.77 / 0.97); with this
analysis 0.66 / 0.77 / 0.97 / 0.99 (0.66 / 0.76 / 0.95 / 1.00), most of it the
speaker prior (without it 0.65 / 0.67 / 0.80 / 0.98); with the recency prior
0.67 / 0.79 / 0.96 / 0.99 (0.66 / 0.79 / 0.95 / 1.00). LoCoMo, which is
English, does not change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..text._terms import CJK_RUN, RECALL_STOP_WORDS, WORD

__all__ = [
    "CJK_QUESTION_WORDS", "MONTH_NAMES", "PRESENT_WORDS", "STOP_WORDS", "QueryAnalysis",
    "add_speaker", "analyse", "date_matches", "speaker_map",
]  # fmt: skip

# Function words that carry no topic, and the scaffolding of questions ("what
# kind of…", "how many…"). Questions are full of them, and with BM25 over OR-ed
# terms each one still adds to the score of every turn that has it.
STOP_WORDS = RECALL_STOP_WORDS
_WORD = WORD
# English month names, whatever the process locale (`calendar.month_name` follows LC_TIME)
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")  # fmt: skip
_MONTHS = {name.lower(): i for i, name in enumerate(MONTH_NAMES, 1)}
_YEAR = re.compile(r"\b(1[89]\d\d|2[01]\d\d)\b")
# Words that ask about the present state of something (``QueryAnalysis.present``);
# the English ones are stop words too, the Chinese ones stay searched ("我最近改成…").
PRESENT_WORDS = frozenset(["now", "currently", "current", "latest", "nowadays"])
_CJK_PRESENT = ("现在", "目前", "最近", "如今")
# Chinese question scaffolding ("what", "which", "where", "when", "how many", "might",
# "thing"), cut out of a CJK run before it is searched; longer first, so "是什么" goes whole.
CJK_QUESTION_WORDS = ("为什么", "是什么", "叫什么", "什么", "怎么样", "怎么", "怎样", "哪里", "哪儿",
                      "哪个", "哪些", "哪种", "哪家", "哪", "是不是", "会不会", "能不能", "有没有",
                      "是否", "时候", "多少", "多久", "几个", "几次", "可能", "东西", "吗", "呢", "吧")  # fmt: skip
_CJK_CUT = re.compile("|".join(sorted(CJK_QUESTION_WORDS, key=len, reverse=True)))


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """What a message asks for, as ranking uses it."""

    text: str  # the words for full-text search (stop words and speaker names removed)
    semantic: str = ""  # the message without speaker names, for an embedder
    speakers: frozenset[str] = frozenset()  # speaker labels the message names
    months: frozenset[int] = frozenset()
    years: frozenset[int] = frozenset()
    present: bool = False  # asks about the present ("now", 现在): the recency prior applies
    query: str = ""  # the message as given (turn notes read its dates and possessives)


def analyse(query: str, speakers: Mapping[str, str] | None = None) -> QueryAnalysis:
    """Split ``query`` into search words, named speakers and named dates.

    ``speakers`` maps a lower-cased name (or first name) to its speaker label; a
    name counts when capitalised, as a month counts when its full name is, or
    "may" would be a month in every question that asks what someone may do. Punctuation and anything the
    word pattern does not take are left for the index's tokenizer. If no
    word would be left to search, the stop words stay.
    """
    speakers = speakers or {}
    words: list[str] = []
    cuts: list[tuple[int, int]] = []  # the speaker names, left out of ``semantic``
    named: set[str] = set()
    months: set[int] = set()
    present = False
    cjk_names = sorted(
        (n for n in speakers if len(n) > 1 and CJK_RUN.search(n)), key=len, reverse=True
    )
    skip = 0  # the end of a possessive "'s" after a name
    for m in _WORD.finditer(query):
        if skip and m.start() < skip:  # the "s" of a possessive already cut
            continue
        word = m.group(0)
        low = word.lower()
        if not word.isascii() and CJK_RUN.search(word):
            present = present or any(p in word for p in _CJK_PRESENT)
            words += _cjk_words(word, m.start(), speakers, cjk_names, named, cuts)
            continue
        present = present or low in PRESENT_WORDS
        # a capital (or a script without case) tells "Will" the speaker from "will"
        if low in speakers and not word[0].islower():
            named.add(speakers[low])
            end = m.end()
            if query.startswith(("'s", "’s"), end):
                end += 2
            cuts.append((m.start(), end))
            skip = end
            continue
        month = _MONTHS.get(low)
        if month is not None and word[0].isupper():
            months.add(month)
        if low not in STOP_WORDS:
            words.append(word)
    if not words:
        # "What did she say?": better to search the function words than nothing
        words = [w for w in _WORD.findall(query) if w.lower() not in speakers]
    years = {int(y) for y in _YEAR.findall(query)}
    kept = query
    if cuts:  # the query without speaker names, for an embedder
        pieces, last = [], 0
        for start, end in cuts:
            pieces.append(query[last:start])
            last = end
        pieces.append(query[last:])
        kept = "".join(pieces)
    semantic = " ".join(kept.split())
    return QueryAnalysis(
        " ".join(words),
        semantic,
        frozenset(named),
        frozenset(months),
        frozenset(years),
        present,
        query,
    )


def _cjk_words(
    word: str, at: int, speakers: Mapping[str, str], names: list[str], named: set[str],
    cuts: list[tuple[int, int]],
) -> list[str]:  # fmt: skip
    """The search words of a run holding CJK text at ``at`` in the query (see the module docstring).

    Speakers' names found in it go to ``named`` and ``cuts``; the rest is split
    at question words, and pieces of one character are dropped.
    """
    for name in names:  # CJK names: lower-casing changes nothing in them
        start = word.find(name)
        while start >= 0:
            named.add(speakers[name])
            cuts.append((at + start, at + start + len(name)))
            word = word[:start] + " " * len(name) + word[start + len(name) :]
            start = word.find(name)
    cuts.sort()
    return [piece for piece in _CJK_CUT.sub(" ", word).split() if len(piece) > 1]


def add_speaker(speakers: dict[str, str], name: str) -> None:
    """Add ``name`` to ``speakers`` (see `speaker_map`) unless it or its first word is there."""
    speakers.setdefault(name.lower(), name)
    words = name.split()
    if words and words[0].lower() != name.lower():
        speakers.setdefault(words[0].lower(), name)


def speaker_map(names: Iterable[str]) -> dict[str, str]:
    """Speaker names as `analyse` takes them: the lower-cased name, and its first word, → name."""
    speakers: dict[str, str] = {}
    for name in names:
        if name:
            add_speaker(speakers, name)
    return speakers


def date_matches(month: tuple[int, int], analysis: QueryAnalysis) -> bool:
    """Whether a turn's (year, month) is a named month and year, or the month after it.

    Events are talked about after they happen: a trip "in June" comes up in June
    or in early July.
    """
    year, mon = month
    if not year:
        return False
    before = (year - 1, 12) if mon == 1 else (year, mon - 1)
    for y, m in ((year, mon), before):
        if (not analysis.months or m in analysis.months) and (
            not analysis.years or y in analysis.years
        ):
            return True
    return False
