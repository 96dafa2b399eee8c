"""The ratio benchmarks run end to end at tiny sizes and print their goals tables.

Not a measurement: the sizes are far too small for the numbers to mean anything,
so only the shape of the output is checked — every goal row is there with a
verdict, the goals measured at the sizes run have a PASS or MISS (not SKIP), and
the sizes left out print SKIP. `bench_goals.py` needs the peers of the ``bench``
extra (LangChain, LlamaIndex); `bench_workers.py` runs real processes on one file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(BENCH)])}
    env["COLUMNS"] = "250"
    out = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=BENCH,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def verdicts(text: str) -> dict[str, str]:
    """Goal name -> verdict, from the rows of the printed goals table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        found = [c for c in cells if c in ("PASS", "MISS", "SKIP")]
        if len(cells) > 3 and found:
            rows[cells[1]] = found[0]
    return rows


def test_bench_goals_prints_every_goal() -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    text = run(
        "bench_goals.py", "--sizes", "60,120", "--rounds", "2", "--first-sizes", "120",
        "--first-reps", "1", "--warm", "2", "--appends", "4", "--append-size", "120",
        "--import-n", "150", "--import-rounds", "1", "--no-locomo",
    )  # fmt: skip
    assert "Goals (ratio = peer / contextwright" in text
    got = verdicts(text)
    measured = [
        "history only vs memoised trim_messages @ 60",
        "history only vs memoised trim_messages @ 120",
        "default vs LlamaIndex Memory.get @ 60",
        "default vs LlamaIndex Memory.get @ 120",
        "growth 60 -> 120, default",
        "growth 60 -> 120, history",
        "first build in a fresh process vs warm @ 120",
        "append vs Memory.put, onto 120",
        "import of 150 vs Memory.put_messages",
    ]
    for name in measured:
        assert got.get(name) in ("PASS", "MISS"), (name, got)
    not_run = [
        "history only vs memoised trim_messages @ 680 (LoCoMo 43)",
        "history only vs memoised trim_messages @ 100,000",
        "default (history + recall) vs memoised trim_messages @ 10,000",
        "default vs LlamaIndex Memory.get @ 100,000",
        "growth 1,000 -> 100,000, default",
        "first build in a fresh process vs warm @ 100,000",
    ]
    for name in not_run:
        assert got.get(name) == "SKIP", (name, got)
    summary = re.search(r"goals: (\d+) PASS, (\d+) MISS, (\d+) SKIP \(of (\d+)\)", text)
    assert summary, text[-2000:]
    assert sum(map(int, summary.groups()[:3])) == int(summary[4]) == len(got)


def test_bench_workers_prints_every_goal() -> None:
    text = run("bench_workers.py", "--messages", "100", "--seconds", "0.3", "--rounds", "1")
    assert "Goals (many workers)" in text
    got = verdicts(text)
    for name in (
        "builder beside a flat-out appender vs solo, turns/s",
        "two builders on one file vs one, total turns/s",
    ):
        assert got.get(name) in ("PASS", "MISS"), (name, got)
    # the correctness checks ran on some builds (their outcome is the benchmark's to report)
    for name in (
        "stale builds beside the appender",
        "builds beside the appender repeating or skipping a message",
    ):
        found = re.search(re.escape(name) + r".*?(\d+) of ([\d,]+)", text)
        assert found, text[-2000:]
        assert int(found[2].replace(",", "")) > 0
        assert got[name] == ("PASS" if found[1] == "0" else "MISS")


def test_bench_otel_prints_its_goals() -> None:
    text = run("bench_otel.py", "--rounds", "2", "--builds", "2", "--messages", "60")
    got = verdicts(text)
    assert {"engine build: OTel on / off", "stateful build: OTel on / off"} <= set(got)
    assert all(v in ("PASS", "MISS") for v in got.values())


def test_bench_cache_replay_prints_its_table() -> None:
    text = run("bench_cache_replay.py", "--calls", "30", "--budgets", "4000:production")
    assert "prompt-cache replay: 30 model calls" in text
    assert "cache-aware (default)" in text
    assert "earlier (clear_at_least 0)" in text
    assert "goals: writes <= 1.25x the minimum" in text


def test_bench_probe_facts_prints_its_table() -> None:
    text = run("bench_probe_facts.py", "--per-kind", "1", "--locomo", "0")
    assert "facts after compaction: 3 conversations" in text
    assert "LLM summariser: none configured" in text
    assert re.search(r"goal: >= 0.95 .*: (PASS|MISS)", text)


def test_bench_quality_cost_prints_its_tables() -> None:
    if not (ROOT.parent / "shared" / "data" / "locomo").is_dir():
        pytest.skip("LoCoMo data not beside the checkout")
    text = run(
        "bench_quality_cost.py", "--messages", "300", "--rounds", "2", "--fresh-reps", "1",
        "--mem-builds", "1", "--new-weights", "neighbours=2",
        "--stateful-new-weights", "neighbours=2",
    )  # fmt: skip
    assert "new: " in text
    assert "weights neighbours=2" in text
    got = verdicts(text)
    for who in ("qa", "stateful"):
        for b in ("1,000", "4,000"):
            assert got.get(f"{who} new / old, warm @ {b}") in ("PASS", "MISS"), got
    memory = re.findall(r"│ (qa|stateful)\s+│ (old|new)\s+│\s+([\d,-]+) │", text)
    assert len(memory) == 4, text[-2000:]
    assert ("qa", "old", "300") in memory
    assert "builds over their window: 0" in text
