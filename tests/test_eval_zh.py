"""The generated Chinese evaluation set (`_zh`) and ``contextwright eval zh``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from contextwright.interfaces.cli._main import main
from contextwright.interfaces.eval._locomo import evaluate_locomo
from contextwright.interfaces.eval._locomo_data import load_locomo
from contextwright.interfaces.eval._zh import generate, write_set

_HAN = re.compile(r"[\u4e00-\u9fff]")


def test_the_same_seed_writes_the_same_bytes_and_another_seed_another_set(tmp_path):
    a = [p.read_bytes() for p in write_set(tmp_path / "a", seed=3, conversations=2)]
    b = [p.read_bytes() for p in write_set(tmp_path / "b", seed=3, conversations=2)]
    c = [p.read_bytes() for p in write_set(tmp_path / "c", seed=4, conversations=2)]
    assert a == b
    assert a != c
    assert [p.name for p in sorted((tmp_path / "a").iterdir())] == ["zh-3-1.json", "zh-3-2.json"]


def test_every_question_has_resolvable_evidence_that_says_what_it_asks(tmp_path):
    (path,) = write_set(tmp_path, seed=1, conversations=1)
    (conv,) = load_locomo(path)
    assert conv.unresolved_evidence == 0
    assert conv.questions_skipped == 0
    assert {item.category for item in conv.items} == {1, 2, 3, 4, 5}
    data = json.loads(path.read_text(encoding="utf-8"))
    texts = {t["dia_id"]: t["text"] for k, v in data.items() if k.startswith("session_")
             and isinstance(v, list) for t in v}  # fmt: skip
    for qa in data["qa"]:
        assert _HAN.search(qa["question"])
        said = "".join(texts[e] for e in qa["evidence"])
        if qa["category"] in (1, 4, 5):  # the answer is in the evidence, verbatim
            assert qa["answer"] in said or qa["answer"] == "医生", qa
        if qa["category"] == 1:  # multi-hop: two turns
            assert len(qa["evidence"]) == 2
    # the adversarial question names the other speaker, the evidence's speaker is the first
    speaker_of = {t["dia_id"]: t["speaker"] for k, v in data.items() if k.startswith("session_")
                  and isinstance(v, list) for t in v}  # fmt: skip
    for qa in (q for q in data["qa"] if q["category"] == 5):
        (e,) = qa["evidence"]
        assert not qa["question"].startswith(speaker_of[e])


def test_facts_that_change_are_asked_about_their_latest_state():
    (data,) = generate(seed=2, conversations=1)
    for qa in (q for q in data["qa"] if q["question"].endswith("现在住在哪个城市?")):
        (e,) = qa["evidence"]
        session, turn = map(int, e[1:].split(":"))
        text = data[f"session_{session}"][turn - 1]["text"]
        assert "搬去" in text
        assert qa["answer"] in text


def test_the_set_is_long_enough_that_a_small_budget_must_choose(tmp_path):
    paths = write_set(tmp_path, seed=0, conversations=1)
    report = evaluate_locomo(paths, [300, 20000], locale="zh")
    assert report["budgets"]["20000"]["recall"] == 1.0
    assert 0 < report["budgets"]["300"]["recall"] < 0.8
    assert report["budgets"]["300"]["over_budget"] == 0


def test_eval_zh_runs_from_the_command_and_can_keep_its_files(tmp_path, capsys):
    keep = tmp_path / "keep"
    argv = ["eval", "zh", "--conversations", "1", "--budget", "500", "--write", str(keep), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["set"] == "Chinese (generated)"
    assert report["questions"] == 30
    assert [Path(f).name for f in report["files"]] == ["zh-0-1.json"]
    assert (keep / "zh-0-1.json").is_file()
    assert main(["eval", "zh", "--conversations", "1", "--budget", "500"]) == 0
    assert "Chinese (generated) recall" in capsys.readouterr().out
    assert main(["eval", "zh", "--conversations", "0"]) == 2
