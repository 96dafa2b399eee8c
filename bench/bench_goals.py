"""The performance goals as ratios, measured side by side in one run: one table, PASS / MISS.

Every goal is a ratio against a peer or against contextwright itself, measured in
rounds: in each round every contender does one turn, in an order that rotates from
round to round, so load on the (shared) machine hits all of them alike. The table
prints, per goal, the median of the per-round ratios, their interquartile range and
the two sides' medians.

Workloads (cl100k, budget 8,000, as in ``bench_history.py``): LoCoMo conversation 43
(680 messages, read from ``../shared/data/locomo`` when present, else a synthetic
thread of 680) and the seeded synthetic thread of ``bench_history.py`` at 1,000 /
10,000 / 100,000 messages. Per size, one template SQLite file (WAL, in a temporary
directory) is imported as the CLI does and built once; two copies of it serve:

- **history only**: `Conversations` with ``recall=False`` and no context sources
  (system prompt, summary, window: what the peers do);
- **default**: the same with recall of old turns (on by default).

A turn: ``build_sync`` of a new user message (timed; it also stores the message),
then the reply appended and background summaries waited for (untimed). The peers get
the same turns: LangChain ``trim_messages`` (strategy last, start on human, memoised
cl100k counts) on the growing message list with the new question (timed), and
LlamaIndex ``Memory.get`` after the question was put (the put untimed; Memory trims
at put time), the reply put afterwards (untimed).

Also: the **first build of a stored conversation in a fresh process** (a real
subprocess on a copy of the template, the tokenizer loaded before the clock starts)
against the warm builds that follow it in that process; **single appends** onto the
conversation of 10,000 (`Conversations.append_sync` with recall on, vs
``Memory.put``), and **bulk import** (``import_sync`` in batches of 1,000 into a fresh
file, vs ``Memory.put_messages`` in batches of 50 into a fresh Memory).

    python bench/bench_goals.py              # full: about 10 minutes on 2 busy cores
    python bench/bench_goals.py --quick      # 680 / 1,000 / 10,000, fewer rounds: < 2 min

The exit status is 1 if any contextwright build went over its budget (not on MISS).
"""

# No `from __future__ import annotations`: LangChain's trim_messages reads the
# counter's first parameter annotation and needs the real `BaseMessage` class.

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _paired import Goal, goal_table, paired, rotate
from _peers import ENC, VERIFY, langchain_counters, to_langchain, to_llamaindex
from bench_build import LOCOMO, _locomo_history
from bench_history import (
    BUDGET,
    REPLY_PRIMING,
    STATE,
    SYSTEM_PROMPT,
    TENANT,
    USER,
    LoadSampler,
    Workdir,
    fresh,
    machine,
    make_engine,
    synthetic_thread,
    turn_messages,
)
from contextwright import Conversations, Message, TiktokenCounter, count_messages
from contextwright.stores import SQLiteStore

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=ResourceWarning)

FULL_SIZES = (680, 1000, 10_000, 100_000)
QUICK_SIZES = (680, 1000, 10_000)
CONTENDERS = ("history", "default", "trim", "memget")
LI_BATCH = 50


# -- one size: the template, the four contenders -------------------------------------------


@dataclass
class Lane:
    """One history size: its thread, template file and the four contenders' state."""

    size: int
    label: str
    thread: list[Message]
    now: float
    synthetic: bool
    template: str = ""
    first_ms: float = 0.0
    convs: dict[str, Conversations] = field(default_factory=dict)
    lc_history: list[Any] = field(default_factory=list)
    lc_count: Any = None
    mem: Any = None
    ms: dict[str, list[float]] = field(default_factory=dict)
    worst_tokens: int = 0
    over_budget: int = 0


def make_lane(
    wd: Workdir, size: int, synthetic: list[Message], locomo: bool, pair: tuple[str, Message]
) -> Lane:
    from_locomo = size == 680 and locomo and LOCOMO.exists()
    if from_locomo:
        thread, last = _locomo_history(LOCOMO)
        label = "LoCoMo 43 (680)"
    else:
        thread = synthetic[:size]
        last = thread[-1].created_at or 0.0
        label = f"synthetic {size:,}"
    lane = Lane(size, label, thread, last + 600, not from_locomo)
    lane.template = wd.db(f"template-{size}")
    conv = Conversations(make_engine(lane.now, sources=False), SQLiteStore(lane.template))
    conv.import_sync(
        "c", fresh(thread), tenant=TENANT, user=USER, batch_size=1000, optimize_index=True
    )
    t = time.perf_counter()
    conv.build_sync("c", pair[0], tenant=TENANT, user=USER, state=STATE)
    lane.first_ms = (time.perf_counter() - t) * 1e3
    conv.append_sync("c", [pair[1].replace()], tenant=TENANT, user=USER)
    conv.wait_idle_sync(300)
    conv.close()
    for name, recall in (("history", False), ("default", True)):
        path = wd.db(f"{name}-{size}")
        shutil.copyfile(lane.template, path)
        engine = make_engine(lane.now, sources=False)
        lane.convs[name] = Conversations(engine, SQLiteStore(path), recall=recall)
    # the peers hold the same conversation, including the template's first turn
    from langchain_core.messages import AIMessage, HumanMessage
    from llama_index.core.memory import Memory as LIMemory

    lane.lc_history = to_langchain(thread, pair[0], SYSTEM_PROMPT)
    lane.lc_history[-1] = HumanMessage(pair[0], id="first-question")
    lane.lc_history.append(AIMessage(pair[1].text, id=pair[1].id))
    _, lane.lc_count, _ = langchain_counters()
    lane.mem = LIMemory.from_defaults(
        session_id=f"s{size}", token_limit=BUDGET, tokenizer_fn=ENC.encode_ordinary
    )
    li = to_llamaindex([*thread, Message.user(pair[0]), pair[1]])
    for i in range(0, len(li), LI_BATCH):
        lane.mem.put_messages(li[i : i + LI_BATCH])
    lane.ms = {c: [] for c in CONTENDERS}
    return lane


def turn(lane: Lane, who: str, q: str, reply: Message, i: int) -> float:
    """One contender's turn on ``lane``; milliseconds of its timed part."""
    if who in ("history", "default"):
        conv = lane.convs[who]
        t = time.perf_counter()
        built = conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
        dt = time.perf_counter() - t
        used = count_messages(VERIFY, built.messages)
        lane.worst_tokens = max(lane.worst_tokens, used)
        lane.over_budget += used > BUDGET
        conv.append_sync("c", [reply.replace()], tenant=TENANT, user=USER)
        conv.wait_idle_sync(120)
        return dt * 1e3
    if who == "trim":
        from langchain_core.messages import AIMessage, HumanMessage, trim_messages

        question = HumanMessage(q, id=f"q{i}")
        msgs = [*lane.lc_history, question]
        t = time.perf_counter()
        trim_messages(
            msgs,
            max_tokens=BUDGET - REPLY_PRIMING,
            token_counter=lane.lc_count,
            strategy="last",
            start_on="human",
            include_system=True,
            allow_partial=False,
        )
        dt = time.perf_counter() - t
        lane.lc_history += [question, AIMessage(reply.text, id=reply.id)]
        return dt * 1e3
    from llama_index.core.base.llms.types import ChatMessage

    lane.mem.put(ChatMessage(role="user", content=q))
    t = time.perf_counter()
    lane.mem.get()
    dt = time.perf_counter() - t
    lane.mem.put(ChatMessage(role="assistant", content=reply.text))
    return dt * 1e3


def build_rounds(lanes: Sequence[Lane], rounds: int, console: Console) -> None:
    """Round 0 warms every contender up (the copies' first build reloads the tail); then
    ``rounds`` timed rounds, all sizes in each, the contenders' order rotating."""
    pairs = turn_messages(rounds + 1, seed=17)
    started = time.perf_counter()
    for r, (q, reply) in enumerate(pairs):
        for lane in lanes:
            for who in rotate(CONTENDERS, r):
                ms = turn(lane, who, q, reply, r)
                if r:
                    lane.ms[who].append(ms)
        if r and r % 10 == 0:
            console.print(f"  build round {r}/{rounds}, {time.perf_counter() - started:.0f} s")


# -- first build in a fresh process ---------------------------------------------------------


def child_first_build(path: str, now: float, warm: int) -> None:
    """In the subprocess: the first build of the stored conversation, then warm builds."""
    counter = TiktokenCounter("cl100k_base")
    counter.count("load the encoding: a process-wide cost, not the conversation's")
    conv = Conversations(make_engine(now, counter, sources=False), SQLiteStore(path))
    pairs = turn_messages(warm + 1, seed=23)
    times = []
    for q, reply in pairs:
        t = time.perf_counter()
        conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
        times.append((time.perf_counter() - t) * 1e3)
        conv.append_sync("c", [reply.replace()], tenant=TENANT, user=USER)
        conv.wait_idle_sync(120)
    conv.close()
    print(json.dumps({"first_ms": times[0], "warm_ms": times[1:]}))


def first_builds(wd: Workdir, lane: Lane, reps: int, warm: int) -> tuple[list[float], list[float]]:
    """``reps`` fresh processes, each on its own copy of the template: (first, warm median)."""
    firsts, warms = [], []
    for _ in range(reps):
        path = wd.db(f"fresh-{lane.size}")
        shutil.copyfile(lane.template, path)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-first-build", path]
        cmd += ["--now", repr(lane.now), "--warm", str(warm)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if out.returncode:
            raise RuntimeError(f"first-build child failed:\n{out.stderr[-3000:]}")
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        firsts.append(doc["first_ms"])
        warms.append(statistics.median(doc["warm_ms"]))
    return firsts, warms


# -- append and import ----------------------------------------------------------------------


def appends(lane: Lane, more: Sequence[Message]) -> tuple[list[float], list[float]]:
    """Single appends onto ``lane``'s default conversation vs ``Memory.put``, paired."""
    cw, li = [], []
    for r, m in enumerate(fresh(more)):
        li_m = to_llamaindex([m])[0]
        for who in rotate(("cw", "li"), r):
            t = time.perf_counter()
            if who == "cw":
                lane.convs["default"].append_sync("c", [m], tenant=TENANT, user=USER)
                cw.append((time.perf_counter() - t) * 1e3)
            else:
                lane.mem.put(li_m)
                li.append((time.perf_counter() - t) * 1e3)
    return cw, li


def imports(
    wd: Workdir, thread: Sequence[Message], rounds: int, now: float
) -> tuple[list[float], list[float]]:
    """Bulk import into a fresh file / a fresh Memory, seconds, paired per round."""
    from llama_index.core.memory import Memory as LIMemory

    cw, li = [], []
    for r in range(rounds):
        for who in rotate(("cw", "li"), r):
            gc.collect()
            if who == "cw":
                msgs = fresh(thread)
                conv = Conversations(make_engine(now, sources=False), SQLiteStore(wd.db("imp")))
                t = time.perf_counter()
                conv.import_sync("c", msgs, tenant=TENANT, user=USER, batch_size=1000)
                cw.append(time.perf_counter() - t)
                conv.wait_idle_sync(300)  # its background summary, untimed
                conv.close()
            else:
                li_msgs = to_llamaindex(thread)
                mem = LIMemory.from_defaults(
                    session_id=f"imp{r}", token_limit=BUDGET, tokenizer_fn=ENC.encode_ordinary
                )
                t = time.perf_counter()
                for i in range(0, len(li_msgs), LI_BATCH):
                    mem.put_messages(li_msgs[i : i + LI_BATCH])
                li.append(time.perf_counter() - t)
    return cw, li


# -- the report -----------------------------------------------------------------------------


def size_label(n: int) -> str:
    return "680 (LoCoMo 43)" if n == 680 else f"{n:,}"


def build_goals(lanes: Sequence[Lane]) -> list[Goal]:
    by = {lane.size: lane for lane in lanes}
    goals: list[Goal] = []

    def ratio(n: int, slow: str, fast: str) -> Any:
        lane = by.get(n)
        return paired(lane.ms[slow], lane.ms[fast]) if lane else None

    sizes = sorted(set(FULL_SIZES) | set(by))
    for n in sizes:
        goals.append(
            Goal(
                f"history only vs memoised trim_messages @ {size_label(n)}",
                2.0,
                ratio(n, "trim", "history"),
            )
        )
    for n, target in ((680, 1.5), (10_000, 5.0)):
        goals.append(
            Goal(
                f"default (history + recall) vs memoised trim_messages @ {size_label(n)}",
                target,
                ratio(n, "trim", "default"),
            )
        )
    for n in sizes:
        goals.append(
            Goal(
                f"default vs LlamaIndex Memory.get @ {size_label(n)}",
                3.0,
                ratio(n, "memget", "default"),
            )
        )
    small = min((n for n in by if n >= 1000), default=min(by, default=0))
    large = max(by, default=0)
    for who in ("default", "history"):
        for a, b in {(1000, 100_000), (small, large)}:
            r = paired(by[b].ms[who], by[a].ms[who]) if a in by and b in by and a < b else None
            if r is None and (a, b) != (1000, 100_000):
                continue
            goals.append(Goal(f"growth {a:,} -> {b:,}, {who}", 1.3, r, at_most=True))
    return goals


def sizes_table(console: Console, lanes: Sequence[Lane]) -> None:
    tab = Table(
        title=f"Per-turn build, medians in ms (cl100k, budget {BUDGET:,}), interleaved rounds"
    )
    for col in (
        "history",
        "rounds",
        "cw history only",
        "cw default",
        "trim (memo)",
        "Memory.get",
        "first build",
        "check",
    ):
        tab.add_column(col, justify="left" if col in ("history", "check") else "right")
    for lane in lanes:
        med = {k: statistics.median(v) for k, v in lane.ms.items()}
        tab.add_row(
            lane.label,
            str(len(lane.ms["history"])),
            *(f"{med[k]:.2f}" for k in CONTENDERS),
            f"{lane.first_ms:,.0f}",
            ("ok" if not lane.over_budget else f"OVER x{lane.over_budget}")
            + f" (<= {lane.worst_tokens:,} tok)",
        )
    console.print(tab)
    console.print(
        "  first build: the first after the import, in the importing process (nothing "
        "summarised yet, so it compacts inline). cw builds include storing the new message; "
        "the peers' times do not include their puts."
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="680 / 1k / 10k and fewer rounds")
    ap.add_argument("--sizes", help="comma-separated history sizes (default: by mode)")
    ap.add_argument("--rounds", type=int, help="timed build rounds (full 100, quick 40)")
    ap.add_argument("--first-sizes", help="sizes for the fresh-process build (10000,100000)")
    ap.add_argument("--first-reps", type=int, help="fresh processes per size (full 3, quick 2)")
    ap.add_argument("--warm", type=int, help="warm builds in each fresh process (full 20)")
    ap.add_argument("--appends", type=int, help="single appends (full 500, quick 200)")
    ap.add_argument("--append-size", type=int, default=10_000, help="conversation appended to")
    ap.add_argument("--import-n", type=int, help="messages per import (full 10,000, quick 3,000)")
    ap.add_argument("--import-rounds", type=int, help="imports per side (full 3, quick 2)")
    ap.add_argument("--no-locomo", action="store_true", help="synthetic 680 instead of LoCoMo")
    ap.add_argument("--json", type=Path, help="write the raw samples here")
    ap.add_argument("--child-first-build", help=argparse.SUPPRESS)
    ap.add_argument("--now", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_first_build:
        child_first_build(args.child_first_build, args.now, args.warm or 20)
        return 0
    q = args.quick
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else list(QUICK_SIZES if q else FULL_SIZES)
    )
    rounds = args.rounds or (40 if q else 100)
    first_sizes = (
        [int(s) for s in args.first_sizes.split(",")] if args.first_sizes else [10_000, 100_000]
    )
    first_reps = args.first_reps or (2 if q else 3)
    warm = args.warm or (8 if q else 20)
    n_appends = args.appends or (200 if q else 500)
    import_n = args.import_n or (3000 if q else 10_000)
    import_rounds = args.import_rounds or (2 if q else 3)

    console = Console(width=max(200, Console().width))
    info = machine()
    load = LoadSampler()
    console.print(
        f"[bold]bench_goals[/] ({'quick' if q else 'full'}) - {info['cpu']}, {info['nproc']} cores, "
        f"Python {info['python']}, SQLite {info['versions']['sqlite']}; contextwright from "
        f"{info['contextwright_src']} ({info['git']}); load average {info['loadavg_at_start'][0]:.2f}"
    )
    started = time.perf_counter()
    wd = Workdir()
    lanes: list[Lane] = []
    try:
        synthetic = synthetic_thread(max([*sizes, import_n, args.append_size]) + n_appends)
        gc.collect()
        gc.freeze()  # the fixture is the harness's: keep full collections from rescanning it
        pairs0 = turn_messages(1, seed=3)[0]
        for n in sizes:
            t = time.perf_counter()
            lanes.append(make_lane(wd, n, synthetic, not args.no_locomo, pairs0))
            console.print(
                f"  {lanes[-1].label}: template + peers set up in {time.perf_counter() - t:.1f} s"
            )
        build_rounds(lanes, rounds, console)
        goals = build_goals(lanes)

        by = {lane.size: lane for lane in lanes}
        fresh_samples: dict[int, tuple[list[float], list[float]]] = {}
        for n in sorted(set(first_sizes) | {10_000, 100_000}):
            r = None
            if n in by and n in first_sizes:
                t = time.perf_counter()
                fresh_samples[n] = first_builds(wd, by[n], first_reps, warm)
                r = paired(*fresh_samples[n])
                console.print(f"  fresh-process builds @ {n:,}: {time.perf_counter() - t:.1f} s")
            goals.append(
                Goal(
                    f"first build in a fresh process vs warm @ {n:,}",
                    10.0,
                    r,
                    at_most=True,
                    note="first / warm median in the same subprocess",
                )
            )

        base = max((n for n in by if n <= args.append_size), default=min(by))
        # messages the conversation does not hold yet (the synthetic thread goes on)
        start = base if by[base].synthetic else 0
        more = synthetic[start : start + n_appends]
        cw_app, li_app = appends(by[base], more)
        goals.append(
            Goal(
                f"append vs Memory.put, onto {base:,}",
                20.0,
                paired(li_app, cw_app),
                note="append_sync, recall on; one message per call",
            )
        )
        cw_imp, li_imp = imports(wd, synthetic[:import_n], import_rounds, by[base].now)
        goals.append(
            Goal(
                f"import of {import_n:,} vs Memory.put_messages",
                10.0,
                paired(li_imp, cw_imp),
                unit="s",
                note="import_sync batches of 1,000 vs put_messages batches of 50",
            )
        )
        for lane in lanes:
            for conv in lane.convs.values():
                conv.close()
            lane.convs.clear()
        ld = load.stop()
        sizes_table(console, lanes)
        goal_table(
            console,
            "Goals (ratio = peer / contextwright, or slow / fast)",
            goals,
            "medians (num / den)",
        )
        console.print(
            f"run time {time.perf_counter() - started:.0f} s; 1-min load average during the run: "
            f"min {ld['min']:.2f}, mean {ld['mean']:.2f}, max {ld['max']:.2f} on {info['nproc']} "
            "cores (a shared machine: the ratios are paired per round, the medians are not)"
        )
        if args.json:
            doc = {
                "machine": info,
                "load": ld,
                "lanes": [{"size": lane.size, "label": lane.label, "first_ms": lane.first_ms, "ms": lane.ms} for lane in lanes],
                "fresh_process": {str(k): {"first_ms": v[0], "warm_median_ms": v[1]} for k, v in fresh_samples.items()},
                "append_ms": {"cw": cw_app, "llamaindex": li_app},
                "import_s": {"cw": cw_imp, "llamaindex": li_imp},
                "goals": [
                    {"goal": g.name, "target": g.target, "at_most": g.at_most, "verdict": g.verdict,
                     "ratio": g.ratio.median if g.ratio else None}
                    for g in goals
                ],
            }  # fmt: skip
            args.json.write_text(json.dumps(doc, indent=1))
        return 1 if any(lane.over_budget for lane in lanes) else 0
    finally:
        for lane in lanes:
            for conv in lane.convs.values():
                conv.close()
        wd.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
