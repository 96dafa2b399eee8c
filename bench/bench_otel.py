"""OpenTelemetry on vs off: the overhead per build, the same builds, in one process.

Two workloads, each on a 1,000-message seeded thread (questions, answers, 1 assistant
turn in 5 calling a tool whose result is 1–6 KB of JSON) with cl100k counts, budget
8,000 and the eight default sources with something to say (`_sources.eight_sources`):

* **engine build** — ``ContextEngine.build_sync`` of the same message after the same
  history (spans: the build, 4 stages, 8 source fetches, the memory search);
* **stateful build** — ``Conversations.build_sync`` on an SQLite file holding the
  thread, recall on, ``store_message=False`` so every build is the same (spans:
  the conversation build, the build, its stages, 9 source fetches, the memory search).

*On* is `contextwright.integrations.otel.instrument` with the SDK as a service runs it:
a ``TracerProvider`` (always sampled) whose ``BatchSpanProcessor`` hands spans to an
exporter that drops them (the export itself is the exporter's cost, off the build's
thread), and a ``MeterProvider`` with an in-memory reader (histograms aggregate on
record). *Sampled out* is the same with an ``ALWAYS_OFF`` sampler; *hook only* an
enabled tracer that keeps nothing (what contextwright itself adds). *Off* is nothing
installed (the library's no-op tracer). Each round times ``--builds`` builds in each
mode back to back, the order rotating per round; the round's ratio is on / off of
the lower-quartile build times (builds preempted by the OS, common on a shared
machine, land in the upper half); the table prints the median of those ratios over
``--rounds`` rounds with their interquartile range. Goal: on ≤ 1.10 × off.

Run: ``python bench/bench_otel.py [--rounds 15] [--builds 40] [--messages 1000]
[--profile]`` (about 20 s on 2 cores). ``--profile`` prints a cProfile of instrumented builds.
"""

import argparse
import cProfile
import gc
import io
import json
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from rich.console import Console

from _paired import Goal, goal_table, paired, quartiles, rotate
from _sources import eight_sources
from contextwright import ContextEngine, Conversations, Message, TiktokenCounter, ToolCallPart
from contextwright._trace import NO_SPAN, set_tracer
from contextwright.integrations import otel
from contextwright.sources import Assessment, ConversationState, DeviceInfo, StageVisit

TENANT, USER = "acme", "u1"
BUDGET = 8000
GOAL = 1.10
QUESTION = "What does the refund policy say about order 88231, and which shipping notes apply?"
STATE = ConversationState(
    collected_info={"name": "Tim", "plan": "pro", "order": "88231", "region": "EU"},
    assessment=Assessment(
        recommended=("refund", "store credit"),
        score=0.82,
        highlights=("long-standing customer",),
        concerns=("second refund this quarter",),
    ),
    stage="resolution",
    stage_turns=3,
    stage_history=(StageVisit("intake", 4), StageVisit("diagnosis", 7)),
    device=DeviceInfo("iPhone 15", "Europe/Lisbon", "PT", "en-PT", 60),
)
_VOCABULARY = """
the a to of and in is it for on with that this we you order refund shipping notes policy
account invoice delivery warehouse courier tracking label parcel customer plan upgrade
billing region Lisbon Rotterdam supervisor quarter escalation review status pending
approved window days working email checklist summary decision
"""
WORDS = _VOCABULARY.split()


class HookOnly:
    """An enabled tracer that keeps nothing: contextwright's own part of tracing (the
    attributes it computes, the hook's calls), without OpenTelemetry's."""

    enabled = True
    capture_content = False

    def span(self, name: str, attributes: Any = None) -> Any:
        return NO_SPAN

    def record(self, metric: str, value: float, attributes: Any = None) -> None:
        pass


class Drop(SpanExporter):
    """Takes the batches and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def thread(n: int, seed: int = 7) -> list[Message]:
    rng = random.Random(seed)

    def words(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    out: list[Message] = []
    calls = 0
    while len(out) < n:
        out.append(Message.user(words(6, 30) + "?"))
        if rng.random() < 0.25:
            calls += 1
            call = ToolCallPart(f"call_{calls}", "lookup", json.dumps({"q": words(2, 5)}))
            out.append(Message.assistant(words(3, 10), tool_calls=[call]))
            rows = [{"id": i, "text": words(8, 20)} for i in range(rng.randint(10, 60))]
            out.append(Message.tool(call.id, json.dumps({"ok": True, "rows": rows})))
        out.append(Message.assistant(words(20, 120) + "."))
    return out[:n]


def engine(now: float) -> ContextEngine:
    sources = eight_sources(
        now, tenant=TENANT, user=USER,
        memories=(("Prefers short answers with the numbers first", "preference", 90),
                  ("Order 88231 is waiting for a refund decision", "fact", 80)),
        passages=(("Refund policy: refunds within 30 days of delivery.", "policies/refunds.md"),
                  ("Shipping notes: EU orders ship from Rotterdam.", "notes/shipping.md")),
        experiences=(("When a refund is pending, state the policy window first.", "resolution"),),
        labels={"name": "Name", "plan": "Plan", "order": "Order", "region": "Region"},
        core_fields=("name", "plan"),
    )  # fmt: skip
    return ContextEngine(
        system_prompt="You are a support assistant. Answer from the context.",
        sources=sources, counter=TiktokenCounter("cl100k_base"), budget=BUDGET,
        clock=lambda: now,
    )  # fmt: skip


def workloads(
    tmp: Path, n: int = 1000
) -> tuple[dict[str, Callable[[], Any]], list[Callable[[], None]]]:
    """The two builds (each returns its `BuiltContext`) and what closes them."""
    now = time.time()
    history = thread(n)
    eng = engine(now)

    def engine_build() -> Any:
        return eng.build_sync(QUESTION, history=history, tenant=TENANT, user=USER, state=STATE)

    conv = Conversations(engine(now), tmp / "otel.db", inline_jobs=True)
    conv.import_sync("c", thread(n, seed=8), tenant=TENANT, user=USER, optimize_index=True)
    conv.wait_idle_sync(120)

    def stateful_build() -> Any:
        return conv.build_sync(
            "c", QUESTION, tenant=TENANT, user=USER, state=STATE, store_message=False
        )

    return {"engine build": engine_build, "stateful build": stateful_build}, [conv.close]


def providers(sampled: bool) -> tuple[TracerProvider, MeterProvider]:
    tp = TracerProvider() if sampled else TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(BatchSpanProcessor(Drop()))
    return tp, MeterProvider([InMemoryMetricReader()])


def timed(build: Callable[[], Any], n: int) -> float:
    """The lower quartile of ``n`` builds, in ms: a build the OS preempted (on a shared
    machine a third of them can be, at 5-10 ms each) says nothing about tracing."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        build()
        out.append((time.perf_counter() - t) * 1e3)
    return quartiles(out)[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--builds", type=int, default=40, help="builds per mode per round")
    ap.add_argument("--messages", type=int, default=1000, help="thread length")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    console = Console()
    on = otel.instrument(*providers(True))
    sampled_out = otel.OTelTracer(*providers(False))
    modes = {"off": None, "on": on, "sampled out": sampled_out, "hook only": HookOnly()}
    with tempfile.TemporaryDirectory() as d:
        runs, closers = workloads(Path(d), args.messages)
        goals: list[Goal] = []
        for name, build in runs.items():
            receipts = set()
            for tracer in modes.values():  # warm every path: caches, instruments
                set_tracer(tracer)
                timed(build, 5)
                report = build().report
                receipts.add((report.used, tuple((b.name, b.status) for b in report.blocks)))
            if len(receipts) != 1 or next(iter(receipts))[0] > BUDGET:
                raise SystemExit(f"{name}: the modes built different contexts: {receipts}")
            series: dict[str, list[float]] = {m: [] for m in modes}
            gc.collect()
            for r in range(args.rounds):
                for mode in rotate(list(modes), r):
                    set_tracer(modes[mode])
                    series[mode].append(timed(build, args.builds))
            on_off = paired(series["on"], series["off"])
            console.print(
                f"{name}: off {on_off.fast_median:.3f} ms, on {on_off.slow_median:.3f} ms "
                f"(+{(on_off.median - 1) * 100:.1f}%, IQR {on_off.spread()})"
            )
            goals.append(Goal(f"{name}: OTel on / off", GOAL, on_off, at_most=True))
            for mode, note in (
                ("sampled out", "info: an ALWAYS_OFF sampler"),
                ("hook only", "info: contextwright's own part"),
            ):
                ratio = paired(series[mode], series["off"])
                goals.append(Goal(f"{name}: {mode} / off", GOAL, ratio, at_most=True, note=note))
        if args.profile:
            set_tracer(on)
            prof = cProfile.Profile()
            prof.enable()
            for build in runs.values():
                timed(build, 200)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
            console.print(s.getvalue())
        set_tracer(None)
        for close in closers:
            close()
    goal_table(console, "Goals (ratio = OTel on / off, per build)", goals, "on / off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
