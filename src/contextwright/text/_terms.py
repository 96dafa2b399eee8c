"""Segmentation and terms in any language: the scripts, the index's segmentation, stop words.

Chinese and Japanese are written without spaces, so a lexical index cannot find
their words by splitting on spaces. Every index here segments the same way,
without a dictionary: a CJK run becomes its overlapping character bigrams
("在上海工作" → "在上 上海 海工 工作"), a run of one character stays itself, and
other text is left to words. `segment` writes text as the SQLite FTS5 indexes
hold it (bigrams plus the run's last character alone, so that a one-character
prefix query matches every position; the rest is left to FTS5's ``unicode61``
tokenizer and Porter stemmer). `terms` gives the same bigrams, lower-cased words
and no stop words for matching in process (the in-memory stores).

Two character classes, on purpose: `SPACELESS` is what the FTS5 indexes split
(Han, kana, 々, half-width katakana; Hangul is space-separated and stays with
``unicode61``), and `terms` also bigrams Hangul, whose particles attach to words
("서울에서"), since a substring match costs nothing in process. Changing either
would change what existing index files hold, so both are kept exact.

Stop words, one list per use, each measured where it is used: `STOP_WORDS` for
the hybrid (memory, knowledge) query terms, with `CJK_STOP_CHARS`; `RECALL_STOP_WORDS`
for recall's query analysis, which also drops the scaffolding of questions ("what
kind of…"); `FOCUS_STOP_WORDS` for a message search (`focus`); `SCAN_STOP_WORDS`,
a short list, for the in-memory scan. Merging them would move measured scores.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = [
    "ASCII_TERM", "CJK_RUN", "CJK_STOP_CHARS", "FOCUS_STOP_WORDS", "HANGUL", "INDEX_WORD", "RECALL_STOP_WORDS", "SCAN_STOP_WORDS", "SPACELESS", "STOP_WORDS", "TOKEN",
    "WORD", "bigrams", "cached_terms", "focus", "segment", "split_run", "terms",
]  # fmt: skip

# Han (with extension A and compatibility ideographs) and kana: the core of both classes.
_HAN_KANA = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HANGUL = "\uac00-\ud7af"
# ... plus 々 and the half-width katakana block: what the FTS5 indexes split into bigrams.
SPACELESS = "\u3005" + _HAN_KANA + "\uff66-\uff9f"
CJK_RUN = re.compile(f"[{SPACELESS}]+")
# A query term: a CJK run, or a run of other letters and digits (as unicode61 sees
# tokens: underscore and punctuation separate).
TOKEN = re.compile(f"(?P<cjk>[{SPACELESS}]+)|(?P<word>(?:(?![{SPACELESS}])[^\\W_])+)")
ASCII_TERM = re.compile(r"[A-Za-z0-9]+")  # `TOKEN`'s word in ASCII text
# A word for in-process matching: letters, or digits (never both: "v2" is "v", "2").
WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)
# A word as FTS5's unicode61 tokenizer sees it: letters and digits together.
INDEX_WORD = re.compile(r"[^\W_]+")
_SCAN_CJK = re.compile(f"[{_HAN_KANA}{HANGUL}]+")

# Function words that say nothing about what a memory or passage is about.
STOP_WORDS = frozenset(
    ["a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "myself", "no", "not", "now", "of", "on", "or", "our", "ours", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "to", "too", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "tell", "know", "remember", "said", "say", "much", "many", "please"]
)  # fmt: skip

# Chinese function characters: a bigram holding one ("通的", "是什", "我还") is almost
# always an artefact of cutting a sentence into pairs, not a word.
CJK_STOP_CHARS = frozenset("的了吗呢吧啊么什怎哪我你他她它们这那些还就很都也是")

# Function words and the scaffolding of questions ("what kind of…", "how many…"):
# questions are full of them, and with BM25 over OR-ed terms each one still adds
# to the score of every turn that has it.
RECALL_STOP_WORDS = frozenset(["a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "might", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "us", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "would", "you", "your", "yours", "yourself", "s", "t", "don", "didn", "doesn", "isn", "wasn", "weren", "won", "ll", "re", "ve", "d", "m", "kind", "type", "types", "sort", "thing", "things", "something", "anything", "ever", "recently", "many", "much", "lot"])  # fmt: skip

# English function words a message search drops before asking the index (`focus`).
FOCUS_STOP_WORDS = frozenset(["a", "an", "and", "are", "as", "at", "be", "been", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your"])  # fmt: skip
_ASCII_WORD = re.compile(r"[A-Za-z]+")

SCAN_STOP_WORDS = frozenset(["a", "an", "and", "are", "as", "at", "be", "by", "do", "did", "for", "from", "has", "have", "i", "in", "is", "it", "me", "my", "of", "on", "or", "so", "that", "the", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you", "your"])  # fmt: skip


def bigrams(run: str) -> list[str]:
    """The overlapping character pairs of ``run`` (none for one character)."""
    return [run[i : i + 2] for i in range(len(run) - 1)]


def split_run(match: re.Match[str]) -> str:
    """A matched CJK run as the index holds it: its bigrams, then its last character alone."""
    run = match.group(0)
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(bigrams(run)) + f" {run[-1]} "


def segment(text: str) -> str:
    """``text`` as the FTS5 indexes store it: CJK runs split into bigrams, the rest unchanged.

    ASCII text (all of most tool output and English) cannot hold a CJK run: the
    check is a C scan at memory speed, where the regex walked every character
    (85 ms of a 10,000-message import holding 7.5 MB of text).
    """
    if text.isascii():
        return text
    return CJK_RUN.sub(split_run, text)


def focus(query: str) -> str:
    """``query`` without English function words (`FOCUS_STOP_WORDS`; CJK and other text untouched)."""
    return _ASCII_WORD.sub(
        lambda m: "" if m.group(0).lower() in FOCUS_STOP_WORDS else m.group(0), query
    )


def terms(text: str) -> list[str]:
    """Terms of ``text`` for in-process matching: CJK (and Hangul) bigrams, then
    lower-cased words, `SCAN_STOP_WORDS` removed.

    Memoised: the in-memory stores score every item on every search, and the items
    do not change between searches (it halved those sources' share of a build).
    """
    return list(cached_terms(text))


@lru_cache(maxsize=8192)
def cached_terms(text: str) -> tuple[str, ...]:
    """`terms` as a shared tuple (read-only)."""
    out: list[str] = []
    for run in _SCAN_CJK.findall(text):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(bigrams(run))
    rest = _SCAN_CJK.sub(" ", text).lower()
    out.extend(w for w in WORD.findall(rest) if w not in SCAN_STOP_WORDS)
    return tuple(out)
