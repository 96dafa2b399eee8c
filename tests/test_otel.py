"""OpenTelemetry: the spans and metrics of builds, appends and compactions, on the real SDK.

Spans go to the SDK's `InMemorySpanExporter`, metrics to its `InMemoryMetricReader`,
through providers made here (the process-wide OpenTelemetry providers are left alone).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import StatusCode

from contextwright import (
    BudgetError,
    ContextEngine,
    Conversations,
    HeuristicCounter,
    InMemoryMemoryStore,
    Message,
    Scope,
    ToolCallPart,
)
from contextwright._trace import NoTracer
from contextwright.history import CompactionConfig
from contextwright.integrations import otel
from contextwright.model._blocks import Block, Priority
from contextwright.pipeline._tracing import DURATION, TOKENS
from contextwright.sources import SourceBase, UserMemorySource

from .conftest import TEXT

H = HeuristicCounter()
STAGES = ["plan", "fetch", "fit", "assemble", "render"]


def _providers() -> SimpleNamespace:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    return SimpleNamespace(exporter=exporter, tp=tp, reader=reader, mp=MeterProvider([reader]))


@pytest.fixture
def tel() -> Iterator[SimpleNamespace]:
    """Instrumented for the test (no content), uninstrumented after it."""
    p = _providers()
    otel.instrument(p.tp, p.mp)
    yield p
    otel.uninstrument()
    p.tp.shutdown()
    p.mp.shutdown()


def spans(p: SimpleNamespace) -> list[ReadableSpan]:
    return list(p.exporter.get_finished_spans())


def children(all_spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    pid = parent.context.span_id
    kids = [s for s in all_spans if s.parent is not None and s.parent.span_id == pid]
    return sorted(kids, key=lambda s: s.start_time or 0)


def named(all_spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in all_spans if s.name == name]


def texts(all_spans: list[ReadableSpan], metrics: Any = None) -> list[str]:
    """Every string a span or metric holds: attribute values, events, status."""
    out: list[str] = []

    def add(attrs: Any) -> None:
        for v in (attrs or {}).values():
            out.extend(str(x) for x in v) if isinstance(v, (list, tuple)) else out.append(str(v))

    for s in all_spans:
        out.append(s.name)
        add(s.attributes)
        out.append(s.status.description or "")
        for e in s.events:
            out.append(e.name)
            add(e.attributes)
    if metrics is not None:
        out.append(metrics.to_json())
    return out


@dataclass
class Traced(SourceBase):
    """A user's source that waits (yielding the loop) and opens a span of its own."""

    tp: Any = None
    priority: int = Priority.P1

    async def fetch(self, turn: Any, allowance: int) -> Block:
        with trace.get_tracer("user", tracer_provider=self.tp).start_as_current_span(
            f"user.{self.name}"
        ):
            for _ in range(3):  # interleave with the other sources' tasks
                await asyncio.sleep(0)
            return Block(self.name, f"{self.name} facts", self.priority)


@dataclass
class Failing(SourceBase):
    name: str = "broken"

    async def fetch(self, turn: Any, allowance: int) -> Block:
        raise RuntimeError("the lookup service is down")


@dataclass
class Waiting(SourceBase):
    """Never answers: its deadline cuts it off."""

    name: str = "slow"
    deadline: float = 0.02

    async def fetch(self, turn: Any, allowance: int) -> Block:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def memory_store() -> InMemoryMemoryStore:
    store = InMemoryMemoryStore()
    store.add(Scope("default", "anonymous"), "Prefers tea over coffee in the morning")
    return store


def test_build_span_tree_nests_stages_sources_and_their_own_spans(tel):
    cached = Traced(name="cached", ttl=60.0, tp=tel.tp)
    engine = ContextEngine(
        system_prompt="You help.", model="gpt-4o", budget=4000, counter=H,
        sources=[UserMemorySource(store=memory_store()), Traced(name="a", tp=tel.tp),
                 Traced(name="b", tp=tel.tp), cached],
    )  # fmt: skip
    history = [Message.user("hi"), Message.assistant("hello")]
    engine.build_sync("what about tea?", history=history, provider="anthropic")
    got = spans(tel)
    (build,) = named(got, "contextwright.build")
    assert build.parent is None
    stages = children(got, build)
    assert [s.name for s in stages] == [f"contextwright.build.{n}" for n in STAGES]
    fetch = stages[1]
    fetches = children(got, fetch)
    assert {s.attributes["contextwright.source.name"] for s in fetches} == {
        "user_memory", "a", "b", "cached",
    }  # fmt: skip
    assert {s.name for s in fetches} == {"contextwright.source.fetch"}
    by_source = {s.attributes["contextwright.source.name"]: s for s in fetches}
    # each user source's own span is a child of its fetch span, though they interleaved
    for name in ("a", "b", "cached"):
        (mine,) = children(got, by_source[name])
        assert mine.name == f"user.{name}"
    (search,) = children(got, by_source["user_memory"])
    assert search.name == "contextwright.memory.search"
    assert search.attributes["gen_ai.operation.name"] == "retrieval"
    assert search.attributes["contextwright.memory.hits"] == 1
    assert all(s.attributes["contextwright.source.status"] == "ok" for s in fetches)
    assert "contextwright.sources.cached" not in fetch.attributes
    assert fetch.attributes["contextwright.sources.fetched"] == 4
    # served from the cache next time: no fetch, no span; the fetch stage names it
    tel.exporter.clear()
    engine.build_sync("what about tea?", history=history)
    got = spans(tel)
    (build,) = named(got, "contextwright.build")
    stages = children(got, build)
    assert [s.name for s in stages] == [f"contextwright.build.{n}" for n in STAGES[:-1]]
    fetch = stages[1]
    assert list(fetch.attributes["contextwright.sources.cached"]) == ["user_memory", "cached"]
    assert fetch.attributes["contextwright.sources.fetched"] == 2
    again = [s.attributes["contextwright.source.name"] for s in children(got, fetch)]
    assert sorted(again) == ["a", "b"]
    assert named(got, "contextwright.memory.search") == []


def test_build_attributes_follow_the_receipt(tel):
    big = Block("bulky", "filler words " * 400, Priority.P2)

    @dataclass
    class Bulky(SourceBase):
        name: str = "bulky"

        async def fetch(self, turn: Any, allowance: int) -> Block:
            return big

    engine = ContextEngine(system_prompt="You help.", model="gpt-4o", budget=600, counter=H,
                           sources=[Bulky()])  # fmt: skip
    built = engine.build_sync(
        "hello", history=[Message.user("one"), Message.assistant("two")], conversation="c-42",
        tenant="acme", provider="openai",
    )  # fmt: skip
    report = built.report
    (build,) = named(spans(tel), "contextwright.build")
    a = build.attributes
    assert a["gen_ai.request.model"] == "gpt-4o"
    assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "openai"
    assert a["gen_ai.operation.name"] == "build_context"
    assert a["gen_ai.conversation.id"] == "c-42"
    assert a["contextwright.tenant"] == "acme"
    assert a["contextwright.budget"] == 600
    assert a["contextwright.tokens.used"] == report.used
    for name, section in report.sections.items():
        assert a[f"contextwright.tokens.{name}"] == section.used
    assert a["contextwright.blocks.dropped"] == len(report.by_status("dropped")) >= 1
    assert "bulky" in a["contextwright.blocks.dropped_names"]
    assert a["contextwright.blocks.included"] == len(report.by_status("included"))
    assert a["contextwright.cache.hits"] == report.cache_hits
    assert a["contextwright.history.messages"] == report.history_messages == 2
    assert build.status.status_code == StatusCode.UNSET


SECRETS = [
    "my passport number is X1234567",
    "the launch code is alpha-omega-42",
    "Prefers jasmine tea over coffee",
    "summary of the zanzibar plan",
]
MARKERS = ["X1234567", "alpha-omega", "jasmine", "zanzibar"]  # one word of each, unique


def run_everything(tmp_path: Any, tag: str = "") -> list[Any]:
    """An engine build with memory, history and summary, then the stateful mode: an
    append, a build that compacts before it returns, an explicit compaction."""
    store = InMemoryMemoryStore()
    store.add(Scope("default", "anonymous"), SECRETS[2])
    engine = ContextEngine(system_prompt="You help.", model="gpt-4o", budget=4000, counter=H,
                           sources=[UserMemorySource(store=store)])  # fmt: skip
    history = [Message.user(SECRETS[1]), Message.assistant("ok")]
    first = engine.build_sync(
        SECRETS[0] + " coffee?", history=history, summary=SECRETS[3], provider="openai"
    )
    builds = [first]
    cfg = CompactionConfig(soft_threshold_tokens=300, hard_threshold_tokens=500,
                           keep_recent_messages=4, summary_max_tokens=100)  # fmt: skip
    convs = Conversations(engine, tmp_path / f"c{tag}.db", compaction=cfg, inline_jobs=True)
    thread = []
    for i in range(30):
        thread += [Message.user(f"{SECRETS[1]} ({i})"), Message.assistant(f"{SECRETS[0]} ({i})")]
    convs.append_sync("conv-1", thread)
    builds.append(convs.build_sync("conv-1", SECRETS[0] + " again?"))
    convs.append_sync("conv-1", [Message.assistant(SECRETS[1])])
    convs.compact_sync("conv-1")
    convs.close()
    return builds


def test_no_message_text_in_spans_or_metrics_by_default(tel, tmp_path):
    builds = run_everything(tmp_path)
    got = spans(tel)
    assert {"contextwright.build", "contextwright.conversation.build", "contextwright.append",
            "contextwright.compaction", "contextwright.summary", "contextwright.memory.search",
            } <= {s.name for s in got}  # fmt: skip
    # the texts did reach the prompts: their absence from the spans is not by chance
    sent = "\n".join(m.text for b in builds for m in b.messages)
    assert all(secret in sent for secret in SECRETS[:3])
    everything = "\n".join(texts(got, tel.reader.get_metrics_data()))
    for piece in SECRETS + MARKERS:
        assert piece not in everything, piece


@settings(max_examples=25)
@given(st.lists(TEXT.filter(lambda t: len(t.strip()) >= 12), min_size=1, max_size=4))
def test_no_text_property(words):
    p = _providers()
    tracer = otel.OTelTracer(p.tp, p.mp)
    engine = ContextEngine(budget=3000, counter=H, sources=[UserMemorySource(store=memory_store())])
    engine.tracer = tracer
    history = [Message.user(w) if i % 2 == 0 else Message.assistant(w) for i, w in enumerate(words)]
    engine.build_sync(words[-1] + " tea", history=history[:-1], summary=words[0])
    everything = "\n".join(texts(spans(p), p.reader.get_metrics_data()))
    for w in words:
        assert w.strip() not in everything
    p.tp.shutdown()
    p.mp.shutdown()


def test_capture_content_puts_the_text_in(tmp_path):
    p = _providers()
    otel.instrument(p.tp, p.mp, capture_content=True)
    try:
        run_everything(tmp_path)
    finally:
        otel.uninstrument()
    got = spans(p)
    build = named(got, "contextwright.build")[0]
    sent = json.loads(build.attributes["gen_ai.input.messages"])
    last_user = [m for m in sent if m["role"] == "user"][-1]
    assert last_user["parts"][0]["content"].startswith(SECRETS[0])
    assert any(SECRETS[1] in part.get("content", "") for m in sent for part in m["parts"])
    search = named(got, "contextwright.memory.search")[0]
    assert SECRETS[0] in search.attributes["gen_ai.retrieval.query.text"]
    appended = named(got, "contextwright.append")[0]
    assert SECRETS[1] in appended.attributes["contextwright.content"]
    assert any("contextwright.content" in s.attributes for s in named(got, "contextwright.summary"))


def test_errors_are_recorded_on_their_spans(tel):
    engine = ContextEngine(system_prompt="rule " * 400, budget=200, counter=H)
    with pytest.raises(BudgetError):
        engine.build_sync("hello")
    got = spans(tel)
    (build,) = named(got, "contextwright.build")
    assert build.status.status_code == StatusCode.ERROR
    assert build.attributes["error.type"] == "BudgetError"
    (event,) = [e for e in build.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("BudgetError")
    failed_stages = [s for s in children(got, build) if s.status.status_code == StatusCode.ERROR]
    assert [s.attributes["error.type"] for s in failed_stages] == ["BudgetError"]
    durations = metric_points(tel, DURATION)
    assert [pt.attributes.get("error.type") for pt in durations] == ["BudgetError"]

    # a source that fails or times out: its span fails, the build goes on and is fine
    tel.exporter.clear()
    engine = ContextEngine(budget=2000, counter=H, sources=[Failing(), Waiting()])
    built = engine.build_sync("hello")
    assert built.report.block("broken").status == "failed"
    got = spans(tel)
    by_source = {
        s.attributes["contextwright.source.name"]: s
        for s in named(got, "contextwright.source.fetch")
    }
    assert by_source["broken"].status.status_code == StatusCode.ERROR
    assert by_source["broken"].attributes["error.type"] == "RuntimeError"
    assert by_source["broken"].attributes["contextwright.source.status"] == "failed"
    assert by_source["slow"].attributes["error.type"] == "TimeoutError"
    assert by_source["slow"].attributes["contextwright.source.status"] == "timed_out"
    (build,) = named(got, "contextwright.build")
    assert build.status.status_code == StatusCode.UNSET
    assert build.attributes["contextwright.blocks.failed"] == 1
    assert build.attributes["contextwright.blocks.timed_out"] == 1


def metric_points(p: SimpleNamespace, name: str) -> list[Any]:
    data = p.reader.get_metrics_data()
    return [
        pt
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for pt in m.data.data_points
    ]


def test_metrics_duration_and_tokens_per_section(tel):
    engine = ContextEngine(system_prompt="You help.", model="gpt-4o", budget=3000, counter=H)
    history: list[Message] = []
    totals: dict[str, int] = {}
    for i in range(5):
        built = engine.build_sync(f"question {i}", history=history)
        for name, section in built.report.sections.items():
            totals[name] = totals.get(name, 0) + section.used
        history += [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]
    (duration,) = metric_points(tel, DURATION)
    assert duration.count == 5
    assert duration.sum > 0
    assert dict(duration.attributes) == {"gen_ai.request.model": "gpt-4o"}
    tokens = {pt.attributes["contextwright.section"]: pt for pt in metric_points(tel, TOKENS)}
    assert set(tokens) == set(totals)
    assert {"system", "recent", "input"} <= set(tokens)
    for name, total in totals.items():
        assert tokens[name].count == 5
        assert tokens[name].sum == total
    assert tokens["recent"].sum > 0


def test_stateful_build_append_and_compaction_spans(tel, tmp_path):
    cfg = CompactionConfig(soft_threshold_tokens=300, hard_threshold_tokens=500,
                           keep_recent_messages=4, summary_max_tokens=100)  # fmt: skip
    engine = ContextEngine(budget=4000, counter=H)
    convs = Conversations(engine, tmp_path / "s.db", compaction=cfg, inline_jobs=True)
    thread = [Message.user(f"question {i} about the plan") for i in range(3)]
    thread += [Message.assistant("checking", tool_calls=[ToolCallPart("c1", "search", "{}")]),
               Message.tool("c1", "found it")]  # fmt: skip
    thread += [Message.user(f"more words {i} " * 20) for i in range(8)]
    convs.append_sync("conv-9", thread, tenant="t1", user="u1")
    got = spans(tel)
    (append,) = named(got, "contextwright.append")
    assert append.attributes["contextwright.messages"] == len(thread)
    assert append.attributes["gen_ai.conversation.id"] == "conv-9"
    assert append.attributes["contextwright.last_seq"] == len(thread)
    convs.import_sync("conv-10", thread, tenant="t1", user="u1", batch_size=4)
    (imported,) = named(spans(tel), "contextwright.import")
    assert imported.attributes["contextwright.messages"] == len(thread)
    assert imported.attributes["gen_ai.conversation.id"] == "conv-10"
    tel.exporter.clear()

    built = convs.build_sync("conv-9", "so what now?", tenant="t1", user="u1")
    assert built.report.compaction["performed"] is True
    got = spans(tel)
    (outer,) = named(got, "contextwright.conversation.build")
    assert outer.parent is None
    assert outer.attributes["contextwright.compaction.performed"] is True
    assert outer.attributes["contextwright.compaction.urgency"] in ("hard", "emergency")
    kids = [s.name for s in children(got, outer)]
    assert kids.index("contextwright.compaction") < kids.index("contextwright.build")
    assert kids.index("contextwright.build") < kids.index("contextwright.append")
    (compaction,) = named(got, "contextwright.compaction")
    assert compaction.attributes["contextwright.compaction.performed"] is True
    assert (
        compaction.attributes["contextwright.compaction.tokens_after"]
        < (compaction.attributes["contextwright.compaction.tokens_before"])
    )
    (summary,) = children(got, compaction)
    assert summary.name == "contextwright.summary"
    assert summary.attributes["contextwright.summary.messages"] > 0
    assert summary.attributes["contextwright.summary.tokens"] > 0
    (inner,) = named(got, "contextwright.build")
    assert [s.name for s in children(got, inner)][:2] == [
        "contextwright.build.plan", "contextwright.build.fetch",
    ]  # fmt: skip
    recall = named(got, "contextwright.source.fetch")
    assert [s.attributes["contextwright.source.name"] for s in recall] == ["recalled_turns"]

    tel.exporter.clear()
    result = convs.compact_sync("conv-9", tenant="t1", user="u1", preview=True)
    (preview,) = named(spans(tel), "contextwright.compaction")
    assert preview.attributes["contextwright.compaction.preview"] is True
    assert preview.attributes["contextwright.compaction.performed"] is result.applied is False
    convs.close()


def test_without_instrument_nothing_is_exported_and_nothing_breaks(tmp_path):
    p = _providers()  # providers exist, but nothing was instrumented
    builds = run_everything(tmp_path)
    assert all(b.report.used > 0 for b in builds)
    assert spans(p) == []
    assert metric_points(p, DURATION) == []
    # after uninstrument too
    otel.instrument(p.tp, p.mp)
    otel.uninstrument()
    run_everything(tmp_path, "2")
    assert spans(p) == []


def test_an_engine_tracer_of_its_own(tel, tmp_path):
    mine = _providers()
    engine = ContextEngine(budget=3000, counter=H, sources=[UserMemorySource(store=memory_store())])
    engine.tracer = otel.OTelTracer(mine.tp, mine.mp)
    convs = Conversations(engine, tmp_path / "o.db", inline_jobs=True)
    convs.append_sync("c", [Message.user("tea or coffee?"), Message.assistant("tea")])
    convs.build_sync("c", "tea again?")
    names = {s.name for s in spans(mine)}
    assert {"contextwright.conversation.build", "contextwright.build", "contextwright.append",
            "contextwright.memory.search"} <= names  # fmt: skip
    assert spans(tel) == []  # the process-wide tracer saw none of it
    # an engine can opt out of the process-wide tracer, its memory search too
    engine.tracer = NoTracer()
    mine.exporter.clear()
    convs.build_sync("c", "tea once more?")
    assert spans(tel) == []
    assert spans(mine) == []
    convs.close()


def test_in_a_trace_not_sampled_no_child_span_is_made():
    asked: list[str] = []

    class Never(Sampler):
        def should_sample(self, parent_context, trace_id, name, *args: Any, **kw: Any):
            asked.append(name)
            return SamplingResult(Decision.DROP)

        def get_description(self) -> str:
            return "never"

    p = _providers()
    engine = ContextEngine(budget=3000, counter=H, sources=[UserMemorySource(store=memory_store())])
    engine.tracer = otel.OTelTracer(TracerProvider(sampler=Never()), p.mp)
    built = engine.build_sync("tea?", history=[Message.user("hi"), Message.assistant("yo")])
    assert built.report.block("user_memory").status == "included"
    assert asked == ["contextwright.build"]  # the root only: its children were never made
    (duration,) = metric_points(p, DURATION)  # the metrics are still recorded
    assert duration.count == 1


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_import_contextwright_does_not_import_opentelemetry():
    done = _run(
        "import sys, contextwright, contextwright.integrations.otel\n"
        "from contextwright import ContextEngine\n"
        "ContextEngine(budget=500).build_sync('hi')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_opentelemetry_instrument_names_the_extra():
    done = _run(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from contextwright import ContextEngine, MissingDependencyError\n"
        "from contextwright.integrations import otel\n"
        "assert ContextEngine(budget=500).build_sync('hi').report.used > 0\n"
        "try:\n    otel.instrument()\n"
        "except MissingDependencyError as e:\n    print(e)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'contextwright[otel]'" in done.stdout
