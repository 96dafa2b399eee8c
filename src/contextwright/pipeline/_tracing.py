"""What a build tells its tracer (`contextwright._trace`): span names, attributes, metrics.

`ContextEngine.build` runs inside `traced_build`: one ``contextwright.build`` span
whose children are the stages (``contextwright.build.plan`` … ``.render``, opened by
the engine) and, under the fetch stage, one ``contextwright.source.fetch`` per
source (opened by the fetch stage inside the source's task, so that spans a source
opens itself nest under it). When the build returns, the span gets the receipt's
figures (`report_attributes`) and the tracer two histograms: the build's duration
in seconds and the tokens of each section. Attributes follow the OpenTelemetry
gen_ai conventions where they apply (``gen_ai.request.model``,
``gen_ai.provider.name``/``gen_ai.system``, ``gen_ai.conversation.id``,
``gen_ai.operation.name``), the rest are ``contextwright.*``; message text only
with ``capture_content`` (``gen_ai.input.messages``, `messages_json`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._trace import Attributes, AttrValue, Tracer, activate
from ..model._messages import Message
from ..model._parts import TextPart, ToolCallPart, ToolResultPart
from ._receipt import BuiltContext, ContextReport

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = [
    "BUILD",
    "DURATION",
    "SOURCE_FETCH",
    "TOKENS",
    "messages_json",
    "provider_attributes",
    "report_attributes",
    "traced_build",
]

BUILD = "contextwright.build"
SOURCE_FETCH = "contextwright.source.fetch"
DURATION = "contextwright.build.duration"  # histogram, seconds
TOKENS = "contextwright.build.tokens"  # histogram, tokens, attribute contextwright.section
# the provider formats a build renders to, by the gen_ai.provider.name they serve
_PROVIDERS = {"openai": "openai", "responses": "openai", "anthropic": "anthropic"}


def provider_attributes(model: str | None, provider: str | None) -> dict[str, AttrValue]:
    """``gen_ai.request.model`` and ``gen_ai.provider.name`` where they are known:
    low-cardinality, the metrics carry them too."""
    out: dict[str, AttrValue] = {}
    if model:
        out["gen_ai.request.model"] = model
    name = _PROVIDERS.get(provider) if provider is not None else None
    if name is not None:
        out["gen_ai.provider.name"] = name
    return out


def report_attributes(report: ContextReport) -> dict[str, AttrValue]:
    """The receipt's figures as span attributes: budget, tokens (total and per
    section), blocks included and dropped (other statuses when there are any), cache
    hits, history messages kept. No text."""
    counts = {"included": 0, "dropped": 0}
    dropped: list[str] = []
    for b in report.blocks:
        counts[b.status] = counts.get(b.status, 0) + 1
        if b.status == "dropped":
            dropped.append(b.name)
    out: dict[str, AttrValue] = {
        "contextwright.budget": report.budget,
        "contextwright.tokens.used": report.used,
        "contextwright.utilisation": round(report.utilisation, 4),
        "contextwright.cache.hits": report.cache_hits,
        "contextwright.history.messages": report.history_messages,
    }
    for status, n in counts.items():
        out[f"contextwright.blocks.{status}"] = n
    if dropped:
        out["contextwright.blocks.dropped_names"] = dropped
    for name, s in report.sections.items():
        out[f"contextwright.tokens.{name}"] = s.used
    if report.warnings:
        out["contextwright.warnings"] = len(report.warnings)
    if report.last_seq is not None:
        out["contextwright.last_seq"] = report.last_seq
    return out


def _part_json(p: object) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "content": p.text}
    if isinstance(p, ToolCallPart):
        return {"type": "tool_call", "id": p.id, "name": p.name, "arguments": p.arguments}
    if isinstance(p, ToolResultPart):
        return {"type": "tool_call_response", "id": p.call_id, "response": p.text}
    return {"type": getattr(p, "type", type(p).__name__)}


def messages_json(messages: Sequence[Message]) -> str:
    """Messages as the gen_ai conventions' ``gen_ai.input.messages`` JSON (only with
    ``capture_content``): role and parts (text, tool calls, tool results)."""
    return json.dumps(
        [{"role": m.role, "parts": [_part_json(p) for p in m.parts]} for m in messages],
        ensure_ascii=False,
    )


async def traced_build(
    engine: ContextEngine,
    tracer: Tracer,
    run: Callable[[], Awaitable[BuiltContext]],
    *,
    conversation: str,
    tenant: str,
    provider: str | None,
) -> BuiltContext:
    """Run one build (``run``) under ``tracer``: its span, attributes and metrics.

    With a tracer that is not ``enabled`` this is ``run()`` alone; an engine's own
    tracer is made current for the build either way (`activate`), so that its
    sources report to it (or to nothing) and not to the process-wide one.
    """
    if not tracer.enabled:
        if engine.tracer is None:
            return await run()
        with activate(engine.tracer):
            return await run()
    metric: Attributes = provider_attributes(engine.model, provider)
    attrs: dict[str, AttrValue] = {
        "gen_ai.operation.name": "build_context",
        "gen_ai.conversation.id": conversation,
        "contextwright.tenant": tenant,
        **metric,
    }
    if "gen_ai.provider.name" in metric:  # the older name of the attribute, on the span
        attrs["gen_ai.system"] = metric["gen_ai.provider.name"]
    if engine.tracer is not None:
        with activate(engine.tracer):
            return await _traced(tracer, run, attrs, metric)
    return await _traced(tracer, run, attrs, metric)


async def _traced(
    tracer: Tracer,
    run: Callable[[], Awaitable[BuiltContext]],
    attrs: Attributes,
    metric: Attributes,
) -> BuiltContext:
    t0 = time.perf_counter()
    with tracer.span(BUILD, attrs) as span:
        try:
            built = await run()
        except BaseException as exc:
            failed = {**metric, "error.type": type(exc).__name__}
            tracer.record(DURATION, time.perf_counter() - t0, failed)
            raise
        report = built.report
        span.update(report_attributes(report))
        if tracer.capture_content:
            span.set("gen_ai.input.messages", messages_json(built.messages))
        tracer.record(DURATION, time.perf_counter() - t0, metric)
        for name, s in report.sections.items():
            tracer.record(TOKENS, s.used, {**metric, "contextwright.section": name})
        return built
