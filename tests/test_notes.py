"""Turn notes (``history/_notes.py``): dates and kinds read from turns, as recall evidence.

Relative dates resolve against the turn's own day; a question's dates are read
as written; a note finds a turn that shares no word with the question, and only
with ``note_weight``; notes built in steps equal notes built at once; and notes
never reach the rendered context, whose turns stay verbatim.
"""

from __future__ import annotations

import calendar
import dataclasses
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Conversations, Message
from contextwright.history._notes import NoteIndex, note_terms, resolve, turn_notes
from contextwright.history._query import STOP_WORDS, analyse
from contextwright.history._rank import RankWeights, TurnIndex, TurnRanker
from contextwright.interfaces.eval._locomo import memory_qa_engine
from contextwright.stores import SQLiteStore


def _at(y: int, m: int, d: int, hour: int = 13) -> float:
    return float(calendar.timegm(datetime(y, m, d, hour).timetuple()))


FRIDAY = _at(2022, 4, 15)  # 15 April 2022 was a Friday


def test_relative_dates_resolve_against_the_turns_day():
    assert resolve("I did it yesterday", FRIDAY)[0] == "d:2022-4-14"
    assert resolve("see you tomorrow", FRIDAY)[0] == "d:2022-4-16"
    assert resolve("two days ago it rained", FRIDAY)[0] == "d:2022-4-13"
    assert resolve("printed it last Friday", FRIDAY)[0] == "d:2022-4-8"  # not today
    assert resolve("last Monday", FRIDAY)[0] == "d:2022-4-11"
    assert resolve("next Monday", FRIDAY)[0] == "d:2022-4-18"
    # a week away: its month, no day
    assert resolve("Dyed my hair last week", _at(2022, 5, 3)) == ["m:2022-4", "mo:4", "y:2022"]
    assert resolve("moving next month", _at(2022, 12, 20)) == ["m:2023-1", "mo:1", "y:2023"]
    assert resolve("a trip three months ago", _at(2022, 2, 1))[0] == "m:2021-11"
    assert resolve("my trip last year", FRIDAY) == ["y:2021"]
    assert resolve("nothing relative here", FRIDAY) == []
    # a number too large for a calendar is no date (and no error)
    assert resolve("99999999999 days ago", FRIDAY) == []
    assert resolve("12 days ago", FRIDAY)[0] == "d:2022-4-3"


_PHRASES = st.sampled_from(
    [
        "last",
        "next",
        "Friday",
        "week",
        "month",
        "year",
        "ago",
        "days",
        "999",
        "two",
        "yesterday",
        "my",
        "sister",
        "Spain",
        " ",
        ",",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PHRASES, st.text(max_size=5)), max_size=12),
       st.floats(0, 4e9), st.text(max_size=8))  # fmt: skip
def test_notes_of_any_text_are_terms_and_never_an_error(words, at, speaker):
    notes = turn_notes(" ".join(words), at, speaker)
    assert all(t[:2] in ("d:", "m:", "mo", "y:", "k:", "r:") for t in notes)
    assert any(t.startswith("d:") for t in notes)  # a dated turn notes its day


def test_a_turn_notes_its_day_kinds_and_relations():
    notes = turn_notes("My older sister took me to Spain. I love kickboxing", FRIDAY, "Maria Lopez")
    assert "d:2022-4-15" in notes  # the session's day, as its header says
    assert {"k:country", "k:european", "k:martial", "k:arts"} <= notes
    assert {"r:maria:sister", "r:maria:family"} <= notes
    assert turn_notes("hello there", None, "") == set()  # undated: no date notes


def test_a_question_is_read_into_note_terms():
    speakers = {"nate": "Nate", "joanna": "Joanna"}
    asked = note_terms(
        "What did Joanna watch on October 6, 2022 and on 8th December, 2023?", speakers
    )
    assert {"d:2022-10-6", "d:2023-12-8"} <= asked
    assert "m:2022-4" in note_terms("What did Nate do in April 2022?", speakers)
    assert "y:2021" in note_terms("Where did Nate go in 2021?", speakers)
    assert "r:nate:sister" in note_terms("Where does Nate's sister live?", speakers)
    # a speaker's name is the speaker prior's, not a note word
    assert "k:nate" not in note_terms("What does Nate like?", speakers)


def _index(messages: list[Message]) -> TurnIndex:
    index = TurnIndex()
    index.add(messages)
    return index


TURNS = [
    Message.user(
        "Hey Jo, guess what? Dyed my hair last week!",
        name="Nate",
        created_at=_at(2022, 5, 3),
        seq=1,
    ),
    Message.assistant(
        "Wow, that sounds fun. I have been writing all day.",
        name="Joanna",
        created_at=_at(2022, 5, 3, 14),
        seq=2,
    ),
    Message.user(
        "I am doing kickboxing, it gives me so much energy.",
        name="Nate",
        created_at=_at(2022, 7, 1),
        seq=3,
    ),
    Message.assistant(
        "Nice one! My screenplay is almost done.",
        name="Joanna",
        created_at=_at(2022, 7, 1, 14),
        seq=4,
    ),
]


def test_a_note_finds_a_turn_that_shares_no_word_with_the_question():
    index = _index(TURNS)
    for question, want in (("What did he change in April 2022?", 0),
                           ("Which martial arts does he practise?", 2)):  # fmt: skip
        analysis = analyse(question, index.speakers)
        assert not set(analysis.text.lower().split()) & set(index.turn(want).text.lower().split())
        off = TurnRanker(RankWeights()).rank(index, analysis, {}, len(index))
        assert off == []  # no word shared: without notes, no evidence at all
        on = TurnRanker(RankWeights(note_weight=0.3)).rank(index, analysis, {}, len(index))
        assert [p for p, _ in on] == [want], question


def test_notes_stop_at_n():
    """A ranking of the first ``n`` turns never returns a later one through its notes."""
    index = _index(TURNS)
    analysis = analyse("Which martial arts does he practise?", index.speakers)
    ranker = TurnRanker(RankWeights(note_weight=0.3))
    assert ranker.rank(index, analysis, {}, 2) == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, len(TURNS)), min_size=1, max_size=4))
def test_notes_built_in_steps_equal_notes_built_at_once(cuts):
    whole = _index(TURNS).notes
    stepped = TurnIndex()
    for cut in [*sorted(cuts), len(TURNS)]:
        stepped.add(TURNS[:cut])
        _ = stepped.notes  # built so far, then extended
    assert dict(stepped.notes.postings) == dict(whole.postings)
    assert stepped.notes.size == whole.size == len(TURNS)


def test_scores_skip_stop_words_and_common_terms():
    notes = NoteIndex()
    for terms in (["k:the", "d:2022-1-1"], ["d:2022-1-1"], ["k:pet"], [], []):
        notes.add(terms)
    # "the" is a stop word; the day is held by 2 of 5 turns (over a quarter): no evidence
    assert notes.scores(["k:the", "d:2022-1-1"], 5, STOP_WORDS) == {}
    assert set(notes.scores(["k:pet"], 5, STOP_WORDS)) == {2}


def test_notes_never_appear_in_the_rendered_context(tmp_path):
    store = SQLiteStore(tmp_path / "n.db")
    engine = memory_qa_engine(
        store, embedder=None, weights=RankWeights(note_weight=1.0), budget=400
    )
    convs = Conversations(engine, store, recall=False, window_tokens=1)
    filler = [
        Message.user(
            f"Small talk number {i} about the weather.", name="Nate", created_at=_at(2022, 6, 1) + i
        )
        for i in range(30)
    ]
    turns = [dataclasses.replace(m, seq=None) for m in TURNS]
    convs.append_sync("c", [*turns, *filler], tenant="t", user="u")
    built = convs.build_sync(
        "c", "Which martial arts does Nate practise?", tenant="t", user="u", store_message=False
    )
    text = "\n".join(m.text for m in built.messages)
    assert TURNS[2].text in text  # found through its note, shown verbatim
    for term in ("k:", "d:2022", "m:2022", "r:nate", "k:martial"):
        assert term not in text
    assert text.count("martial") == 1  # the question's own word, no note beside the turn
