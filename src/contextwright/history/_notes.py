"""Turn notes: dates and entities read from each turn, pointing back to it, as recall evidence.

A question often names what a turn says in other words: "What did Nate do in
April 2022?" asks for a turn dated 15 April that says "I dyed my hair last
week"; "What martial arts has John done?" for "I'm doing kickboxing". A note is
a term extracted from one turn when the index reads it, kept with the index
(`TurnIndex.notes`) and pointing to that turn (its position); the turn's text
is never changed, and notes are never rendered: they are evidence only. No
model is asked; each extraction is a few regular expressions and a small word
list. The terms:

- **dates** (``d:2023-05-07``, ``m:2023-05``, ``mo:5``, ``y:2023``): the day
  the turn was said (the session's date, as a session header gives it), and
  each relative expression in it ("yesterday", "last Friday", "two days ago",
  "last week", "next month", "last year") resolved against that day into the
  day, month or year it means;
- **kinds** (``k:country``, ``k:martial``): the kind of a word the turn holds,
  from a short list (`KINDS`): a country is a country (and a European one
  European), kickboxing a martial art, a sister family;
- **relations** (``r:maria:aunt``, ``r:maria:family``): "my aunt" said by
  Maria, so "Maria's aunt" (or "Maria's family") finds it.

A question is read into the same terms (`note_terms`): its dates written out
("on 21 May, 2023", "October 6, 2022", "in April 2022"), its words, and "X's Y"
for a speaker X. `NoteIndex.scores` sums, per turn, the idf of the terms it
shares with the question; `TurnRanker.rank` fuses their ranks by RRF under
``note_weight`` (0: off).
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping

from ._query import MONTH_NAMES

__all__ = ["KINDS", "NoteIndex", "note_terms", "turn_notes"]

_MONTH = {name.lower(): i for i, name in enumerate(MONTH_NAMES, 1)}
_MONTH.update({name[:3].lower(): i for i, name in enumerate(MONTH_NAMES, 1)})
_WEEKDAY = {d.lower(): i for i, d in enumerate(calendar.day_name)}  # Monday = 0
_NUMBER = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a few": 3,
           "few": 3, "couple of": 2, "a couple of": 2}  # fmt: skip
_DAY = 86400

_RELATIVE = re.compile(
    r"\b(?:(yesterday|today|tonight|tomorrow|last night)"
    r"|(last|this past|past|next|this coming) (week|weekend|month|year|" + "|".join(_WEEKDAY) + r")"
    r"|(a|one|two|three|four|five|six|a few|few|a couple of|couple of|\d{1,3}) "
    r"(day|week|month|year)s? (ago|later|from now))\b",
)
_MONTHS_RE = "|".join(sorted(_MONTH, key=len, reverse=True))
# "21 May, 2023", "8th December 2023", "October 6, 2022", "May 2023", "in May"
_DAY_FIRST = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTHS_RE})\.?,?\s*(\d{{4}})?", re.IGNORECASE
)
_MONTH_FIRST = re.compile(
    rf"\b({_MONTHS_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s*(\d{{4}}))?", re.IGNORECASE
)
_MONTH_YEAR = re.compile(rf"\b({_MONTHS_RE})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
_WORD = re.compile(r"[a-z]+(?:-[a-z]+)?")
_MY = re.compile(r"\b(?:my|our)\s+(\w+)(?:\s+(\w+))?")  # "my (older) sister"
_POSSESSIVE = re.compile(r"\b([A-Z]\w+)['’]s\s+(\w+)")

_FAMILY = ("mom mother mum dad father parents sister sisters brother brothers son sons daughter "
           "daughters kid kids children child husband wife aunt uncle grandma grandmother "
           "grandpa grandfather grandparents cousin cousins niece nephew fam family partner")  # fmt: skip
_EUROPE = ("france spain italy germany england scotland ireland uk britain portugal greece "
           "netherlands sweden norway denmark finland iceland switzerland austria poland "
           "czech hungary croatia belgium paris london rome berlin madrid barcelona amsterdam")  # fmt: skip
_ELSEWHERE = ("canada mexico usa america japan china korea india thailand vietnam brazil peru "
              "argentina chile australia zealand egypt morocco kenya turkey russia")  # fmt: skip
_STATES = ("california texas florida york washington oregon alaska hawaii colorado arizona "
           "nevada utah montana carolina tennessee georgia virginia ohio michigan illinois "
           "massachusetts maine vermont minnesota wisconsin louisiana")  # fmt: skip
# A word of a turn -> the kinds it is of (each a note word the question may use).
KINDS: dict[str, tuple[str, ...]] = {}
for _group, _kinds in (
    (_FAMILY, ("family",)),
    ("son sons daughter daughters kid kids child", ("children", "kids", "child")),
    (_EUROPE, ("country", "countries", "europe", "european")),
    (_ELSEWHERE, ("country", "countries")),
    (_STATES, ("state", "states")),
    (
        "kickboxing taekwondo karate judo boxing jiu-jitsu aikido kung-fu mma wrestling",
        ("martial", "arts", "sport", "sports"),
    ),
    (
        "basketball soccer football tennis baseball volleyball hockey golf swimming surfing "
        "skiing snowboarding running cycling climbing yoga hiking marathon",
        ("sport", "sports", "activity", "activities"),
    ),
    (
        "piano guitar violin drums ukulele flute saxophone cello trumpet keyboard",
        ("instrument", "instruments", "music"),
    ),
    (
        "dog dogs puppy cat cats kitten turtle turtles hamster parrot rabbit bunny fish horse",
        ("pet", "pets", "animal", "animals"),
    ),
    (
        "painting pottery drawing sculpting knitting photography writing poetry baking",
        ("art", "hobby", "hobbies", "creative"),
    ),
):
    for _w in _group.split():
        KINDS[_w] = tuple(dict.fromkeys(KINDS.get(_w, ()) + _kinds))
_RELATIONS = frozenset(_FAMILY.split()) | {"friend", "friends", "boss", "mentor", "neighbor",
                                            "coworker", "colleague", "boyfriend", "girlfriend"}  # fmt: skip


def _dates(day: int) -> list[str]:
    """The date terms of a day (days since the epoch): its day, month and month-of-year."""
    t = time.gmtime(day * _DAY)
    return [f"d:{t.tm_year}-{t.tm_mon}-{t.tm_mday}", *_month(t.tm_year, t.tm_mon)]


def _month(year: int, month: int) -> list[str]:
    return [f"m:{year}-{month}", f"mo:{month}", f"y:{year}"]


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    k = year * 12 + month - 1 + by
    return k // 12, k % 12 + 1


# a word every relative expression holds: most turns have none, and skip the pattern
_TRIGGERS = frozenset(("yesterday", "today", "tonight", "tomorrow", "last", "past", "next",
                       "coming", "ago", "later", "now"))  # fmt: skip


def resolve(text: str, created_at: float, words: Iterable[str] | None = None) -> list[str]:
    """Date terms of the relative expressions in ``text`` said on ``created_at`` (UTC).

    ``words`` are the lower-cased words of ``text`` when the caller has them.
    """
    low = text.lower()
    if _TRIGGERS.isdisjoint(_WORD.findall(low) if words is None else words):
        return []
    day = int(created_at // _DAY)
    t = time.gmtime(created_at)
    out: list[str] = []
    for m in _RELATIVE.finditer(low):
        one, when, unit, count, unit2, way = m.groups()
        if one:
            out += _dates(day + {"yesterday": -1, "tomorrow": 1, "last night": -1}.get(one, 0))
        elif when:
            sign = 1 if when in ("next", "this coming") else -1
            if unit in _WEEKDAY:
                gap = (t.tm_wday - _WEEKDAY[unit]) % 7 or 7
                out += _dates(
                    day - gap if sign < 0 else day + ((_WEEKDAY[unit] - t.tm_wday) % 7 or 7)
                )
            elif unit in ("week", "weekend"):
                out += _dates(day + 7 * sign)[1:]  # a week away: its month, not a day
            elif unit == "month":
                out += _month(*_shift_month(t.tm_year, t.tm_mon, sign))
            else:
                out.append(f"y:{t.tm_year + sign}")
        elif count and unit2:
            n = int(count) if count.isdigit() else _NUMBER.get(count, 1)
            sign = -1 if way == "ago" else 1
            if unit2 == "day":
                out += _dates(day + sign * n)
            elif unit2 == "week":
                out += _dates(day + sign * 7 * n)[1:]
            elif unit2 == "month":
                out += _month(*_shift_month(t.tm_year, t.tm_mon, sign * n))
            else:
                out.append(f"y:{t.tm_year + sign * n}")
    return out


def turn_notes(text: str, created_at: float | None, speaker: str) -> set[str]:
    """The note terms of one turn (see the module docstring); its text is only read."""
    out: set[str] = set()
    low = text.lower()
    words = set(_WORD.findall(low))
    if created_at is not None:
        out.add(_dates(int(created_at // _DAY))[0])  # the session's day, as its header says
        out.update(resolve(text, created_at, words))
    for w in words:
        kinds = KINDS.get(w)
        if kinds:
            out.update("k:" + k for k in kinds)
    who = speaker.split()[0].lower() if speaker.strip() else ""
    if who:
        for m in _MY.finditer(low):
            rel = m.group(1) if m.group(1) in _RELATIONS else m.group(2)
            if rel in _RELATIONS:
                out.add(f"r:{who}:{rel}")
                if rel in KINDS:
                    out.update(f"r:{who}:{k}" for k in KINDS[rel])
    return out


def note_terms(query: str, speakers: Mapping[str, str]) -> set[str]:
    """The note terms a question asks for: its dates, its words, its speakers' relations."""
    out: set[str] = set()
    taken: list[tuple[int, int]] = []
    for m in _DAY_FIRST.finditer(query):
        out.update(_ask_day(int(m.group(1)), m.group(2), m.group(3)))
        taken.append(m.span())
    for m in _MONTH_FIRST.finditer(query):
        if not any(a <= m.start() < b for a, b in taken):
            out.update(_ask_day(int(m.group(2)), m.group(1), m.group(3)))
            taken.append(m.span())
    for m in _MONTH_YEAR.finditer(query):
        if not any(a <= m.start() < b for a, b in taken) and m.group(1)[0].isupper():
            out.add(f"m:{m.group(2)}-{_MONTH[m.group(1).lower()]}")
            taken.append(m.span())
    for m in _YEAR.finditer(query):
        if not any(a <= m.start() < b for a, b in taken):
            out.add(f"y:{m.group(1)}")
    for m in _POSSESSIVE.finditer(query):
        label = speakers.get(m.group(1).lower())
        if label:
            out.add(f"r:{label.split()[0].lower()}:{m.group(2).lower()}")
    # a speaker's name is the speaker prior's: as a note word it would find the
    # turns that address that speaker, mostly said by the other one
    out.update("k:" + w for w in _WORD.findall(query.lower()) if w not in speakers)
    return out


def _ask_day(day: int, month: str, year: str | None) -> list[str]:
    mon = _MONTH.get(month.lower())
    if mon is None or not 1 <= day <= 31:
        return []
    if year is None:
        return [f"mo:{mon}"]
    return [f"d:{int(year)}-{mon}-{day}", f"m:{int(year)}-{mon}"]


class NoteIndex:
    """Each note term's turn positions (ascending), built as turns are added."""

    def __init__(self) -> None:
        self.postings: defaultdict[str, list[int]] = defaultdict(list)
        self.size = 0

    def add(self, notes: Iterable[str]) -> None:
        """The notes of the next turn (position ``size``)."""
        p = self.size
        for term in notes:
            self.postings[term].append(p)
        self.size += 1

    def scores(self, terms: Iterable[str], n: int, stop: frozenset[str]) -> dict[int, float]:
        """Position (below ``n``) -> summed idf of the question's ``terms`` its notes hold.

        Word terms in ``stop`` (stop words) count for nothing; a term held by
        more than a quarter of the turns says little and is skipped.
        """
        out: dict[int, float] = {}
        size = max(1, self.size)
        get = self.postings.get
        for term in terms:
            if term[1] == ":" and term[2:] in stop:
                continue
            held = get(term)
            if not held or len(held) * 4 > size:
                continue
            idf = math.log(size / len(held))
            for p in held:
                if p >= n:
                    break
                out[p] = out.get(p, 0.0) + idf
        return out
