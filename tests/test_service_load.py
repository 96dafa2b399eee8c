"""The service under load, briefly: ``bench/load_service.py`` for ~10 s (issue #21, Tests).

The real thing, shortened: ``contextwright serve --workers 2`` as a subprocess on an
SQLite file with a key, 16 concurrent httpx clients doing mixed appends and builds
over several conversations. Every request must succeed (0 errors), both workers
must be found, sampled and busy, and no worker's RSS may grow more than 10 % after
the warm-up. The full run (2 minutes) is in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sixteen_clients_two_workers_no_errors_flat_memory() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")])}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load_service.py"), "--seconds", "10",
         "--warmup", "4", "--conversations", "6", "--messages", "150", "--json"],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert out.stdout.strip(), out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    report = out.stdout + out.stderr[-2000:]
    assert result["errors"] == 0, report
    assert result["ops"] > 100, report  # the load ran
    assert {"append", "build"} <= {op for op, v in result["latency_ms"].items() if v["n"] > 0}
    assert len(result["rss"]) == 2, report  # both workers were sampled
    assert all(r["warm_kib"] > 10_000 for r in result["rss"].values()), report
    assert all(r["cpu_s"] > 0.2 for r in result["rss"].values()), report  # both served
    assert result["max_growth"] <= 0.10, report
    assert out.returncode == 0, report
