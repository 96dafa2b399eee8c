"""Thinking and the rules for leaving it out: which turns may lose it, and the copy without it.

A model's reasoning is the cheapest content to lose, and the providers say when it
may go (docs/providers.md, "Thinking"):

* **Anthropic** requires the thinking of the last assistant turn of a tool loop in
  progress to come back unchanged; thinking of earlier turns may be omitted (older
  models strip it themselves). A tool loop is everything after the last user
  message, so `loop_start` finds where it begins and nothing from there on is
  thinned.
* **OpenAI Responses** ties a ``reasoning`` item to the item after it by id: a
  reasoning item without its following item, or a following item (by id) without
  its reasoning, is rejected. Leaving reasoning out therefore also takes the ids
  off the items it led to (a function call's id is optional; an assistant message
  goes back in its easy form), and reasoning that led to an item whose id is
  required (a computer call, a server-run tool call) is kept.

`drop_thinking` gives the copy of an assistant message without its droppable
thinking; ``metadata["thinking_dropped"]`` says how many parts went.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._messages import Message
from ._native import REASONING_KINDS, ProviderPart, ThinkingPart, dump_payload, is_thinking
from ._parts import Part, TextPart, ToolCallPart

__all__ = ["drop_thinking", "has_thinking", "loop_start"]

# Responses items the model made whose id is optional: they may lose it with their reasoning.
_ID_OPTIONAL = frozenset({"function_call", "custom_tool_call", "shell_call", "apply_patch_call"})


def has_thinking(message: Message) -> bool:
    return message.role == "assistant" and any(is_thinking(p) for p in message.parts)


def loop_start(history: Sequence[Message]) -> int:
    """The index after the last user message: where the turn in progress (a tool loop) starts."""
    i = len(history)
    while i > 0 and history[i - 1].role != "user":
        i -= 1
    return i


def _id_free(p: Part) -> bool:
    """Whether ``p`` can be sent without the id that ties it to a reasoning item."""
    if isinstance(p, (TextPart, ThinkingPart)):
        return True
    native = p.native if isinstance(p, ToolCallPart) else p if isinstance(p, ProviderPart) else None
    if native is None or native.provider != "responses":
        return True
    return native.kind in _ID_OPTIONAL or native.kind in REASONING_KINDS


def _without_id(p: Part) -> Part:
    if isinstance(p, TextPart) and p.native is not None and p.native.provider == "responses":
        return TextPart(p.text)  # the easy message form: no id, no annotations
    if isinstance(p, ToolCallPart) and p.native is not None and p.native.provider == "responses":
        data = p.native.data
        data.pop("id", None)
        native = ProviderPart("responses", p.native.kind, dump_payload(data, "native"))
        return ToolCallPart(p.id, p.name, p.arguments, native)
    return p


def drop_thinking(message: Message) -> Message | None:
    """``message`` without the thinking it may lose, or None if it has none to lose."""
    if not has_thinking(message):
        return None
    parts = message.parts
    kept: list[Part] = []
    dropped = 0
    unbound = False  # a reasoning item went: the items after it lose their ids
    for i, p in enumerate(parts):
        if isinstance(p, ThinkingPart):
            dropped += 1
            continue
        reasoning = isinstance(p, ProviderPart) and p.kind in REASONING_KINDS
        if reasoning and all(_id_free(q) for q in parts[i + 1 :]):
            dropped += 1
            unbound = True
            continue
        kept.append(_without_id(p) if unbound else p)
    if not dropped:
        return None
    meta = dict(message.metadata)
    meta["thinking_dropped"] = dropped
    return message.replace(parts=tuple(kept), metadata=meta)
