"""Provider content rendered for another provider: converted where a faithful form exists,
dropped otherwise, and a `RenderNote` saying which and why.

Every renderer takes ``notes`` (a list, or None); for each part it cannot send as
it came it appends a note, and `BuiltContext.render` turns the notes into receipt
lines (docs/providers.md, "Across providers"):

* thinking (Anthropic ``thinking``, Responses ``reasoning``) is dropped: another
  provider cannot verify or read it, and it is the cheapest content to lose;
* a compaction (Anthropic block, Responses item) is dropped: only the provider
  that wrote it can read it (the engine's own summary stands in, if there is one);
* another provider part with a text form (a document's text, search results, a
  refusal, a tool's printed output) is sent as text; one without is dropped;
* a neutral part carrying another provider's native form (text with citations,
  a call with its item id) is sent in the neutral form, without those fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..model._native import ProviderPart, ThinkingPart, is_compaction, is_thinking
from ..model._parts import Part

__all__ = ["NAMES", "RenderNote", "foreign_text", "native_for", "note"]

# The providers' names in notes.
NAMES = {"anthropic": "Anthropic", "responses": "OpenAI Responses", "openai": "OpenAI Chat"}


@dataclass(frozen=True, slots=True)
class RenderNote:
    """One part a renderer did not send as it came: ``message`` is its input index."""

    message: int
    part: str  # e.g. "anthropic thinking", "responses reasoning", "anthropic document"
    action: Literal["dropped", "converted"]
    reason: str


def note(notes: list[RenderNote] | None, index: int, part: str, action: Any, reason: str) -> None:
    if notes is not None:
        notes.append(RenderNote(index, part, action, reason))


def _label(part: ThinkingPart | ProviderPart) -> str:
    if isinstance(part, ThinkingPart):
        return "anthropic redacted_thinking" if part.redacted else "anthropic thinking"
    return f"{part.provider} {part.kind}"


def foreign_text(
    part: ThinkingPart | ProviderPart, target: str, index: int, notes: list[RenderNote] | None
) -> str | None:
    """The text ``target``'s renderer sends for another provider's ``part``, or None.

    Notes what was done. Thinking and compactions are never converted.
    """
    label, there = _label(part), NAMES.get(target, target)
    if is_thinking(part):
        note(notes, index, label, "dropped", f"{there} cannot read another provider's reasoning")
        return None
    if is_compaction(part):
        note(
            notes, index, label, "dropped",
            f"only the provider that wrote a compaction can read it; {there} is sent the "
            "engine's own summary, if there is one",
        )  # fmt: skip
        return None
    text = part.text if isinstance(part, ProviderPart) else ""
    if text.strip():
        note(notes, index, label, "converted", f"sent to {there} as its text")
        return text
    note(notes, index, label, "dropped", f"{there} has no such content and it has no text form")
    return None


def native_for(
    part: Part, target: str, index: int, notes: list[RenderNote] | None
) -> dict[str, Any] | None:
    """The native wire form of ``part`` if it is ``target``'s, else None (noting a foreign one)."""
    native = getattr(part, "native", None)
    if native is None:
        return None
    if native.provider == target:
        data: dict[str, Any] = native.data
        return data
    note(
        notes, index, f"{native.provider} {native.kind}", "converted",
        f"sent to {NAMES.get(target, target)} in the neutral form, without the fields only "
        f"{NAMES.get(native.provider, native.provider)} has (citations, ids, cache_control)",
    )  # fmt: skip
    return None
