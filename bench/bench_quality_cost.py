"""What better recall costs: per-turn build time and memory at 10,000 messages, old vs new.

The goal: a build with the new retrieval takes at most 1.5x today's default on a
conversation of 10,000 messages, measured as a ratio in one run; and the memory the
recall index holds per conversation is reported.

**Workload.** One conversation of ``--messages`` (10,000) LoCoMo turns, read with the
eval's loader (`load_locomo`) from ``../shared/data/locomo``: the five conversations'
sessions one after the other, over and over until there are enough (2,760 turns a
pass, so the fourth pass is cut short), names and texts as they are, each repeat
shifted in time to start a day after the one before, so that dates only grow. It is
imported into a real SQLite file (WAL) as the CLI does (`import_sync`, summaries
waited for), and every contender gets its own copy. The questions are LoCoMo's
(every conversation's, in a seeded shuffled order) as new user messages that are not
stored (``store_message=False``, as ``contextwright eval locomo`` builds them), so the
conversation does not change between rounds.

**Contenders**, each at budgets 1,000 and 4,000 (``--budgets``), built as the eval
builds: budget N besides the system prompt and the question, a `Conversations` per
budget whose in-process tail is the recent section's share of N:

- ``qa old`` — today's default: `memory_qa_engine` with ``--old-weights`` (default:
  the engine's defaults) and no embedder;
- ``qa new`` — the same with ``--new-weights KNOB=V,...`` and ``--embedder``
  (``auto``, the default: whatever `memory_qa_engine` uses when not told, in the new
  side's code; ``none``; ``static``: the `StaticEmbedder` over ``wordllama``;
  ``minilm``); the embedder the engine ended up with is printed;
- ``stateful old`` / ``stateful new`` — `Conversations` with its default (sparing)
  recall and no other source, ``--stateful-new-weights`` laid over its ranker's
  weights on the new side (without it, and with one ``src``, the two are the same
  configuration and their ratio shows the noise).

Each side runs in its own worker process (this script with ``--worker``), with
``--old-src`` / ``--new-src`` on its path (default: the ``src`` beside this
script for both), so "old" can be the code of another checkout, e.g. main's, and not
only today's knobs on the new code. The parent sends one build at a time and the
worker times it, so the sides never run at once; in every round each contender does
one build per budget, the sides' order alternating, and the table prints per
contender p50 / p95 ms and per pair the median of the per-round ratios new / old with
their interquartile range (`_paired`), goal <= 1.5x for ``qa``.

Measured:

- **warm**: after ``prepare`` of the recall index (untimed, as a deployment does in the
  background after an import) and one untimed build per contender;
- **first build in a fresh engine**: a new engine and `Conversations` on the stored
  conversation (the tokenizer already loaded), its first build: reading the turns from
  SQLite (and embedding them all, with an embedder) happens inside it; ``--fresh-reps``
  times per side, alternating; whether the recall block made it in (the source's
  deadline is 2 s) is printed beside;
- **memory**: `tracemalloc` in a fresh engine, the traced bytes still held after
  ``prepare`` (the turn index), and after ``--mem-builds`` builds at every budget (the
  turns made lazily, packing costs, the engine's caches, the tails), with the vectors'
  ``nbytes``; an embedder's model is loaded first and reported apart (it is the
  engine's, not the conversation's). SQLite's page cache is C memory tracemalloc does
  not see. Measured with the lexical default: 5.3 MiB after ``prepare`` (about 550
  bytes a turn), 13 MiB after 30 builds at both budgets, 16.8 MiB after 200, where
  it levels off (the caches are bounded).

    python bench/bench_quality_cost.py                       # about 3 minutes on 2 busy cores
    python bench/bench_quality_cost.py --quick               # about 20 s
    python bench/bench_quality_cost.py --old-src ../main/src --new-weights KNOB=V,KNOB=V

The exit status is 1 if a build went over its window (counted from the rendered request).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = ROOT.parent / "shared" / "data" / "locomo"
TENANT, USER, CONV = "bench", "bench", "c"
PAIRS = ("qa", "stateful")
DAY = 86_400.0
AUTO = object()  # `memory_qa_engine`'s own default embedder: the argument is not passed


# -- the worker: one side's engines, in its own process ------------------------------------


def _knobs(raw: str | None, base: Any) -> Any:
    """``base`` (a `RankWeights`) with ``KNOB=V,KNOB=V`` laid over it; unknown knobs fail."""
    import dataclasses

    if not raw:
        return base
    fields = {f.name for f in dataclasses.fields(base)}
    changes: dict[str, Any] = {}
    for spec in raw.split(","):
        knob, sep, value = (s.strip() for s in spec.partition("="))
        if not sep or knob not in fields:
            raise SystemExit(f"weights {spec!r}: expected KNOB=V, KNOB one of {sorted(fields)}")
        kind = type(getattr(base, knob))
        if kind is bool:
            changes[knob] = value.lower() in ("1", "true")
        else:
            changes[knob] = kind(value)
    return dataclasses.replace(base, **changes)


def _embedder(name: str) -> Any:
    if name == "auto":
        return AUTO
    if name == "none":
        return None
    if name == "minilm":
        from contextwright.memory import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder()
    import contextwright

    where_ = ("contextwright", "contextwright.memory", "contextwright.llm",
              "contextwright.llm._embed_static")  # fmt: skip
    for where in where_:
        with contextlib.suppress(ImportError):
            mod = __import__(where, fromlist=["StaticEmbedder"])
            if hasattr(mod, "StaticEmbedder"):
                return mod.StaticEmbedder()
    raise SystemExit(f"--embedder static: no StaticEmbedder in {contextwright.__file__}")


class Side:
    """One side's contenders on its copy of the conversation (runs in the worker)."""

    def __init__(self, path: str, weights: str | None, stateful_weights: str | None,
                 embedder: str, budgets: Sequence[int]) -> None:  # fmt: skip
        import asyncio

        from contextwright import TiktokenCounter

        self.loop = asyncio.new_event_loop()
        self.path, self.budgets = path, list(budgets)
        self.weights = weights
        self.stateful_weights = stateful_weights
        self.embedder = _embedder(embedder)
        if self.embedder not in (None, AUTO):
            with contextlib.suppress(ImportError):
                import torch  # one query at a time: one thread (as the eval does)

                torch.set_num_threads(1)
        self.counter = TiktokenCounter("cl100k_base")
        self.counter.count("load the encoding: a process-wide cost, not the conversation's")
        self.encoder = TiktokenCounter("cl100k_base").encoding
        self.warm = self.run(self._open())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> dict[str, Any]:
        """Both contenders at every budget: {"qa": {budget: convs}, "stateful": ...}."""
        from contextwright import ContextEngine, Conversations
        from contextwright.budget._budget import Budget
        from contextwright.history._recall import MEMORY_QA_SHARES
        from contextwright.interfaces.eval._locomo import (
            SYSTEM_PROMPT,
            _recall_of,
            memory_qa_engine,
        )
        from contextwright.stores import AsyncStore, SQLiteStore

        store = SQLiteStore(self.path)
        kw = {} if self.embedder is AUTO else {"embedder": self.embedder}
        engine = memory_qa_engine(AsyncStore(store), counter=self.counter, **kw)
        if self.weights:  # over the engine's own defaults (they may depend on the embedder)
            ranker = _recall_of(engine).ranker
            ranker.weights = _knobs(self.weights, ranker.weights)
        recent = Budget(1, shares=MEMORY_QA_SHARES).weights()["recent"]
        qa = {b: Conversations(engine, store, recall=False, window_tokens=max(1, int(b * recent)))
              for b in self.budgets}  # fmt: skip
        stateful = {}
        for b in self.budgets:
            eng = ContextEngine(system_prompt=SYSTEM_PROMPT, counter=self.counter, budget=b)
            conv = Conversations(eng, store)
            if self.stateful_weights and conv._recall is not None:
                ranker = conv._recall.ranker
                ranker.weights = _knobs(self.stateful_weights, ranker.weights)
            stateful[b] = conv
        return {"qa": qa, "stateful": stateful, "engine": engine, "store": store}

    async def _close(self, opened: dict[str, Any]) -> None:
        for who in PAIRS:
            for conv in opened[who].values():
                await conv.aclose()

    async def _prepare(self, opened: dict[str, Any]) -> Any:
        from contextwright.interfaces.eval._locomo import _recall_of

        return await _recall_of(opened["engine"]).prepare(CONV, tenant=TENANT)

    async def _build(self, conv: Any, who: str, q: str, b: int) -> dict[str, Any]:
        from contextwright import Message, count_messages
        from contextwright.budget._budget import Budget
        from contextwright.history._recall import MEMORY_QA_SHARES
        from contextwright.interfaces.eval._locomo import SYSTEM_PROMPT, _content

        fixed = count_messages(self.counter, [Message.system(SYSTEM_PROMPT), Message.user(q)])
        kw: dict[str, Any] = {}
        if who == "qa":
            kw["budget"] = Budget(b + fixed, shares=MEMORY_QA_SHARES)
        t = time.perf_counter()
        built = await conv.build(CONV, q, tenant=TENANT, user=USER, store_message=False, **kw)
        ms = (time.perf_counter() - t) * 1e3
        request = built.render("openai")
        tokens = 3 + sum(3 + len(self.encoder.encode_ordinary(_content(m)))
                         + (1 + len(self.encoder.encode_ordinary(m["name"])) if m.get("name") else 0)
                         for m in request)  # fmt: skip
        window = b + fixed if who == "qa" else b
        recalled = any(blk.name == "recalled_turns" and blk.status in ("included", "truncated")
                       for blk in built.report.blocks)  # fmt: skip
        return {"ms": ms, "over": tokens > window, "recalled": recalled}

    def build(self, who: str, q: str, b: int) -> dict[str, Any]:
        return dict(self.run(self._build(self.warm[who][b], who, q, b)))

    def first(self, who: str, q: str, b: int) -> dict[str, Any]:
        """The first build of a fresh engine on the stored conversation."""

        async def go() -> dict[str, Any]:
            import asyncio

            from contextwright.interfaces.eval._locomo import _recall_of

            opened = await self._open()
            try:
                return await self._build(opened[who][b], who, q, b)
            finally:
                # a load (an embedding) the build stopped waiting for goes on: let it end
                # here, untimed, so that it takes no CPU from the builds that follow
                loads = list(_recall_of(opened["engine"])._loading.values())
                await asyncio.gather(*loads, return_exceptions=True)
                await self._close(opened)

        return dict(self.run(go()))

    def memory(self, questions: Sequence[str]) -> dict[str, Any]:
        """Traced bytes held by a fresh engine's recall after prepare, and after builds.

        The embedder's model is loaded (and traced) first, apart: it is the engine's,
        shared by every conversation, not the conversation's.
        """
        import gc
        import tracemalloc

        from contextwright.interfaces.eval._locomo import _recall_of

        out: dict[str, Any] = {}
        for who in PAIRS:
            opened = self.run(self._open())
            held: dict[str, Any] = {}
            embedder = _recall_of(opened["engine"]).ranker.embedder
            if who == "qa" and embedder is not None:
                gc.collect()
                tracemalloc.start()
                embedder.embed(["load the model: the engine's, not the conversation's"])
                gc.collect()
                held["model"] = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            if who == "qa":
                index = self.run(self._prepare(opened))
                gc.collect()
                held["turns"] = len(index)
                held["after_prepare"] = tracemalloc.get_traced_memory()[0] - base
                vectors = index.vectors
                held["vectors_nbytes"] = int(vectors.nbytes) if vectors is not None else 0
            for q in questions:
                for b in self.budgets:
                    self.run(self._build(opened[who][b], who, q, b))
            gc.collect()
            held["after_builds"] = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.stop()
            self.run(self._close(opened))
            out[who] = held
        return out


def worker(args: argparse.Namespace) -> int:
    """Answer the parent's commands, one JSON line each, on the real stdout."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout = sys.stderr  # anything else printed must not mix with the replies
    side = Side(args.worker, args.weights, args.stateful_weights, args.embedder, args.budget_list)
    side.run(side._prepare(side.warm))
    import dataclasses

    from contextwright.interfaces.eval._locomo import _recall_of

    ranker = _recall_of(side.warm["engine"]).ranker
    base = type(ranker.weights)()
    knobs = {f.name: getattr(ranker.weights, f.name) for f in dataclasses.fields(base)
             if getattr(ranker.weights, f.name) != getattr(base, f.name)}  # fmt: skip
    name = getattr(ranker.embedder, "name", None) or "none"
    reply.write(json.dumps({"embedder": name, "knobs": knobs}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "quit":
            break
        out = side.memory(cmd["questions"]) if op == "memory" else getattr(side, op)(**cmd)
        reply.write(json.dumps(out) + "\n")
    side.run(side._close(side.warm))
    return 0


# -- the parent: the workload, the rounds, the tables ---------------------------------------


def conversation(data: Path, n: int) -> tuple[list[Any], list[str]]:
    """``n`` messages: LoCoMo's conversations one after the other, repeated, dates growing."""
    from contextwright.interfaces.eval._locomo_data import load_locomo

    convs = [c for p in sorted(data.glob("*.json")) for c in load_locomo(p)]
    if not convs:
        raise SystemExit(f"no LoCoMo files in {data}")
    out: list[Any] = []
    end = 0.0
    rep = 0
    while len(out) < n:
        for c in convs:
            first = c.messages[0].created_at or 0.0
            shift = (end + DAY - first) if out else 0.0
            for i, m in enumerate(c.messages[: n - len(out)]):
                at = (m.created_at or first) + shift
                out.append(m.replace(id=f"{c.name}-{rep}-{i}", created_at=at))
            end = out[-1].created_at
        rep += 1
    return out, [item.question.text for c in convs for item in c.items]


def template(path: str, messages: Sequence[Any]) -> None:
    from contextwright import ContextEngine, Conversations, TiktokenCounter
    from contextwright.stores import SQLiteStore

    engine = ContextEngine(counter=TiktokenCounter("cl100k_base"), budget=8000)
    conv = Conversations(engine, SQLiteStore(path), recall=False)
    try:
        conv.import_sync(CONV, messages, tenant=TENANT, user=USER, batch_size=1000,
                         optimize_index=True)  # fmt: skip
        conv.wait_idle_sync(300)
    finally:
        conv.close()


class Worker:
    """A worker process for one side, spoken to over pipes."""

    def __init__(self, name: str, src: Path, path: str, args: argparse.Namespace,
                 weights: str | None, stateful: str | None, embedder: str) -> None:  # fmt: skip
        self.name = name
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(BENCH)])}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", path,
               "--embedder", embedder, "--budgets", args.budgets]  # fmt: skip
        if weights:
            cmd += ["--weights", weights]
        if stateful:
            cmd += ["--stateful-weights", stateful]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, bufsize=1)  # fmt: skip
        self.ask_ready()

    def ask_ready(self) -> None:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise SystemExit(f"{self.name} worker failed to start (its stderr is above)")
        ready = json.loads(line)
        self.embedder, self.knobs = ready["embedder"], ready["knobs"]

    def ask(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name} worker died during {op} (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            if self.proc.stdin:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, < 1 min")
    ap.add_argument("--messages", type=int, default=10_000, help="conversation length")
    ap.add_argument("--budgets", default="1000,4000", help="comma-separated token budgets")
    ap.add_argument("--rounds", type=int, help="timed warm rounds (full 200, quick 30)")
    ap.add_argument("--fresh-reps", type=int, help="fresh-engine first builds per side (full 5, quick 2)")  # fmt: skip
    ap.add_argument("--mem-builds", type=int, help="questions built before the memory reading (full 30, quick 5)")  # fmt: skip
    ap.add_argument("--old-weights", help="KNOB=V,... over the old engine's default knobs")
    ap.add_argument(
        "--new-weights",
        help="KNOB=V,... over the new engine's default knobs (they may depend on the embedder)",
    )
    ap.add_argument("--stateful-new-weights", help="KNOB=V,... over the stateful default's ranker weights, new side only")  # fmt: skip
    ap.add_argument("--embedder", choices=["auto", "none", "static", "minilm"], default="auto",
                    help="the new side's embedder (auto: memory_qa_engine's default, not passed; "
                         "the old side has none)")  # fmt: skip
    ap.add_argument("--old-src", type=Path, default=ROOT / "src", help="the old side's src/")
    ap.add_argument("--new-src", type=Path, default=ROOT / "src", help="the new side's src/")
    ap.add_argument("--data", type=Path, default=DATA, help="LoCoMo *.json files")
    ap.add_argument("--seed", type=int, default=7, help="order of the questions")
    ap.add_argument("--json", type=Path, help="write the raw samples here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    ap.add_argument("--stateful-weights", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.budget_list = [int(b) for b in args.budgets.split(",") if b.strip()]
    if args.worker:
        return worker(args)
    return parent(args)


def parent(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from _paired import Goal, goal_table, paired
    from bench_history import LoadSampler, Workdir, machine

    q = args.quick
    rounds = args.rounds or (30 if q else 200)
    reps = args.fresh_reps or (2 if q else 5)
    mem_builds = args.mem_builds or (5 if q else 30)
    console = Console(width=max(160, Console().width))
    info = machine()
    console.print(
        f"[bold]bench_quality_cost[/] ({'quick' if q else 'full'}) - {info['cpu']}, "
        f"{info['nproc']} cores, Python {info['python']}; load average "
        f"{info['loadavg_at_start'][0]:.2f}\n  old: {args.old_src} weights "
        f"{args.old_weights or 'defaults'}, no embedder\n  new: {args.new_src} weights "
        f"{args.new_weights or 'defaults'}, embedder {args.embedder}; stateful new "
        f"{args.stateful_new_weights or '(as old)'}"
    )
    started = time.perf_counter()
    load = LoadSampler()
    wd = Workdir()
    workers: dict[str, Worker] = {}
    try:
        messages, questions = conversation(args.data, args.messages)
        random.Random(args.seed).shuffle(questions)
        t = time.perf_counter()
        tpl = wd.db("template")
        template(tpl, messages)
        console.print(f"  {len(messages):,} messages imported in {time.perf_counter() - t:.1f} s; "
                      f"{len(questions)} questions")  # fmt: skip
        for name, src, w, sw, emb in (
            ("old", args.old_src, args.old_weights, None, "none"),
            ("new", args.new_src, args.new_weights, args.stateful_new_weights, args.embedder),
        ):
            path = wd.db(name)
            shutil.copyfile(tpl, path)
            t = time.perf_counter()
            workers[name] = Worker(name, src, path, args, w, sw, emb)
            console.print(
                f"  {name} worker up, index prepared, in {time.perf_counter() - t:.1f} s; "
                f"qa embedder: {workers[name].embedder}, knobs off RankWeights(): "
                f"{workers[name].knobs or 'none'}"
            )
        sides = ("old", "new")
        keys = [(who, b) for who in PAIRS for b in args.budget_list]
        ms: dict[str, dict[tuple[str, int], list[float]]] = {
            s: {k: [] for k in keys} for s in sides
        }
        over = 0
        for r in range(rounds + 1):  # round 0 warms up, untimed
            q_text = questions[r % len(questions)]
            for who, b in keys:
                for s in sides if r % 2 else sides[::-1]:
                    got = workers[s].ask("build", who=who, q=q_text, b=b)
                    over += got["over"]
                    if r:
                        ms[s][(who, b)].append(got["ms"])
        first: dict[str, dict[tuple[str, int], list[dict[str, Any]]]] = {
            s: {k: [] for k in keys} for s in sides
        }
        for rep in range(reps):
            q_text = questions[(rounds + 1 + rep) % len(questions)]
            for who, b in keys:
                for s in sides if rep % 2 else sides[::-1]:
                    got = workers[s].ask("first", who=who, q=q_text, b=b)
                    over += got["over"]
                    first[s][(who, b)].append(got)
        mem = {s: workers[s].ask("memory", questions=questions[:mem_builds]) for s in sides}
    finally:
        for w in workers.values():
            w.close()
        wd.cleanup()
    ld = load.stop()

    tab = Table(title=f"Per-turn build at {len(messages):,} messages, ms (cl100k; {rounds} "
                "interleaved rounds, warm; first build: fresh engine, median of reps)")  # fmt: skip
    for col in ("engine", "budget", "old p50", "old p95", "new p50", "new p95",
                "first old", "first new", "first new/old", "recall in first (old · new)"):  # fmt: skip
        tab.add_column(col, justify="left" if col == "engine" else "right")
    goals = []
    for who, b in keys:
        o, n = ms["old"][(who, b)], ms["new"][(who, b)]
        fo, fn = first["old"][(who, b)], first["new"][(who, b)]
        tab.add_row(
            who, f"{b:,}", f"{statistics.median(o):.1f}", f"{pct(o, 0.95):.1f}",
            f"{statistics.median(n):.1f}", f"{pct(n, 0.95):.1f}",
            f"{statistics.median(f['ms'] for f in fo):,.0f}",
            f"{statistics.median(f['ms'] for f in fn):,.0f}",
            f"{paired([f['ms'] for f in fn], [f['ms'] for f in fo]).median:.2f}x",
            f"{sum(f['recalled'] for f in fo)}/{len(fo)} · {sum(f['recalled'] for f in fn)}/{len(fn)}",
        )  # fmt: skip
        note = "memory_qa_engine" if who == "qa" else "Conversations default recall"
        goals.append(Goal(f"{who} new / old, warm @ {b:,}", 1.5, paired(n, o), at_most=True,
                          note=note))  # fmt: skip
    console.print(tab)
    goal_table(console, "Warm builds, ratio new / old per round (goal <= 1.5x)", goals,
               "medians (new / old)")  # fmt: skip
    mt = Table(title=f"Memory held per conversation ({len(messages):,} messages; tracemalloc, "
               f"fresh engine; after {mem_builds} builds at each budget)")  # fmt: skip
    for col in ("engine", "side", "turns", "after prepare", "after builds", "vectors nbytes",
                "model (per engine)"):  # fmt: skip
        mt.add_column(col, justify="left" if col in ("engine", "side") else "right")
    for who in PAIRS:
        for s in ("old", "new"):
            h = mem[s][who]
            mt.add_row(
                who, s, f"{h.get('turns', 0):,}" if "turns" in h else "-",
                f"{h['after_prepare'] / 2**20:.1f} MiB" if "after_prepare" in h else "-",
                f"{h['after_builds'] / 2**20:.1f} MiB",
                f"{h.get('vectors_nbytes', 0) / 2**20:.1f} MiB" if who == "qa" else "-",
                f"{h['model'] / 2**20:.1f} MiB" if "model" in h else "-",
            )  # fmt: skip
    console.print(mt)
    console.print(
        f"builds over their window: {over}; run time {time.perf_counter() - started:.0f} s; "
        f"1-min load average during the run: min {ld['min']:.2f}, mean {ld['mean']:.2f}, "
        f"max {ld['max']:.2f} on {info['nproc']} cores"
    )
    if args.json:
        doc = {
            "machine": info, "load": ld, "args": {k: str(v) for k, v in vars(args).items()},
            "warm_ms": {s: {f"{w}@{b}": v for (w, b), v in d.items()} for s, d in ms.items()},
            "first": {s: {f"{w}@{b}": v for (w, b), v in d.items()} for s, d in first.items()},
            "memory": mem,
            "ratios": [{"goal": g.name, "ratio": g.ratio.median if g.ratio else None,
                        "p25": g.ratio.p25 if g.ratio else None,
                        "p75": g.ratio.p75 if g.ratio else None} for g in goals],
        }  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
