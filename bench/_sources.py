"""The eight default sources the build benchmarks run, wired to in-memory stores.

`bench_build.py` (stateless) and `bench_history.py` (stateful) fill the same
stores the same way and differ only in what they hold: each passes its own
memories, passages and experiences, labels and core fields.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from contextwright import InMemoryKnowledgeStore, InMemoryMemoryStore, Memory, Scope
from contextwright.sources import always, consultation_sources

__all__ = ["eight_sources"]


def eight_sources(
    now: float,
    *,
    tenant: str,
    user: str,
    memories: Sequence[tuple[str, str, int]],
    passages: Sequence[tuple[str, str]],
    experiences: Sequence[tuple[str, str]],
    labels: Mapping[str, str],
    core_fields: Sequence[str],
) -> list[Any]:
    """`consultation_sources` over stores holding (text, category, importance) memories a day
    old, (text, source) passages and (text, category) experiences; the knowledge gate is
    "policy"/"notes", experiences apply in the resolution stage, and the device context
    fires every turn (by default only on turn 1 and every 5th), so all eight have
    something to say."""
    scope = Scope(tenant, user)
    memory = InMemoryMemoryStore()
    for text, cat, imp in memories:
        memory.add(scope, Memory(text, cat, imp, created_at=now - 86_400))
    knowledge = InMemoryKnowledgeStore()
    for text, src in passages:
        knowledge.add(text, src)
    lessons = InMemoryKnowledgeStore()
    for text, cat in experiences:
        lessons.add(text, "experiences", category=cat)
    return consultation_sources(
        memory=memory,
        knowledge=knowledge,
        experiences=lessons,
        knowledge_gate=("policy", "notes"),
        experience_stages=("resolution",),
        labels=dict(labels),
        core_fields=tuple(core_fields),
        stage_names={"intake": "Intake", "diagnosis": "Diagnosis", "resolution": "Resolution"},
        trigger_overrides={"device_context": always()},
    )
