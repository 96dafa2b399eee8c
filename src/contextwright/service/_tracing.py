"""What the stateful mode tells its tracer (`contextwright._trace`): builds, appends, compactions.

Spans, each only when the tracer is ``enabled``:

* ``contextwright.conversation.build`` — `Conversations.build` (`traced_build`): reading
  the tail, a compaction before the build, the engine's ``contextwright.build``, and
  storing the message, as children; the compaction's urgency and whether one ran;
* ``contextwright.append`` — every append (`Writes.append`), a build's own message too;
  ``contextwright.import`` — the batches of `Conversations.import_messages`;
* ``contextwright.compaction`` — every compaction and background summary
  (`Compactor.compact_now`), with ``contextwright.summary`` around the summariser.

The tracer is the engine's own (``engine.tracer``) or else the current one: a
background summary runs on the job thread, outside any build, and still reports to
the engine's. Message text (``contextwright.content``, ``gen_ai.input.messages``)
only with ``capture_content``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

from .._trace import AttrValue, Tracer, current
from ..history import CompactionResult
from ..model._messages import Message
from ..pipeline._receipt import BuiltContext
from ..pipeline._tracing import messages_json

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = [
    "APPEND",
    "COMPACTION",
    "CONVERSATION_BUILD",
    "IMPORT",
    "SUMMARY",
    "append_attributes",
    "compaction_attributes",
    "conversation_attributes",
    "traced_build",
    "tracer_of",
]

CONVERSATION_BUILD = "contextwright.conversation.build"
APPEND = "contextwright.append"
IMPORT = "contextwright.import"
COMPACTION = "contextwright.compaction"
SUMMARY = "contextwright.summary"
P = ParamSpec("P")


def tracer_of(conv: Conversations) -> Tracer:
    """The tracer of ``conv``'s work: its engine's own, else the current one."""
    tracer = conv.engine.tracer
    return current() if tracer is None else tracer


def conversation_attributes(conversation: str, tenant: str) -> dict[str, AttrValue]:
    return {"gen_ai.conversation.id": conversation, "contextwright.tenant": tenant}


def append_attributes(
    tracer: Tracer, stored: Sequence[Message], messages: Sequence[Message] | Message
) -> dict[str, AttrValue]:
    """An append's figures: how many messages, the last sequence number; the text with
    ``capture_content``."""
    out: dict[str, AttrValue] = {"contextwright.messages": len(stored)}
    if stored and stored[-1].seq is not None:
        out["contextwright.last_seq"] = stored[-1].seq
    if tracer.capture_content:
        batch = [messages] if isinstance(messages, Message) else list(messages)
        out["contextwright.content"] = messages_json(batch)
    return out


def compaction_attributes(result: CompactionResult) -> dict[str, AttrValue]:
    """What a compaction did: performed, urgency, strategies, messages and tokens."""
    out: dict[str, AttrValue] = {
        "contextwright.compaction.performed": result.applied,
        "contextwright.compaction.urgency": result.urgency,
        "contextwright.compaction.strategies": list(result.strategies),
        "contextwright.compaction.messages": result.original_count,
        "contextwright.compaction.retained": result.retained_count,
        "contextwright.compaction.tokens_before": result.tokens_before_compaction,
        "contextwright.compaction.tokens_after": result.tokens_after_compaction,
        "contextwright.compaction.flushed_memories": result.flushed_memories,
    }
    if result.summary_version is not None:
        out["contextwright.summary.version"] = result.summary_version
    if result.method:
        out["contextwright.summary.method"] = result.method
    return out


def traced_build(
    build: Callable[Concatenate[Conversations, P], Coroutine[Any, Any, BuiltContext]],
) -> Callable[Concatenate[Conversations, P], Coroutine[Any, Any, BuiltContext]]:
    """`Conversations.build` in a ``contextwright.conversation.build`` span."""

    @functools.wraps(build)
    async def traced(self: Conversations, /, *args: P.args, **kw: P.kwargs) -> BuiltContext:
        tracer = tracer_of(self)
        if not tracer.enabled:
            return await build(self, *args, **kw)
        conversation = args[0] if args else kw.get("conversation", "")
        attrs = conversation_attributes(str(conversation), str(kw.get("tenant", "default")))
        with tracer.span(CONVERSATION_BUILD, attrs) as span:
            built = await build(self, *args, **kw)
            report = built.report
            done: dict[str, AttrValue] = {"contextwright.tokens.used": report.used}
            if report.last_seq is not None:
                done["contextwright.last_seq"] = report.last_seq
            comp = report.compaction or {}
            done["contextwright.compaction.urgency"] = str(comp.get("urgency", "none"))
            done["contextwright.compaction.performed"] = bool(comp.get("performed", False))
            span.update(done)
            return built

    return traced
