"""Merging extracted memories with what a memory store already knows, before writing them.

`merge` is the writer's last step (`MemoryWriter`), and cheap: no model call.

1. exact duplicates within the batch are folded together (`dedupe_key`: NFKC so
   full width equals half width, case, punctuation and whitespace ignored);
2. a keyed item ("age", "employer", …) is compared with the live memory of that
   scope, category and key: the same statement again is a duplicate; a different
   one is written with the key, and the store *supersedes* the old memory in the
   same transaction (it stays in ``history``);
3. an unkeyed item that the store's ``find_similar`` finds at or above the
   threshold is a duplicate.

A duplicate is not written again; if it now comes with a higher importance, the
stored memory's importance is raised to it. Merging the same batch twice writes
nothing the second time, which makes a memory job safe to run again.
`MemoryWriterStore` is what this needs from a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from ..memory._extract import Extracted, dedupe_key
from ..stores._memory import Memory, MemoryHit, Scope

__all__ = ["MemoryWriterStore", "Merged", "merge"]


@runtime_checkable
class MemoryWriterStore(Protocol):
    """What the writer needs from a memory store (`SQLiteMemoryStore` has it all)."""

    def add(
        self,
        scope: Scope,
        content: str,
        *,
        category: str = "fact",
        importance: int = 50,
        key: str | None = None,
        source_message_ids: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        embedding: Any = None,
    ) -> Memory: ...

    def find_similar(
        self,
        scope: Scope,
        content: str,
        *,
        category: str | None = None,
        threshold: float = 0.85,
        limit: int = 5,
    ) -> Sequence[MemoryHit]: ...

    def history(
        self, scope: Scope, key: str | None = None, category: str | None = None
    ) -> Sequence[Memory]: ...

    def update_importance(self, scope: Scope, id: str, importance: int) -> Memory | None: ...


@dataclass(frozen=True)
class Merged:
    """What one `merge` did: items written, of them superseding a keyed value, and
    items not written (duplicates, in the batch or of stored memories)."""

    written: int
    superseded: int
    deduplicated: int
    changed: bool  # whether the store changed (a write, or a raised importance)


def merge(
    store: MemoryWriterStore, scope: Scope, items: Sequence[Extracted], *, threshold: float,
    extractor: str,
) -> Merged:  # fmt: skip
    """Write what of ``items`` is new to ``store`` (module docstring); ``extractor``
    names who extracted them, in each memory's meta."""
    batch: dict[str, Extracted] = {}
    folded_away = 0
    for item in items:
        fold = dedupe_key(item.content)
        if not fold:
            continue
        seen = batch.get(fold)
        if seen is None:
            batch[fold] = item
            continue
        folded_away += 1
        ids = (
            *seen.source_message_ids,
            *(i for i in item.source_message_ids if i not in seen.source_message_ids),
        )
        batch[fold] = replace(
            seen, importance=max(seen.importance, item.importance), source_message_ids=ids
        )
    written = superseded = duplicates = 0
    changed = False
    for fold, item in batch.items():
        live = _live_keyed(store, scope, item) if item.key is not None else []
        known = _known(store, scope, item, fold, live, threshold)
        if known is None:
            store.add(
                scope, item.content, category=item.category, importance=item.importance,
                key=item.key, source_message_ids=item.source_message_ids,
                meta={"extractor": extractor, "confidence": item.confidence},
            )  # fmt: skip
            written += 1
            superseded += bool(live)  # the store superseded the live memory of the key
            changed = True
            continue
        duplicates += 1
        if item.importance > known.importance and known.id:
            store.update_importance(scope, known.id, item.importance)
            changed = True
    return Merged(written, superseded, duplicates + folded_away, changed)


def _live_keyed(store: MemoryWriterStore, scope: Scope, item: Extracted) -> list[Memory]:
    return [
        m
        for m in store.history(scope, key=item.key, category=item.category)
        if m.superseded_by is None and m.active
    ]


def _known(
    store: MemoryWriterStore, scope: Scope, item: Extracted, fold: str, live: Sequence[Memory],
    threshold: float,
) -> Memory | None:  # fmt: skip
    """The stored memory ``item`` duplicates, if any (see the module docstring)."""
    if item.key is not None:
        # Same key: only the same statement is a duplicate; "35" → "36" is an update,
        # however similar the two texts are.
        return next((m for m in live if dedupe_key(m.content) == fold), None)
    hits = store.find_similar(
        scope, item.content, category=item.category, threshold=threshold, limit=3
    )
    for hit in hits:
        if hit.score >= threshold or dedupe_key(hit.memory.content) == fold:
            return hit.memory
    return None
