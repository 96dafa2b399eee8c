"""`contextwright eval locomo`: per-conversation spread and leave-one-conversation-out CV.

Small invented conversations in LoCoMo's format (tests/test_eval.py's); the
LoCoMo files themselves stay in ../shared.
"""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from contextwright._errors import UserError
from contextwright.history._rank import RankWeights
from contextwright.interfaces.cli._main import main
from contextwright.interfaces.eval._locomo import evaluate_locomo
from contextwright.interfaces.eval._locomo_cv import cross_validate, parse_grid

from .test_eval import SYNTHETIC


def _second() -> dict[str, Any]:
    """Another conversation: the same turns, other questions (one per category)."""
    data = copy.deepcopy(SYNTHETIC)
    data["qa"] = [
        {"question": "What instrument does Bruno play?", "answer": "cello",
         "evidence": ["D1:2", "D2:1"], "category": 1},
        {"question": "When did Pixel knock over a plant?", "answer": "June",
         "evidence": ["D3:1"], "category": 2},
        {"question": "Would Ada like gardening books?", "answer": "yes",
         "evidence": ["D2:4", "D3:3"], "category": 3},
        {"question": "What did Ada plant on her balcony?", "answer": "tomatoes and basil",
         "evidence": ["D2:4"], "category": 4},
        {"question": "What kind of shoes should Lena bring?", "answer": "good shoes",
         "evidence": ["D3:5"], "category": 5},
    ]  # fmt: skip
    return data


@pytest.fixture
def two_dir(tmp_path: Path) -> Path:
    d = tmp_path / "two"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(SYNTHETIC), encoding="utf-8")
    (d / "b.json").write_text(json.dumps(_second()), encoding="utf-8")
    return d


def test_the_report_gives_mean_and_spread_of_per_conversation_recall(two_dir):
    report = evaluate_locomo(sorted(two_dir.glob("*.json")), [80, 2000])
    assert report["categories"]["1"] == "multi-hop"
    assert report["categories"]["4"] == "single-hop"
    for b in ("80", "2000"):
        per = [c["budgets"][b]["recall"] for c in report["conversations"].values()]
        s = report["spread"][b]
        assert s["mean"] == pytest.approx(statistics.fmean(per))
        assert s["sd"] == pytest.approx(statistics.pstdev(per))
        assert (s["min"], s["max"]) == (min(per), max(per))
        # the pooled figure counts evidence turns, not conversations
        r = report["budgets"][b]
        assert r["recall"] == pytest.approx(r["hits"] / r["evidence"])
    assert report["spread"]["2000"] == {"mean": 1.0, "sd": 0.0, "min": 1.0, "max": 1.0}
    assert report["spread"]["80"]["max"] < 1.0  # 80 tokens hold only some of the evidence


def test_the_grid_is_the_product_of_its_axes_with_the_default_first():
    grid = parse_grid(["neighbours=1,3", "date_boost=0,0.5"])
    assert next(iter(grid)) == "default"
    assert grid["default"] == RankWeights()
    # 2 x 2 combinations, one of which is the default itself (kept once)
    assert set(grid) == {
        "default", "neighbours=1,date_boost=0.0", "neighbours=1,date_boost=0.5",
        "neighbours=3,date_boost=0.0",
    }  # fmt: skip
    assert grid["neighbours=1,date_boost=0.0"] == RankWeights(neighbours=1, date_boost=0.0)
    assert parse_grid([]) == {"default": RankWeights()}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [("bogus=1", "KNOB one of"), ("neighbours", "KNOB=V1,V2"), ("neighbours=1.5", "not a int"),
     ("date_boost=high", "not a float")],
)  # fmt: skip
def test_a_bad_grid_is_a_user_error_naming_it(spec, problem):
    with pytest.raises(UserError, match=problem):
        parse_grid([spec])


def test_without_a_grid_cv_is_the_in_sample_figure_and_says_so(two_dir):
    report = cross_validate(sorted(two_dir.glob("*.json")), [80])
    cv = report["cv"]
    assert cv["tuned"] is False
    r = cv["budgets"]["80"]
    assert r["cv_recall"] == pytest.approx(report["budgets"]["80"]["recall"])
    assert r["cv_recall"] == pytest.approx(r["default"])
    assert set(r["picked"].values()) == {"default"}


def test_each_fold_picks_the_best_candidate_on_the_other_conversations(two_dir):
    grid = parse_grid(["neighbours=0", "no_evidence=0.0,0.75"])
    report = cross_validate(sorted(two_dir.glob("*.json")), [80], grid)
    r = report["cv"]["budgets"]["80"]
    assert report["cv"]["tuned"] is True
    per = r["per_conversation"]
    order = list(grid)
    assert list(per) == order
    hits = total = 0
    for held, other in (("a", "b"), ("b", "a")):
        # with two conversations, the fold holding one out picks on the other alone
        best = max(order, key=lambda c: (per[c][other], -order.index(c)))
        assert r["picked"][held] == best
        assert r["held_out"][held] == per[best][held]
        b = report["conversations"][held]["budgets"]["80"]
        hits += per[best][held] * b["evidence"]
        total += b["evidence"]
    assert r["cv_recall"] == pytest.approx(hits / total)
    best_all = r["best_in_sample"]["candidate"]
    assert r["best_in_sample"]["recall"] == max(r["candidates"].values())
    assert r["candidates"][best_all] == r["best_in_sample"]["recall"]


def test_the_command_prints_spread_and_the_cv_table(two_dir, capsys):
    assert main(["eval", "locomo", str(two_dir), "--budget", "80", "--cv"]) == 0
    out = capsys.readouterr().out
    assert "mean" in out
    assert "sd" in out
    assert "nothing is chosen, CV = in-sample" in out
    assert main(["eval", "locomo", str(two_dir), "--budget", "80", "--cv",
                 "--grid", "neighbours=0,3", "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert set(report["cv"]["candidates"]) == {"default", "neighbours=0"}
    assert report["cv"]["candidates"]["neighbours=0"] == {"neighbours": 0}


def test_grid_without_cv_exits_2_with_one_line(two_dir, capsys):
    assert main(["eval", "locomo", str(two_dir), "--grid", "neighbours=0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--grid needs --cv" in err


def test_feedback_is_seeded_by_the_best_full_text_hits_not_by_the_priors():
    from contextwright import Message
    from contextwright.history._rank import TurnIndex, TurnRanker, analyse

    index = TurnIndex()
    index.add([
        Message.user("We paddled kayaks across Tahoe at dawn", name="Ada", seq=1),
        Message.assistant("Bruno here: locomotives and timetables all week", name="Bruno", seq=2),
        Message.user("Nothing much, laundry", name="Ada", seq=3),
    ])  # fmt: skip
    a = analyse("Did Bruno enjoy the kayaks trip?", index.speakers)
    # the ranking puts Bruno's turn first (speaker prior), the search's best hit is turn 1
    ranked = [(1, 0.03), (0, 0.02), (2, 0.01)]
    hits = {1: 5.0, 3: 0.5}
    seeded = TurnRanker(RankWeights(feedback_docs=1))
    assert seeded.feedback_query(index, a, ranked, hits) == "across dawn paddled tahoe"
    by_rank = TurnRanker(RankWeights(feedback_docs=1, feedback_from_hits=False))
    assert by_rank.feedback_query(index, a, ranked, hits) == "locomotives timetables week"
    assert seeded.feedback_query(index, a, ranked) == by_rank.feedback_query(index, a, ranked)


def test_feedback_seeded_by_hits_never_asks_for_the_first_ranking():
    """A build ranks its turns once when the hits seed the feedback (the ranking is lazy)."""
    from contextwright import Message
    from contextwright.history._rank import TurnIndex, TurnRanker, analyse

    index = TurnIndex()
    index.add([
        Message.user("We paddled kayaks across Tahoe at dawn", name="Ada", seq=1),
        Message.assistant("Bruno here: locomotives and timetables all week", name="Bruno", seq=2),
    ])  # fmt: skip
    a = analyse("Did Bruno enjoy the kayaks trip?", index.speakers)
    asked: list[int] = []

    def ranking() -> list[tuple[int, float]]:
        asked.append(1)
        return [(1, 0.03), (0, 0.02)]

    ranker = TurnRanker(RankWeights(feedback_docs=1))
    assert ranker.feedback_query(index, a, ranking, {1: 5.0}) == "across dawn paddled tahoe"
    assert asked == []  # seeded by the hit: no ranking made
    # hits that seed nothing (none scores above zero, or none is indexed): the ranking seeds
    assert ranker.feedback_query(index, a, ranking, {1: 0.0, 99: 3.0}) == (
        "locomotives timetables week"
    )
    assert asked == [1]
    assert ranker.feedback_query(index, a, list, {99: 3.0}) is None  # an empty ranking: none
