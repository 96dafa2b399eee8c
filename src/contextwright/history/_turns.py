"""The turns recall ranks: `TurnIndex`, a conversation's user and assistant turns in order.

A `TurnIndex` holds either all of a conversation's turns (the recall
configurations that rank every turn: ``fill``, vectors) or only the store's
full-text hits and their surroundings (the default: built anew for each
message). Ranking needs little of each turn: its position, its sequence number
and its session (neighbour evidence stays within a session). Those are kept in
plain lists as the turns are added; the `IndexedTurn` itself (speaker, text,
date heading, cached line costs) is made only when asked for (`TurnIndex.turn`):
of the two hundred turns around a default recall's hits, packing looks at a
handful.
"""

from __future__ import annotations

import bisect
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ..model._messages import Message
from ..stores import MessageOutline
from ..text._terms import CJK_RUN, CJK_STOP_CHARS, bigrams
from ._notes import NoteIndex, turn_notes
from ._query import MONTH_NAMES, add_speaker

__all__ = ["FEEDBACK_WORD", "IndexedTurn", "TurnIndex", "day_label", "feedback_terms"]

FEEDBACK_WORD = re.compile(r"[a-z]{4,}")  # the Latin-script words pseudo-relevance feedback counts


def feedback_terms(text: str) -> set[str]:
    """The terms of ``text`` that pseudo-relevance feedback counts (`TurnRanker.feedback_query`).

    Latin-script words of four letters or more, lower-cased; and the character
    bigrams of each CJK run, the very units the full-text indexes hold for CJK
    (``text/_terms.py`` `segment`), so that a feedback query of them, joined by
    spaces, searches each as one term on every backend. Bigrams holding a
    function character ("的", "了", "是"…, `CJK_STOP_CHARS`) are left out: cut
    from a sentence into pairs, they are artefacts, not words. ASCII text has no
    CJK run, and is not scanned for one.
    """
    low = text.lower()
    out = set(FEEDBACK_WORD.findall(low))
    if not low.isascii():
        stop = CJK_STOP_CHARS
        for run in CJK_RUN.findall(low):
            out.update(g for g in bigrams(run) if g[0] not in stop and g[1] not in stop)
    return out


_TURN_ROLES = frozenset(("user", "assistant"))


@dataclass(slots=True)
class IndexedTurn:
    """One user or assistant turn as recall ranks and renders it."""

    seq: int
    role: str
    speaker: str  # the message's name, else its role
    created_at: float | None
    text: str
    session: int
    day: str = ""  # date heading (`day_label`), fixed at indexing
    month: tuple[int, int] = (0, 0)  # (year, month) of ``created_at``, UTC
    costs: dict[str, int] = field(default_factory=dict)  # rendered line cost by counter name


class TurnIndex:
    """The user and assistant turns of one conversation, in sequence order.

    Built from the store once and then extended with what is new; a silence of
    more than ``session_gap`` seconds starts a new session (neighbour evidence
    does not cross sessions). Each turn's date heading is written in ``locale``.
    ``vectors`` holds one row per turn once embedded. With ``gaps`` the index may
    be given stretches of the conversation with messages missing between them
    (the store's hits and their surroundings): a gap in sequence numbers starts a
    new session too, so that no neighbour evidence crosses it.

    ``seqs``, ``sessions`` and ``positions`` describe every turn; `turn` makes
    one turn's `IndexedTurn` when first asked, ``turns`` all of them.
    """

    def __init__(
        self, session_gap: float = 3600.0, locale: str = "en", *, gaps: bool = False
    ) -> None:
        self.session_gap = session_gap
        self.locale = locale
        self.gaps = gaps
        self.seqs: list[int] = []
        self.positions: dict[int, int] = {}  # seq -> its index in ``turns`` (and ``seqs``)
        self.sessions: list[int] = []  # each turn's session, as ``turns[i].session``
        self.last_seq = 0
        self.speakers: dict[str, str] = {}
        self.vectors: Any = None  # numpy float32 (n_embedded, d), rows L2-normalised
        self.embedded_by: str | None = None
        self.pooling: Any = None  # token counts for weighted pooling (`_sif.SifPool`), if used
        self._turns: list[IndexedTurn | None] = []  # None: not made yet (see `turn`)
        self._sources: list[Message | MessageOutline | None] = []  # what a turn is made from
        self._unmade = 0
        self._df: Counter[str] = Counter()  # see `df`
        self._df_turns = 0  # how many turns ``_df`` has counted
        self._words: list[frozenset[str]] = []  # see `postings`
        self._postings: defaultdict[str, list[int]] = defaultdict(list)
        self._notes: NoteIndex | None = None  # see `notes`
        self._session = 0
        self._last_at: float | None = None  # the newest turn's time
        self._named: set[str] = set()

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def turns(self) -> list[IndexedTurn]:
        """Every turn, in sequence order (made now if not made yet)."""
        if self._unmade:
            for p, t in enumerate(self._turns):
                if t is None:
                    self._make(p)
        return cast("list[IndexedTurn]", self._turns)

    def turn(self, position: int) -> IndexedTurn:
        """The turn at ``position`` (made when first asked for)."""
        t = self._turns[position]
        return self._make(position) if t is None else t

    def _make(self, p: int) -> IndexedTurn:
        m = cast("Message | MessageOutline", self._sources[p])
        at = m.created_at
        day, month = ("", (0, 0)) if at is None else _day(at, self.locale)
        t = IndexedTurn(
            m.seq or 0, m.role, m.name or m.role, at, m.text, self.sessions[p], day, month
        )
        self._turns[p] = t
        self._sources[p] = None
        self._unmade -= 1
        return t

    @property
    def df(self) -> Counter[str]:
        """Turns containing each feedback term (`feedback_terms`: words and CJK bigrams).

        Counted when first asked for, then kept up to date: only the feedback
        search uses it, and the stateful default has none, so its turns never pay.
        """
        if self._df_turns < len(self):
            update = self._df.update
            for t in self.turns[self._df_turns :]:
                update(feedback_terms(t.text))
            self._df_turns = len(self)
        return self._df

    @property
    def postings(self) -> defaultdict[str, list[int]]:
        """Each feedback term's turn positions, ascending (the entity links' index).

        Built when first asked for and then kept up to date, apart from `df`: only
        the entity links (``_links.py``) read it, so no other configuration pays.
        """
        if len(self._words) < len(self):
            keep, postings = self._words.append, self._postings
            for p in range(len(self._words), len(self)):
                words = frozenset(feedback_terms(self.turn(p).text))
                keep(words)
                for w in words:
                    postings[w].append(p)
        return self._postings

    @property
    def notes(self) -> NoteIndex:
        """Each turn's notes (``_notes.py``: dates and entities read from it), kept up to date.

        Made when first asked for, as `postings` is: only a ranking with
        ``note_weight`` reads them, so no other configuration pays.
        """
        notes = self._notes
        if notes is None:
            notes = self._notes = NoteIndex()
        for p in range(notes.size, len(self)):
            t = self.turn(p)
            notes.add(turn_notes(t.text, t.created_at, t.speaker))
        return notes

    @property
    def words(self) -> list[frozenset[str]]:
        """Each turn's feedback terms (as `df` counts them), kept with `postings`."""
        _ = self.postings
        return self._words

    def add(self, messages: Iterable[Message | MessageOutline]) -> int:
        """Append stored messages (or their outlines) newer than any seen; returns the turns added."""
        added = 0
        gap_s = self.session_gap
        for m in messages:
            seq = m.seq or 0
            if seq <= self.last_seq:
                continue
            gap = self.gaps and seq > self.last_seq + 1
            self.last_seq = seq
            if m.role not in _TURN_ROLES:
                continue
            text = m.text
            if not text or text.isspace():
                continue
            at = m.created_at
            if self.seqs and (
                gap  # messages between that the index was not given: no neighbours across
                or (at is not None and self._last_at is not None and at - self._last_at > gap_s)
            ):
                self._session += 1
            self._last_at = at
            self.positions[seq] = len(self.seqs)
            self.seqs.append(seq)
            self.sessions.append(self._session)
            self._turns.append(None)
            self._sources.append(m)
            name = m.name
            if name and name not in self._named:
                self._named.add(name)
                add_speaker(self.speakers, name)
            added += 1
        self._unmade += added
        return added

    def count_before(self, seq: int | None) -> int:
        """How many turns have a sequence number below ``seq`` (all if None)."""
        return len(self.seqs) if seq is None else bisect.bisect_left(self.seqs, seq)

    def position(self, seq: int) -> int | None:
        """The index of turn ``seq`` in ``turns``, None if it is not a turn of the index."""
        return self.positions.get(seq)


def _day(created_at: float, locale: str) -> tuple[str, tuple[int, int]]:
    """`day_label` and the (year, month) of ``created_at``, UTC, memoised by day."""
    key = (int(created_at // 86400), locale)
    got = _DAYS.get(key)
    if got is None:
        if len(_DAYS) >= 4096:
            _DAYS.clear()
        t = time.gmtime(key[0] * 86400)
        got = _DAYS[key] = (day_label(key[0] * 86400, locale), (t.tm_year, t.tm_mon))
    return got


_DAYS: dict[tuple[int, str], tuple[str, tuple[int, int]]] = {}


def day_label(created_at: float | None, locale: str = "en") -> str:
    """The date heading of a group of recalled turns: "8 May 2023" (zh: "2023-05-08")."""
    if created_at is None:
        return ""
    t = time.gmtime(created_at)
    if locale.startswith("zh"):
        return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    return f"{t.tm_mday} {MONTH_NAMES[t.tm_mon - 1]} {t.tm_year}"
