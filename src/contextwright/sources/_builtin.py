"""The built-in sources, with their priorities, TTLs and gates, and the two presets.

`default_sources` is the general set: the user's memories and the knowledge
passages relevant to the message, each only when its store is given, adding
nothing else. `consultation_sources` is the opt-in preset of an advisory
conversation (collected fields, stages, an assessment, device context and agent
advice besides), all eight below:

| source                 | priority | ttl  | applies when                          |
|------------------------|----------|------|---------------------------------------|
| user_memory            | P0       | 60 s | always (store: `MemoryStore`)         |
| collected_info         | P0       | 0    | the state has collected fields        |
| conversation_stats     | P1       | 0    | always                                |
| assessment_result      | P0       | 0    | the state has an assessment           |
| relevant_knowledge     | P1       | 30 s | a keyword of the gate is in the query |
| similar_experiences    | P2       | 120 s| the stage is one of the gate stages   |
| device_context         | P2       | 0    | first message, then every 5 turns     |
| active_agents_history  | P1       | 0    | there were agent/tool calls           |

Each source writes with the templates of the turn's locale (`_templates`), and
every value it writes is escaped by the block renderer. A source that has nothing
to say returns None (the receipt shows it as "empty").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from .._trace import AttrValue
from .._trace import current as current_tracer
from ..knowledge import KnowledgeStore
from ..memory import Memory, MemoryHit, MemoryStore, Scope
from ..model._blocks import Block, Priority
from ..model._parts import ToolCallPart
from ..stores._cache import user_memory_tag
from ._base import FetchResult, SourceBase, Trigger, every_n_turns, keywords, stage
from ._state import AgentCall, Turn
from ._templates import templates_for

__all__ = [
    "AgentHistorySource",
    "AssessmentSource",
    "CollectedInfoSource",
    "ConversationStatsSource",
    "DeviceContextSource",
    "RelevantKnowledgeSource",
    "SimilarExperiencesSource",
    "UserMemorySource",
    "consultation_sources",
    "consultation_templates",
    "default_sources",
]


def _t(turn: Turn, overrides: Mapping[str, str] | None) -> dict[str, str]:
    return templates_for(turn.locale, overrides)


@dataclass
class UserMemorySource(SourceBase):
    """Top memories by importance plus those relevant to the message, deduplicated."""

    store: MemoryStore | None = None
    top_n: int = 5
    search_n: int = 3
    name: str = "user_memory"
    priority: int = Priority.P0
    ttl: float = 60.0
    deadline: float = 0.5
    templates: Mapping[str, str] | None = None

    def cache_key(self, turn: Turn) -> str:
        # The relevant half depends on the query; the whole block on the user: the cache
        # namespace is per tenant and conversation, and two users may share a conversation
        # id (the engine's default is "default"), which must never share their memories.
        return f"{turn.user}:" + hashlib.blake2b(turn.query.encode(), digest_size=8).hexdigest()

    def cache_tags(self, turn: Turn) -> Iterable[str]:
        return {user_memory_tag(turn.tenant, turn.user), *self.tags}

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.store is None:
            return None
        scope = Scope(turn.tenant, turn.user)
        top = await self.store.top(scope, self.top_n)
        hits = (
            await _search_memory(self.store, scope, turn.query, self.search_n) if turn.query else []
        )
        seen: set[str] = set()
        memories: list[Memory] = []
        for m in [*top, *(h.memory for h in hits)]:
            key = m.id or m.content
            if key not in seen:
                seen.add(key)
                memories.append(m)
        if not memories:
            return None
        t = _t(turn, self.templates)
        lines = [t["memory.header"]]
        lines += [
            t["memory.item"].format(
                category=m.category.upper(), content=m.content, importance=m.importance
            )
            for m in memories
        ]
        ids = ",".join(m.id for m in memories if m.id)
        return Block(self.name, "\n".join(lines), self.priority, provenance=f"memory:{ids}")


async def _search_memory(
    store: MemoryStore, scope: Scope, query: str, n: int
) -> Sequence[MemoryHit]:
    """``store.search``, in a ``contextwright.memory.search`` span when tracing (the query
    text only with ``capture_content``)."""
    tracer = current_tracer()
    if not tracer.enabled:
        return await store.search(scope, query, n)
    attrs: dict[str, AttrValue] = {
        "gen_ai.operation.name": "retrieval",
        "contextwright.memory.limit": n,
    }
    if tracer.capture_content:
        attrs["gen_ai.retrieval.query.text"] = query
    with tracer.span("contextwright.memory.search", attrs) as span:
        hits = await store.search(scope, query, n)
        span.set("contextwright.memory.hits", len(hits))
    return hits


# An example label map and core fields of the consultation preset; pass your own.
DEFAULT_LABELS_ZH = {
    "age": "年龄", "education": "学历", "university": "毕业院校", "workYears": "工作年限",
    "industry": "行业", "annualIncome": "年收入", "maritalStatus": "婚姻状况", "children": "子女",
    "languageAbility": "语言能力", "nationality": "国籍",
}  # fmt: skip


@dataclass
class CollectedInfoSource(SourceBase):
    """The fields collected so far, by label, and the core fields still missing."""

    labels: Mapping[str, str] = field(default_factory=dict)
    core_fields: Sequence[str] = ()
    name: str = "collected_info"
    priority: int = Priority.P0
    templates: Mapping[str, str] | None = None

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        info = turn.state.collected_info
        if not info:
            return None
        t = _t(turn, self.templates)
        labels = dict(DEFAULT_LABELS_ZH) if turn.locale.startswith("zh") else {}
        labels.update(self.labels)
        lines = [t["info.header"]]
        lines += [t["info.item"].format(label=labels.get(k, k), value=v) for k, v in info.items()]
        missing = [labels.get(k, k) for k in self.core_fields if info.get(k) in (None, "")]
        if self.core_fields:
            lines.append(
                t["info.missing"].format(fields=t["info.sep"].join(missing))
                if missing
                else t["info.complete"]
            )
        return Block(self.name, "\n".join(lines), self.priority, provenance="state.collected_info")


@dataclass
class ConversationStatsSource(SourceBase):
    """Turns, duration, stage and stage history, and the user's reply style."""

    stage_names: Mapping[str, str] = field(default_factory=dict)
    name: str = "conversation_stats"
    priority: int = Priority.P1
    templates: Mapping[str, str] | None = None
    sample: int = 50  # user messages looked at for the reply style

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        t = _t(turn, self.templates)
        state = turn.state
        turns = turn.turn_number
        lengths: list[int] = []
        for m in reversed(turn.history):  # newest first; a bounded sample keeps this cheap
            if m.role == "user":
                lengths.append(len(m.text))
                if len(lengths) >= self.sample:
                    break
        lengths.append(len(turn.query))
        avg = round(sum(lengths) / len(lengths))
        style = (
            t["style.terse"]
            if avg < 20
            else t["style.short"]
            if avg < 50
            else t["style.medium"]
            if avg < 150
            else t["style.long"]
        )  # fmt: skip  (average characters per user message)
        started = state.started_at
        if started is None and turn.history and turn.history[0].created_at is not None:
            started = turn.history[0].created_at
        lines = [t["stats.header"], t["stats.turns"].format(turns=turns)]
        if started is not None:
            lines.append(
                t["stats.duration"].format(minutes=max(0, round((turn.now - started) / 60)))
            )
        if state.stage is not None:
            name = self.stage_names.get(state.stage, state.stage)
            lines.append(t["stats.stage"].format(stage=name, stage_turn=state.stage_turns + 1))
        if state.stage_history:
            hist = t["stats.history_sep"].join(
                t["stats.history_item"].format(
                    stage=self.stage_names.get(v.stage, v.stage), turns=v.turns
                )
                for v in state.stage_history
            )
            lines.append(t["stats.history"].format(history=hist))
        lines.append(t["stats.style"].format(avg=avg, style=style))
        return Block(self.name, "\n".join(lines), self.priority, provenance="computed")


@dataclass
class AssessmentSource(SourceBase):
    name: str = "assessment_result"
    priority: int = Priority.P0
    templates: Mapping[str, str] | None = None

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        a = turn.state.assessment
        if a is None:
            return None
        t = _t(turn, self.templates)
        lines = [t["assessment.header"]]
        if a.recommended:
            lines.append(
                t["assessment.recommended"].format(items=t["assessment.sep"].join(a.recommended))
            )
        if a.score is not None:
            lines.append(t["assessment.score"].format(score=a.score))
        if a.highlights:
            lines.append(t["assessment.highlights"])
            lines += [t["assessment.item"].format(text=h) for h in a.highlights]
        if a.concerns:
            lines.append(t["assessment.concerns"])
            lines += [t["assessment.item"].format(text=c) for c in a.concerns]
        if a.note:
            lines.append(a.note)
        return Block(self.name, "\n".join(lines), self.priority, provenance="state.assessment")


def _passage_lines(t: Mapping[str, str], text: str) -> list[str]:
    return [t["knowledge.line"].format(line=line) for line in text.splitlines() if line.strip()]


@dataclass
class RelevantKnowledgeSource(SourceBase):
    """Passages from a knowledge store, only when the query mentions a gate keyword."""

    store: KnowledgeStore | None = None
    gate: Sequence[str] = ()
    limit: int = 3
    min_score: float = 0.0
    name: str = "relevant_knowledge"
    priority: int = Priority.P1
    ttl: float = 30.0
    templates: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.trigger is None and self.gate:
            self.trigger = keywords(self.gate)

    def cache_key(self, turn: Turn) -> str:
        return hashlib.blake2b(turn.query.encode(), digest_size=8).hexdigest()

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.store is None or not turn.query:
            return None
        hits = [
            h for h in await self.store.search(turn.query, self.limit) if h.score >= self.min_score
        ]
        if not hits:
            return None
        t = _t(turn, self.templates)
        lines = [t["knowledge.header"]]
        for h in hits:
            lines.append("")
            lines.append(
                t["knowledge.source"].format(source=h.passage.source or "-", score=h.score)
            )
            lines += _passage_lines(t, h.passage.content)
        sources = ",".join(h.passage.source for h in hits)
        return Block(self.name, "\n".join(lines), self.priority, provenance=f"knowledge:{sources}")


@dataclass
class SimilarExperiencesSource(SourceBase):
    """Active system experiences relevant to the message, in the gate stages only."""

    store: KnowledgeStore | None = None
    stages: Sequence[str] = ()
    limit: int = 3
    name: str = "similar_experiences"
    priority: int = Priority.P2
    ttl: float = 120.0
    templates: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.trigger is None and self.stages:
            self.trigger = stage(*self.stages)

    def cache_key(self, turn: Turn) -> str:
        return hashlib.blake2b(turn.query.encode(), digest_size=8).hexdigest()

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.store is None or not turn.query:
            return None
        hits = [h for h in await self.store.search(turn.query, self.limit) if h.passage.active]
        if not hits:
            return None
        t = _t(turn, self.templates)
        lines = [t["experience.header"]]
        lines += [
            t["experience.item"].format(
                n=i, category=h.passage.category or "-", content=h.passage.content
            )
            for i, h in enumerate(hits, 1)
        ]
        return Block(self.name, "\n".join(lines), self.priority, provenance="experiences")


_MOBILE = ("mobile", "phone", "iphone", "android", "手机", "移动")


@dataclass
class DeviceContextSource(SourceBase):
    """Device, time zone, region and local time; first message, then every ``every`` turns."""

    every: int = 5
    name: str = "device_context"
    priority: int = Priority.P2
    templates: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.trigger is None:
            self.trigger = every_n_turns(self.every)

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        d = turn.state.device
        if d is None:
            return None
        t = _t(turn, self.templates)
        lines = [t["device.header"]]
        for key, value in (
            ("device.type", d.device_type), ("device.timezone", d.timezone),
            ("device.region", d.region), ("device.locale", d.locale),
        ):  # fmt: skip
            if value:
                lines.append(t[key].format(value=value))
        if d.utc_offset_minutes is not None:
            local = datetime.fromtimestamp(
                turn.now, timezone(timedelta(minutes=d.utc_offset_minutes))
            )
            lines.append(t["device.time"].format(value=local.strftime("%Y-%m-%d %a %H:%M")))
        if any(k in d.device_type.lower() for k in _MOBILE):
            lines.append(t["device.mobile_hint"])
        if len(lines) == 1:
            return None
        return Block(self.name, "\n".join(lines), self.priority, provenance="state.device")


def _ago(t: Mapping[str, str], seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return t["ago.seconds"].format(n=s)
    if s < 3600:
        return t["ago.minutes"].format(n=s // 60)
    return t["ago.hours"].format(n=s // 3600)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class AgentHistorySource(SourceBase):
    """The last ``keep`` agent or tool calls with relative times.

    Reads ``state.agent_calls`` when the caller records them; otherwise it derives
    them from the tool calls in the recent history (needs ``created_at``).
    """

    keep: int = 5
    output_chars: int = 200  # each call's output summary is cut to 200 characters
    scan: int = 60  # history messages looked at when deriving calls
    name: str = "active_agents_history"
    priority: int = Priority.P1
    templates: Mapping[str, str] | None = None

    def _derive(self, turn: Turn) -> list[AgentCall]:
        calls: list[AgentCall] = []
        results: dict[str, str] = {}
        history = turn.history
        for m in history[max(0, len(history) - self.scan) :]:
            for r in m.tool_results:
                results[r.call_id] = r.text
        for m in history[max(0, len(history) - self.scan) :]:
            for p in m.parts:
                if isinstance(p, ToolCallPart):
                    when = m.created_at if m.created_at is not None else turn.now
                    calls.append(AgentCall(p.name, when, p.arguments, results.get(p.id, "")))
        return calls

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        calls = list(turn.state.agent_calls) or self._derive(turn)
        if not calls:
            return None
        calls = sorted(calls, key=lambda c: c.invoked_at)[-self.keep :]
        t = _t(turn, self.templates)
        lines = [t["agents.header"]]
        for i, c in enumerate(calls, 1):
            lines.append(
                t["agents.item"].format(
                    n=i, ago=_ago(t, turn.now - c.invoked_at), name=c.name,
                    input=_clip(c.input_summary, self.output_chars),
                )
            )  # fmt: skip
            if c.output_summary:
                lines.append(
                    t["agents.result"].format(output=_clip(c.output_summary, self.output_chars))
                )
        lines.append(t["agents.footer"])
        return Block(self.name, "\n".join(lines), self.priority, provenance="agent_calls")


def _override(sources: list[SourceBase], overrides: Mapping[str, Trigger] | None) -> None:
    for s in sources:
        if overrides and s.name in overrides:
            s.trigger = overrides[s.name]


def default_sources(
    *,
    memory: MemoryStore | None = None,
    knowledge: KnowledgeStore | None = None,
    knowledge_gate: Sequence[str] = (),
    trigger_overrides: Mapping[str, Trigger] | None = None,
) -> list[SourceBase]:
    """The general sources: the user's memories and the relevant knowledge.

    Each comes only with its store: with neither, the list is empty and a build
    holds the system prompt, the summary, the history, the message and the goal
    restatement, nothing else. (The history, its summary and the recall of older
    turns come from the engine and `Conversations`, not from sources.) With
    ``knowledge_gate``, knowledge is searched only when one of those keywords is in
    the message. For the advisory-conversation set, see `consultation_sources`.
    """
    sources: list[SourceBase] = []
    if memory is not None:
        sources.append(UserMemorySource(store=memory))
    if knowledge is not None:
        sources.append(RelevantKnowledgeSource(store=knowledge, gate=tuple(knowledge_gate)))
    _override(sources, trigger_overrides)
    return sources


def consultation_sources(
    *,
    memory: MemoryStore | None = None,
    knowledge: KnowledgeStore | None = None,
    experiences: KnowledgeStore | None = None,
    knowledge_gate: Sequence[str] = (),
    experience_stages: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    core_fields: Sequence[str] = (),
    stage_names: Mapping[str, str] | None = None,
    trigger_overrides: Mapping[str, Trigger] | None = None,
) -> list[SourceBase]:
    """The consultation preset: all eight built-in sources, opt-in.

    For an advisory conversation that collects information over stages: besides
    memories and knowledge, the collected fields (``labels``, ``core_fields``),
    conversation statistics and the user's reply style, an assessment, similar
    past experiences, the device context and the agents called recently. Pair it
    with ``ContextEngine(templates=consultation_templates(locale))`` for its
    guided goal restatement. `default_sources` is the general set.
    """
    sources: list[SourceBase] = [
        UserMemorySource(store=memory),
        CollectedInfoSource(labels=dict(labels or {}), core_fields=tuple(core_fields)),
        ConversationStatsSource(stage_names=dict(stage_names or {})),
        AssessmentSource(),
        RelevantKnowledgeSource(store=knowledge, gate=tuple(knowledge_gate)),
        SimilarExperiencesSource(store=experiences, stages=tuple(experience_stages)),
        DeviceContextSource(),
        AgentHistorySource(),
    ]
    _override(sources, trigger_overrides)
    return sources


def consultation_templates(locale: str = "en") -> dict[str, str]:
    """Template overrides of the consultation preset for ``locale``: the guided goal.

    The goal restatement then carries a status line and a three-step guide
    (analyse tool output first, plan a complex goal, answer the goal).
    """
    return {"goal.text": templates_for(locale)["goal.guided"]}
