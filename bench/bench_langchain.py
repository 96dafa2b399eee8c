"""Per turn: `ContextwrightMiddleware` vs `trim_messages` + `SummarizationMiddleware`, side by side (#22).

One process, the same conversations for both. What is timed is what each side does
to a model call's input — not the model:

* **contextwright**: `ContextwrightMiddleware.wrap_model_call` with a handler that
  returns a canned answer at once: it builds for the new user message from the
  stored conversation (SQLite file, cl100k, the stateful default: window, summary,
  recall), hands over the built messages and stores the question and the answer
  (one transaction). The request and the answer are made before the timed call,
  as the peer's input is. The conversation was imported beforehand (untimed),
  background summaries run between turns (untimed, as between real turns).
* **LangChain, history passed whole** (the goal's reference): the agent's state
  holds the whole history every turn (as a thread re-read from a chat history
  each turn, or a checkpointed state no summary rewrote), and each model call runs
  `SummarizationMiddleware.before_model` on it and `trim_messages` (strategy
  last, start on human) on what that returns.
* **LangChain, checkpointed**: the same two, but the summary's rewrite of the state
  is kept (``RemoveMessage(REMOVE_ALL)`` + summary + kept turns), as LangGraph's
  checkpointer keeps it; after the first turn the state is small, so its turns are
  cheap, and everything the summary dropped is gone for good. Median and mean
  (the mean carries the first, collapsing turn) are printed, no goal.

`SummarizationMiddleware` runs offline: its model is a fake chat model that returns a
fixed-length placeholder summary (about 120 cl100k tokens), so its cost is the
middleware's own (counting, cutting, the call's LangChain machinery) plus a
near-free model call; a real summary call would add seconds. Its trigger is the
budget, it keeps 80% of the budget; both it and `trim_messages` count with cl100k in
contextwright's accounting, memoised per message (the peers' best case).

Turns are paired: each round runs one turn of every contender, in rotating order;
the table gives the median of the per-round ratios (goal: ≥ 5x at 10,000 messages).

LoCoMo evidence recall (``../shared/data/locomo``, CC BY-NC 4.0, read in place): for
every question with evidence, every side gets the whole conversation and the
question at budgets 1,000 / 2,000 / 4,000 / 8,000 (system prompt and question
included: ``contextwright eval locomo`` gives the question and its system prompt on
top, a little more), and an evidence turn counts as recalled when its text is in
what the model receives (as the eval scores it). contextwright runs the
middleware's own path (`Bridge.prepare` with the question as the new message; no
answer is recorded, so the question is never stored) in two configurations: the
stateful default engine (window 55 %, summary, a sparing recall with a tenth of the
budget: an agent's default) and `memory_qa_engine` over the same kind of store, as
``contextwright eval locomo`` measures it (recall gets 92 % of the budget: for
assistants that answer questions about a long past). LangChain: the placeholder
summary carries nothing, so its recall is what the kept and trimmed turns hold; a
real LLM summary could add some. Goal: higher at every budget, in both
configurations. The median time per question of each is printed too.

Run: ``python bench/bench_langchain.py [--quick] [--sizes 1000,10000] [--json out.json]``
(about 3 minutes on 2 cores; ``--quick``: 1 LoCoMo file, fewer turns, under a minute).
"""

# No `from __future__ import annotations`: trim_messages reads the counter's annotation.

import argparse
import gc
import itertools
import json
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _paired import Goal, goal_table, paired, rotate
from _peers import VERIFY, langchain_counters, lc_tokens
from bench_history import synthetic_thread, turn_messages
from contextwright import ContextEngine, Conversations, TiktokenCounter, count_messages
from contextwright.interfaces.eval._locomo import SYSTEM_PROMPT as QA_PROMPT
from contextwright.interfaces.eval._locomo import _norm, memory_qa_engine
from contextwright.interfaces.eval._locomo_data import load_locomo
from contextwright.model._blocks import unescape_content
from contextwright.stores import SQLiteBackend, SQLiteStore

warnings.filterwarnings("ignore", category=DeprecationWarning)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
SYSTEM = "You are a careful assistant. Answer from the conversation; say when you do not know."
REPLY_PRIMING = 3
SUMMARY = "Summary of the conversation so far: " + " ".join(
    f"point {i} was discussed and settled;" for i in range(20)
)
Side = Callable[[Any], tuple[list[Any], float]]


def lc_modules() -> dict[str, Any]:
    """The LangChain names the benchmark uses (imported when it runs, not at import)."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages

    from contextwright.integrations import langchain as cwlc

    return {
        "SummarizationMiddleware": SummarizationMiddleware, "ModelRequest": ModelRequest,
        "ModelResponse": ModelResponse, "GenericFakeChatModel": GenericFakeChatModel,
        "AIMessage": AIMessage, "HumanMessage": HumanMessage, "SystemMessage": SystemMessage,
        "trim_messages": trim_messages, "cwlc": cwlc,
    }  # fmt: skip


class Peer:
    """`SummarizationMiddleware` (fixed-length fake summary) then `trim_messages`, at one budget."""

    def __init__(self, budget: int, system: str) -> None:
        lc = lc_modules()
        _, self.count, _ = langchain_counters()
        self.system = lc["SystemMessage"](system, id="system")
        fake = lc["GenericFakeChatModel"](messages=itertools.repeat(lc["AIMessage"](SUMMARY)))

        def list_count(messages: Any) -> int:
            return sum(self.count(m) for m in messages)

        self.room = budget - REPLY_PRIMING - self.count(self.system)
        self.summarize = lc["SummarizationMiddleware"](
            fake, trigger=("tokens", self.room), keep=("tokens", int(self.room * 0.8)),
            token_counter=list_count,
        )  # fmt: skip
        self.trim = lc["trim_messages"]

    def input(self, state: list[Any]) -> tuple[list[Any], list[Any]]:
        """The model's input for ``state``, and the state after the call (rewritten or not)."""
        update = self.summarize.before_model({"messages": state}, None)
        if update is not None:
            state = list(update["messages"][1:])  # [RemoveMessage(all), summary, *kept]
        kept = self.trim(
            state, max_tokens=self.room, token_counter=self.count, strategy="last",
            start_on="human", allow_partial=False,
        )  # fmt: skip
        return [self.system, *kept], state

    def tokens(self, model_input: Sequence[Any]) -> int:
        return REPLY_PRIMING + sum(lc_tokens(m) for m in model_input)


class Ours:
    """`ContextwrightMiddleware.wrap_model_call` on a stored conversation."""

    def __init__(self, convs: Conversations, conversation: str) -> None:
        lc = lc_modules()
        self.lc, self.convs = lc, convs
        self.mw = lc["cwlc"].ContextwrightMiddleware(convs, conversation, count_tools=False)
        self.model = lc["GenericFakeChatModel"](messages=iter(()))

    def call(self, question: str, answer: str) -> tuple[Callable[[], Any], list[Any]]:
        """One model call through the middleware, ready to run, and what the model will be handed.

        The request and the model's answer are made here, outside the timed call, as
        the peer's input is.
        """
        lc = self.lc
        request = lc["ModelRequest"](model=self.model, messages=[lc["HumanMessage"](question)])
        response = lc["ModelResponse"](result=[lc["AIMessage"](answer)])
        got: list[Any] = []

        def handler(req: Any) -> Any:
            got.extend(m for m in (req.system_message, *req.messages) if m is not None)
            return response

        return lambda: self.mw.wrap_model_call(request, handler), got

    def turn(self, question: str, answer: str) -> list[Any]:
        """One model call through the middleware; what the model was handed."""
        run, got = self.call(question, answer)
        run()
        return got


def tokens_ours(model_input: Sequence[Any], lc: Any) -> int:
    return count_messages(VERIFY, lc["cwlc"].from_langchain_messages(model_input))


# -- 1: time per turn ---------------------------------------------------------------------


def time_size(n: int, turns: int, budget: int, workdir: Path) -> dict[str, Any]:
    lc = lc_modules()
    thread = synthetic_thread(n)
    engine = ContextEngine(
        system_prompt=SYSTEM, counter=TiktokenCounter("cl100k_base"), budget=budget
    )
    convs = Conversations(engine, str(workdir / f"lc-{n}.db"))
    convs.import_sync("bench", thread, batch_size=1000, optimize_index=True)
    convs.wait_idle_sync(300)
    ours = Ours(convs, "bench")
    history = lc["cwlc"].to_langchain_messages(thread)
    whole, ckpt = Peer(budget, SYSTEM), Peer(budget, SYSTEM)
    ckpt_state = list(history)
    pairs = turn_messages(turns + 2)
    for m in history:  # the peers' memo filled once, as a long-lived process would have it
        whole.count(m)
        ckpt.count(m)
    times: dict[str, list[float]] = {"ours": [], "whole": [], "ckpt": []}  # wall-clock ms
    cpu: dict[str, list[float]] = {"ours": [], "whole": [], "ckpt": []}  # process CPU ms
    used: dict[str, int] = {"ours": 0, "whole": 0, "ckpt": 0}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        times[name].append((time.perf_counter() - t) * 1e3)
        cpu[name].append((time.process_time() - c) * 1e3)
        return out

    def run_ours(q: str, a: str) -> None:
        call, got = ours.call(q, a)
        timed("ours", call)
        convs.wait_idle_sync(60)  # background summaries run between turns, untimed
        used["ours"] = max(used["ours"], tokens_ours(got, lc))

    def run_whole(q: str, a: str) -> None:
        state = [*history, lc["HumanMessage"](q)]
        got, _ = timed("whole", lambda: whole.input(state))
        used["whole"] = max(used["whole"], whole.tokens(got))

    def run_ckpt(q: str, a: str) -> None:
        nonlocal ckpt_state
        state = [*ckpt_state, lc["HumanMessage"](q)]
        got, ckpt_state = timed("ckpt", lambda: ckpt.input(state))
        used["ckpt"] = max(used["ckpt"], ckpt.tokens(got))

    runs = {"ours": run_ours, "whole": run_whole, "ckpt": run_ckpt}
    warm = 2
    first_ckpt = 0.0
    for i, (q, a_msg) in enumerate(pairs):
        gc.collect()
        for name in rotate(list(runs), i):
            runs[name](q, a_msg.text)
        history.extend([lc["HumanMessage"](q), lc["AIMessage"](a_msg.text)])
        ckpt_state.append(lc["AIMessage"](a_msg.text))
        if i + 1 == warm:  # the first turns warm caches (and collapse the checkpointed state)
            first_ckpt = times["ckpt"][0]
            times = {k: [] for k in times}
            cpu = {k: [] for k in cpu}
    convs.close()
    return {
        "messages": n, "turns": turns, "budget": budget, "times_ms": times, "cpu_ms": cpu,
        "max_tokens": used, "ckpt_first_turn_ms": first_ckpt,
    }  # fmt: skip


# -- 2: LoCoMo evidence recall -------------------------------------------------------------

SIDES = ("default", "memory_qa", "peer")  # contextwright's two configurations, then LangChain


def _configured(side: str, budget: int) -> Conversations:
    """The stored conversations a middleware of ``side`` builds from, at ``budget``."""
    counter = TiktokenCounter("cl100k_base")
    if side == "default":  # the stateful default engine: window, summary, sparing recall
        return Conversations(
            ContextEngine(system_prompt=QA_PROMPT, counter=counter, budget=budget), None
        )
    backend = SQLiteBackend(SQLiteStore(":memory:")).backend()  # as `eval locomo` builds
    return Conversations(memory_qa_engine(backend, counter=counter, budget=budget), backend)


def recall(files: Sequence[Path], budgets: Sequence[int]) -> dict[str, Any]:
    lc = lc_modules()
    hits = {(side, b): [0, 0] for side in SIDES for b in budgets}
    over = {(side, b): 0 for side in SIDES for b in budgets}
    ms: dict[tuple[str, int], list[float]] = {(side, b): [] for side in SIDES for b in budgets}
    for path in files:
        for conv in load_locomo(path):
            history = lc["cwlc"].to_langchain_messages(conv.messages)
            for b in budgets:
                mine: dict[str, Any] = {}
                for side in SIDES[:2]:
                    convs = _configured(side, b)
                    convs.append_sync(conv.name, conv.messages)
                    convs.wait_idle_sync(300)
                    mine[side] = (convs, lc["cwlc"].ContextwrightMiddleware(convs, conv.name))
                peer = Peer(b, QA_PROMPT)
                for item in conv.items:
                    q = item.question.text
                    got: dict[str, list[Any]] = {}
                    for side, (convs, mw) in mine.items():
                        # what the middleware hands the model: the question is built for
                        # and (no answer recorded) never stored
                        t = time.perf_counter()
                        p = convs.run_sync(mw.bridge.prepare(conv.name, [lc["HumanMessage"](q)]))
                        ms[side, b].append((time.perf_counter() - t) * 1e3)
                        got[side] = [p.system, *p.messages] if p.system is not None else p.messages
                        over[side, b] += tokens_ours(got[side], lc) > b
                    t = time.perf_counter()
                    got["peer"], _ = peer.input([*history, lc["HumanMessage"](q)])
                    ms["peer", b].append((time.perf_counter() - t) * 1e3)
                    over["peer", b] += peer.tokens(got["peer"]) > b
                    for side, msgs in got.items():
                        text = _norm(unescape_content("\n".join(m.text for m in msgs)))
                        found = [_norm(conv.texts[e]) in text for e in item.evidence]
                        hits[side, b][0] += sum(found)
                        hits[side, b][1] += len(found)
                for convs, _ in mine.values():
                    convs.close()
    return {
        str(b): {
            side: {
                "recall": hits[side, b][0] / max(1, hits[side, b][1]), "over_budget": over[side, b],
                "ms_p50": statistics.median(ms[side, b]) if ms[side, b] else 0.0,
            }
            for side in SIDES
        } | {"evidence": hits["peer", b][1]}
        for b in budgets
    }  # fmt: skip


# -- report --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer turns, one LoCoMo file")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--budget", type=int, default=4000, help="budget of the timed turns")
    ap.add_argument("--budgets", default="1000,2000,4000,8000", help="LoCoMo budgets")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    turns = 8 if args.quick else args.turns
    console = Console()
    started = time.perf_counter()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        timed = [time_size(n, turns, args.budget, Path(tmp)) for n in sizes]
    tab = Table(title=f"Per turn, ms (budget {args.budget:,}; median; {turns} paired rounds)")
    for col in (
        "messages", "contextwright (wall / CPU)", "LangChain, history whole (wall / CPU)",
        "ratio (wall / CPU)", "LangChain, checkpointed (median, mean, first)",
        "max tokens sent (cw / whole / ckpt)",
    ):  # fmt: skip
        tab.add_column(col, justify="right")
    goals: list[Goal] = []
    med = statistics.median
    for r in timed:
        t, c, u = r["times_ms"], r["cpu_ms"], r["max_tokens"]
        wall, by_cpu = paired(t["whole"], t["ours"]), paired(c["whole"], c["ours"])
        tab.add_row(
            f"{r['messages']:,}", f"{med(t['ours']):.2f} / {med(c['ours']):.2f}",
            f"{med(t['whole']):.2f} / {med(c['whole']):.2f}",
            f"{wall.median:.2f}x / {by_cpu.median:.2f}x",
            f"{med(t['ckpt']):.2f}, {statistics.fmean(t['ckpt']):.2f}, {r['ckpt_first_turn_ms']:.1f}",
            f"{u['ours']} / {u['whole']} / {u['ckpt']}",
        )  # fmt: skip
        if r["messages"] >= 10_000:
            goals.append(Goal(
                f"per turn vs trim+summary, {r['messages']:,} msgs", 5.0, wall,
                note=f"CPU time: {by_cpu.median:.2f}x",
            ))  # fmt: skip
    console.print(tab)
    files = sorted(args.data.glob("*.json"))[: 1 if args.quick else None]
    budgets = [int(b) for b in args.budgets.split(",") if b]
    rec = recall(files, budgets) if files else {}
    if rec:
        rt = Table(title=f"LoCoMo evidence recall ({len(files)} files; what the model receives)")
        for col in (
            "budget", "evidence", "contextwright, default engine", "contextwright, memory_qa_engine",
            "LangChain", "over budget (default / qa / lc)", "ms p50 (default / qa / lc)",
        ):  # fmt: skip
            rt.add_column(col, justify="right")
        for b, row in rec.items():
            d, q, p = row["default"], row["memory_qa"], row["peer"]
            rt.add_row(
                b, str(row["evidence"]), f"{d['recall']:.3f}", f"{q['recall']:.3f}",
                f"{p['recall']:.3f}", f"{d['over_budget']} / {q['over_budget']} / {p['over_budget']}",
                f"{d['ms_p50']:.2f} / {q['ms_p50']:.2f} / {p['ms_p50']:.2f}",
            )  # fmt: skip
            for side, label in (("default", "default engine"), ("memory_qa", "memory_qa_engine")):
                o = row[side]
                goals.append(Goal(
                    f"LoCoMo recall higher at {int(b):,} ({label})", "higher", None,
                    check=(f"{o['recall']:.3f} vs {p['recall']:.3f}", o["recall"] > p["recall"]),
                ))  # fmt: skip
        console.print(rt)
    else:
        console.print(f"[yellow]no LoCoMo files in {args.data}: recall not measured[/]")
    goal_table(console, "Goals (ratio = LangChain / contextwright, per turn)", goals, "LC / cw")
    console.print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"{time.perf_counter() - started:.0f} s. SummarizationMiddleware used a fake model "
        "returning a fixed-length summary (offline)."
    )
    if args.json:
        args.json.write_text(json.dumps({"timed": timed, "recall": rec}, indent=2))
    over = any(v["over_budget"] for row in rec.values() for k, v in row.items() if k != "evidence")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
