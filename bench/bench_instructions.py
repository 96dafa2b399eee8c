"""Instructions per stateful turn and per imported message, counted by valgrind's callgrind.

Wall times on a shared two-core machine move 20–30 % between runs and more between
machines (the same code measured 0.52 ms and 0.82 ms history-only builds on two
machines of this workplace a day apart), so a speed-up of a few percent cannot be
seen in them. Callgrind counts the instructions the CPU executes instead: the same
code, inputs and environment give the same count whatever else the machine does.
It says nothing about cache misses or system calls (an SQLite commit's writes cost
more time than their instructions suggest), so it complements ``bench_history.py``,
it does not replace it.

What is counted is the turn loop of ``bench_history.py`` on its synthetic thread:
a template conversation of ``--messages`` is imported (outside valgrind), then a
worker process under callgrind opens a copy, makes the first build (the restart:
tail and turn index loaded, not counted) and runs ``--turns`` more turns — build a
new user message, append the reply, wait for background summaries — inside one
``functools.reduce`` call, which is what ``--toggle-collect`` switches counting on
for (only the main thread's instructions inside it are counted). Four engines, as
in ``bench_history.py``: history only, history + recall (the `Conversations`
default), the eight sources, the eight sources + recall. The import line counts
``Conversations.import_sync`` of 2,000 messages (batches of 1,000), per message.

Run: ``python bench/bench_instructions.py [--messages 10000] [--turns 40]``; about
6 minutes on 2 cores (callgrind runs programs ~50x slower; each worker also pays for
its imports, uncounted). Needs ``valgrind`` on the PATH.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_history import (  # noqa: E402 (the sibling module, after the path)
    STATE,
    TENANT,
    USER,
    fresh,
    import_conv,
    make_engine,
    synthetic_thread,
    turn_messages,
)
from contextwright import Conversations  # noqa: E402
from contextwright.stores import SQLiteStore  # noqa: E402

NOW = 1_800_000_000.0
CONFIGS = {  # name: (eight sources, recall)
    "history only": (False, False),
    "history + recall": (False, True),
    "8 sources": (True, False),
    "8 sources + recall": (True, True),
}
IMPORT_MESSAGES = 2000


def make_template(path: str, n: int) -> None:
    """``n`` messages of the synthetic thread imported as the CLI does, summarised, built once."""
    conv = Conversations(make_engine(NOW), SQLiteStore(path))
    import_conv(conv, "c", fresh(synthetic_thread(n)), 1000, optimize=True)
    conv.wait_idle_sync(120)
    conv.build_sync("c", "hello there", tenant=TENANT, user=USER, state=STATE)
    conv.wait_idle_sync(120)
    conv.close()


def worker_turns(template: str, turns: int, sources: bool, recall: bool) -> None:
    """The measured loop (runs under callgrind): counting is on inside ``functools.reduce``."""
    workdir = tempfile.mkdtemp(prefix="cw-instr-")
    path = os.path.join(workdir, "c.db")
    shutil.copyfile(template, path)
    conv = Conversations(make_engine(NOW, sources=sources), SQLiteStore(path), recall=recall)

    def turn(_: object, pair: tuple[str, object]) -> None:
        q, reply = pair
        conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
        conv.append_sync("c", [reply.replace()], tenant=TENANT, user=USER)  # type: ignore[attr-defined]
        conv.wait_idle_sync(120)

    pairs = turn_messages(turns + 1)
    turn(None, pairs[0])  # the restart: loads the tail and the turn index (not counted)
    functools.reduce(turn, pairs[1:], None)
    conv.close()
    shutil.rmtree(workdir, ignore_errors=True)


def worker_import(n: int) -> None:
    workdir = tempfile.mkdtemp(prefix="cw-instr-")
    conv = Conversations(
        make_engine(NOW, sources=False), SQLiteStore(os.path.join(workdir, "i.db"))
    )
    batch = fresh(synthetic_thread(n))
    functools.reduce(lambda _, msgs: import_conv(conv, "c", msgs, 1000), [batch], None)
    conv.wait_idle_sync(120)
    conv.close()
    shutil.rmtree(workdir, ignore_errors=True)


def callgrind(args: list[str]) -> int:
    """Instructions counted inside ``functools.reduce`` when this script runs ``args``."""
    with tempfile.TemporaryDirectory(prefix="cw-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = [
            "valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce",
            f"--callgrind-out-file={out}", sys.executable, __file__, *args,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"callgrind worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
        m = re.search(r"^(?:summary|totals):\s*(\d+)", Path(out).read_text(), re.M)
        if m is None:
            raise SystemExit("no instruction total in the callgrind output")
        return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000, help="history before the turns")
    ap.add_argument("--turns", type=int, default=40, help="counted turns per engine")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, *rest = a.worker
        if kind == "turns":
            template, turns, sources, recall = rest
            worker_turns(template, int(turns), sources == "1", recall == "1")
        else:
            worker_import(int(rest[0]))
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    console = Console()
    rev = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    console.print(
        f"bench_instructions — {platform.machine()}, Python {platform.python_version()}, "
        f"contextwright at {rev or '?'}"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cw-instr-tpl-") as tmp:
        template = os.path.join(tmp, "template.db")
        make_template(template, a.messages)
        table = Table(title=f"Instructions per turn at {a.messages:,} messages ({a.turns} turns)")
        for col in ("engine", "instructions per turn", "vs history only"):
            table.add_column(col, justify="left" if col == "engine" else "right")
        base = None
        for name, (sources, recall) in CONFIGS.items():
            total = callgrind(
                ["--worker", "turns", template, str(a.turns), str(int(sources)), str(int(recall))]
            )
            per = total / a.turns
            base = base or per
            table.add_row(name, f"{per / 1e6:.2f} M", f"{per / base:.2f}×")
            console.print(f"  {name}: {per / 1e6:.2f} M instructions per turn")
    total = callgrind(["--worker", "import", str(IMPORT_MESSAGES)])
    console.print(table)
    console.print(
        f"Conversations.import_sync: {total / IMPORT_MESSAGES / 1e3:.0f} k instructions per "
        f"message ({IMPORT_MESSAGES:,} messages, batches of 1,000)"
    )
    console.print(f"total run time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
