"""`contextwright eval locomo` and the memory-QA recall it measures, on invented data.

The LoCoMo files themselves are licensed for research use and stay in ../shared;
everything here is a small synthetic conversation in the same format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contextwright import Budget, ContextEngine, Message, TiktokenCounter, count_messages
from contextwright.history import RecallSource
from contextwright.history._rank import TurnIndex, TurnRanker, analyse
from contextwright.history._recall import MEMORY_QA_SHARES
from contextwright.interfaces.cli._main import main
from contextwright.interfaces.eval._locomo import evaluate_locomo, memory_qa_engine
from contextwright.interfaces.eval._locomo_data import Question, load_locomo
from contextwright.model._blocks import render_block
from contextwright.sources import Turn
from contextwright.sources._templates import templates_for, turn_context
from contextwright.stores import AsyncStore, SQLiteStore

MARKERS = ("ANSWER-MARKER", "ADVERSARIAL-MARKER", "IMG-URL-MARKER", "QUERY-MARKER")

SYNTHETIC: dict[str, Any] = {
    "speaker_a": "Ada",
    "speaker_b": "Bruno",
    "session_1_date_time": "2:15 pm on 3 March, 2024",
    "session_1": [
        {"speaker": "Ada", "dia_id": "D1:1", "text": "Hi Bruno! I finally adopted a grey kitten last week, her name is Pixel."},
        {"speaker": "Bruno", "dia_id": "D1:2", "text": "Congratulations Ada! I started learning the cello in January."},
        {"speaker": "Ada", "dia_id": "D1:3", "text": "That sounds lovely. Does it hurt your fingers?"},
        {"speaker": "Bruno", "dia_id": "D1:4", "text": "A little at first, but my teacher Marta showed me a better posture."},
        {"speaker": "Ada", "dia_id": "D1:5", "text": "Here she is on the windowsill this morning.",
         "img_url": ["https://example.invalid/IMG-URL-MARKER.jpg"], "query": "QUERY-MARKER",
         "blip_caption": "a photo of a grey kitten on a windowsill"},
        {"speaker": "Bruno", "dia_id": "D1:6", "text": "So cute! Is she eating well?"},
    ],
    "session_2_date_time": "10:00 am on 17 April, 2024",
    "session_2": [
        {"speaker": "Bruno", "dia_id": "D2:1", "text": "Ada, I played my first cello recital on Saturday at the library."},
        {"speaker": "Ada", "dia_id": "D2:2", "text": "That is wonderful news! How did the audience react?"},
        {"speaker": "Bruno", "dia_id": "D2:3", "text": "They clapped for a long time and my sister Lena cried a bit."},
        {"speaker": "Ada", "dia_id": "D2:4", "text": "I planted tomatoes and basil on my balcony this weekend."},
        {"speaker": "Bruno", "dia_id": "D2:5", "text": "Fresh basil  is the best with pasta <3 &lt; pesto."},
        {"speaker": "Ada", "dia_id": "D2:6", "text": "I will make pesto once the leaves grow bigger."},
    ],
    "session_3_date_time": "8:30 pm on 2 June, 2024",
    "session_3": [
        {"speaker": "Ada", "dia_id": "D3:1", "text": "Pixel knocked a tomato plant off the balcony rail yesterday."},
        {"speaker": "Bruno", "dia_id": "D3:2", "text": "Oh no! Did the plant survive the fall?"},
        {"speaker": "Ada", "dia_id": "D3:3", "text": "It did, I repotted it in a bigger clay pot."},
        {"speaker": "Bruno", "dia_id": "D3:4", "text": "Lena and I are hiking the Cinque Terre trail in July."},
        {"speaker": "Ada", "dia_id": "D3:5", "text": "Bring good shoes, the trail has many steep stairs."},
    ],
    "qa": [
        {"question": "What is the name of Ada's kitten?", "answer": "ANSWER-MARKER Pixel",
         "evidence": ["D1:1"], "category": 4},
        {"question": "When did Bruno play his first cello recital?", "answer": "ANSWER-MARKER April",
         "evidence": ["D2:1"], "category": 2},
        {"question": "What has Ada grown on her balcony?", "answer": "ANSWER-MARKER tomatoes",
         "evidence": ["D2:4; D3:3"], "category": 1},
        {"question": "Who taught Bruno his posture?", "answer": "ANSWER-MARKER Marta",
         "evidence": ["D1:4", "D1:2"], "category": 3},
        {"question": "What did Bruno's kitten knock off the rail?",
         "adversarial_answer": "ADVERSARIAL-MARKER", "evidence": ["D3:1"], "category": 5},
        {"question": "What does Bruno like with pasta?", "answer": "ANSWER-MARKER basil",
         "evidence": ["D2:5"], "category": 4},
        # one id in a lenient spelling, one naming no turn (skipped and counted)
        {"question": "Where will Bruno hike?", "answer": "ANSWER-MARKER Cinque Terre",
         "evidence": ["D:3:4", "D9:99"], "category": 4},
        # no evidence at all, and evidence naming no turn: both questions skipped
        {"question": "What did Ada say about shoes?", "answer": "ANSWER-MARKER", "evidence": [], "category": 4},
        {"question": "Who cried at the recital?", "answer": "ANSWER-MARKER", "evidence": ["D7:1"], "category": 1},
    ],
}  # fmt: skip


@pytest.fixture
def locomo_dir(tmp_path: Path) -> Path:
    d = tmp_path / "locomo"
    d.mkdir()
    (d / "synthetic.json").write_text(json.dumps(SYNTHETIC), encoding="utf-8")
    return d


class HashEmbedder:
    """A tiny deterministic embedder: hashed bag of lower-cased words, L2-normalised."""

    name = "test/hash-bow"
    dimension = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=out, where=norms > 0)


# -- the command ---------------------------------------------------------------------


def test_cli_runs_end_to_end_and_keeps_every_budget(locomo_dir, capsys):
    assert main(["eval", "locomo", str(locomo_dir), "--budget", "300,800", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["questions"] == 7
    assert report["questions_skipped"] == 2
    assert report["unresolved_evidence"] == 2  # "D9:99" and "D7:1"
    for budget in ("300", "800"):
        r = report["budgets"][budget]
        assert r["over_budget"] == 0
        assert 0 < r["tokens_max"] <= int(budget)
        assert r["evidence"] == 9  # D2:4 and D3:3 come from one string
        assert set(r["per_category"]) == {"1", "2", "3", "4", "5"}
        assert r["latency_ms"]["p95"] >= r["latency_ms"]["p50"] > 0
    assert report["conversations"]["synthetic"]["turns"] == 17


def test_cli_prints_a_table(locomo_dir, capsys):
    assert main(["eval", "locomo", str(locomo_dir / "synthetic.json"), "--budget", "500"]) == 0
    out = capsys.readouterr().out
    assert "LoCoMo recall" in out
    assert "single-hop" in out
    assert "synthetic" in out


def test_recall_is_the_share_of_evidence_turns_in_the_rendered_context(locomo_dir):
    # 1 token leaves room for nothing but the system prompt and the question: no
    # evidence; 2,000 holds the whole conversation (about 400 tokens): all of it,
    # including "basil  is ... <3 &lt;", which is whitespace-normalised and
    # escaped in the prompt and still counts.
    report = evaluate_locomo(sorted(locomo_dir.glob("*.json")), [1, 2000])
    assert report["budgets"]["1"]["recall"] == 0.0
    assert report["budgets"]["1"]["tokens_max"] <= 1
    full = report["budgets"]["2000"]
    assert full["recall"] == 1.0
    assert all(v == 1.0 for v in full["per_category"].values())


def test_the_builder_never_sees_answers_evidence_or_categories(locomo_dir):
    assert [f.name for f in dataclasses.fields(Question)] == ["text"]
    seen: list[tuple[Question, list[dict[str, Any]]]] = []
    evaluate_locomo(
        [locomo_dir / "synthetic.json"], [300, 2000], observe=lambda q, r: seen.append((q, r))
    )
    assert len(seen) == 14
    for question, request in seen:
        text = json.dumps(request)
        assert not any(marker in text for marker in MARKERS)
        assert not re.search(r"D\d+:\d+", text)  # no turn id, and no evidence list
        assert request[-1] == {"role": "user", "content": question.text}


def test_captions_are_part_of_the_turn_and_dates_become_created_at(locomo_dir):
    (conv,) = load_locomo(locomo_dir / "synthetic.json")
    photo = next(m for m in conv.messages if m.metadata["dia_id"] == "D1:5")
    assert photo.text.endswith("[shares a photo of a grey kitten on a windowsill]")
    assert photo.role == "user"
    assert photo.name == "Ada"
    assert photo.created_at == 1709475300.0  # 2024-03-03 14:15 UTC
    assert conv.messages[1].role == "assistant"


def test_a_list_of_samples_as_in_locomo10_is_read_too(tmp_path):
    conversation = {k: v for k, v in SYNTHETIC.items() if k != "qa"}
    samples = [
        {"sample_id": f"s{i}", "conversation": conversation, "qa": SYNTHETIC["qa"]} for i in (1, 2)
    ]
    (tmp_path / "locomo10.json").write_text(json.dumps(samples), encoding="utf-8")
    report = evaluate_locomo([tmp_path / "locomo10.json"], [300])
    assert list(report["conversations"]) == ["locomo10#s1", "locomo10#s2"]
    assert report["questions"] == 14


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not JSON"),
        ('{"speaker_a": "A"}', "not a LoCoMo conversation"),
        ('[1, 2]', "not a LoCoMo conversation"),
        ('{"speaker_a": "A", "speaker_b": "B", "qa": [], "session_1": []}', "session_1_date_time"),
    ],
)  # fmt: skip
def test_bad_files_exit_2_with_one_line(tmp_path, capsys, content, problem):
    (tmp_path / "bad.json").write_text(content, encoding="utf-8")
    assert main(["eval", "locomo", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert problem in err


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["/nonexistent/locomo"], "no such directory"),
        (["{empty}"], "no *.json files"),
        (["{dir}", "--budget", "1000,x"], "--budget"),
        (["{dir}", "--budget", "0"], "--budget"),
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line(tmp_path, locomo_dir, capsys, args, problem):
    (tmp_path / "empty").mkdir()
    args = [a.format(dir=locomo_dir, empty=tmp_path / "empty") for a in args]
    assert main(["eval", "locomo", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert problem in err


def test_an_embedder_adds_vector_evidence_within_the_budget(locomo_dir):
    report = evaluate_locomo([locomo_dir / "synthetic.json"], [300], embedder=HashEmbedder())
    assert report["embedder"] == "test/hash-bow"
    assert report["budgets"]["300"]["over_budget"] == 0
    assert report["budgets"]["300"]["recall"] > 0.5


# -- the ranking and packing behind it ------------------------------------------------


def test_analysis_moves_speaker_names_and_dates_out_of_the_text():
    a = analyse("What did Caroline's sister do in June 2022, and may Mel come?",
                {"caroline": "Caroline", "mel": "Mel Jones"})  # fmt: skip
    assert a.speakers == {"Caroline", "Mel Jones"}
    assert a.months == {6}
    assert a.years == {2022}
    assert a.text == "sister June 2022 may come"
    assert a.semantic == "What did sister do in June 2022, and may come?"
    assert analyse("What will you do?", {"will": "Will"}).speakers == frozenset()
    assert analyse("What did she say?").text == "say"
    assert analyse("What did she do?").text == "What did she do"  # nothing else left
    assert analyse("我在哪里工作?").text == "我在 工作"  # question words cut (test_recall_zh)


def _index(texts: list[tuple[str, str, float]]) -> TurnIndex:
    index = TurnIndex()
    index.add(
        Message("user" if i % 2 == 0 else "assistant", text, name=name, created_at=at, seq=i + 1)
        for i, (name, text, at) in enumerate(texts)
    )
    return index


def test_ranking_spreads_evidence_to_neighbours_within_a_session_and_prefers_the_named_speaker():
    day, later = 1_700_000_000.0, 1_700_000_000.0 + 7 * 86400
    index = _index([
        ("Ada", "How was the camping trip?", day),          # 1: the hit
        ("Bruno", "We roasted marshmallows all night.", day),  # 2: its answer
        ("Ada", "Nice.", day),                               # 3
        ("Bruno", "Unrelated chat about trains.", later),    # 4: next session
        ("Ada", "More unrelated chat.", later),              # 5
    ])  # fmt: skip
    ranker = TurnRanker()
    a = analyse("What did Bruno eat on the camping trip?", index.speakers)
    ranked = ranker.rank(index, a, {1: 5.0}, len(index), fill=True)
    # Bruno's answer next to the hit comes first (the question names him), then
    # the hit and its other neighbour; the next session has no evidence (the
    # named speaker's turn first); without fill it is left out.
    assert [index.turns[p].seq for p, _ in ranked] == [2, 1, 3, 4, 5]
    assert [index.turns[p].seq for p, _ in ranker.rank(index, a, {1: 5.0}, 5)] == [2, 1, 3]


def test_a_fake_embedder_ranks_by_meaning_when_words_do_not_match():
    index = _index([("Ada", "I adore my grey kitten", 0.0), ("Bruno", "Trains are late", 0.0)])
    ranker = TurnRanker(embedder=HashEmbedder())
    assert ranker.embed_new(index) == 2
    assert index.vectors.shape == (2, 64)
    a = analyse("Tell me about the grey kitten", index.speakers)
    ranked = ranker.rank(index, a, {}, 2, query_vector=ranker.embed_query(a))
    assert index.turns[ranked[0][0]].seq == 1


async def test_recall_block_fits_its_allowance_exactly_and_groups_by_day():
    counter = TiktokenCounter("cl100k_base")
    store = SQLiteStore(":memory:")
    conv = load_locomo_dict(SYNTHETIC)
    store.append("c", conv, tenant="t")
    db = AsyncStore(store)
    source = RecallSource.for_memory_qa(db, counter=counter)
    for allowance in (100, 200, 400):
        turn = Turn(
            Message.user("What did Ada plant on the balcony?"), conversation="c", tenant="t"
        )
        block = await source.fetch(turn, allowance)
        assert block is not None
        # the engine's frame around the per-turn blocks, the larger placement's
        t = templates_for("en")
        frame = 3 + max(counter.count(turn_context(t, (), p)) for p in ("user", "system")) + 1
        spare = allowance - frame - (counter.count(render_block(block)) + 1)
        assert spare >= 0
        if allowance < 400:  # more turns were left: the block is full but for one line or so
            assert spare < 40
        lines = block.content.splitlines()
        assert "balcony" in block.content
        assert lines[1].endswith(":")  # a date line opens the first day group
    await db.close()


def load_locomo_dict(data: dict[str, Any]) -> list[Message]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return load_locomo(path)[0].messages


def test_memory_qa_engine_is_a_plain_reusable_configuration():
    store = SQLiteStore(":memory:")
    store.append("c", load_locomo_dict(SYNTHETIC), tenant="t")
    engine = memory_qa_engine(store, counter=TiktokenCounter("cl100k_base"))
    assert isinstance(engine, ContextEngine)
    assert not engine.restate_goal
    q = Message.user("Where are Bruno and Lena hiking?")
    budget = 200 + count_messages(engine.counter, [Message.system(engine.system_prompt), q])
    built = engine.build_sync(
        q, conversation="c", tenant="t", budget=Budget(budget, shares=MEMORY_QA_SHARES)
    )
    assert "Cinque Terre" in "\n".join(m.text for m in built.messages)
    assert built.report.used <= budget
