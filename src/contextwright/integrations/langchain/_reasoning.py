"""A model's reasoning in LangChain messages ↔ the parts that keep it, `ThinkingPart` and `ProviderPart`.

A thinking model's reasoning must go back to it unchanged: Anthropic rejects a
tool loop whose last assistant turn lost its thinking blocks or changed a
signature, and the Responses API rejects a call that a reasoning item led to
without that item. LangChain's provider packages carry it in an assistant
message in these shapes, each read into a part the engine counts and sends:

* ``{"type": "thinking", "thinking": ..., "signature": ...}`` (langchain-anthropic;
  langchain-google-genai writes the same block, its signature optional) → a
  `ThinkingPart` with that text and signature (none if the block has none);
* ``{"type": "redacted_thinking", "data": ...}`` → a redacted `ThinkingPart`;
* the v1 standard ``{"type": "reasoning", "reasoning": ..., "extras": {"signature": ...}}``
  (langchain-anthropic with ``output_version="v1"``) → a `ThinkingPart`;
* a Responses reasoning item as a content block, ``{"type": "reasoning", "id": "rs_...",
  "summary": [...], ...}`` (langchain-openai with ``output_version="responses/v1"``),
  or as ``additional_kwargs["reasoning"]`` (its default ``"v0"``) → a `ProviderPart`
  of provider ``"responses"``, kind ``"reasoning"``, the item as its payload.

Each is written back as it came: the block's other keys (a streamed ``index``, an
``extras`` entry) ride in the content template (`_convert`), so the same dict comes
back, in the same place. A v1 ``reasoning`` block with neither a signature nor a
summary names no provider that could take it back (Ollama's, DeepSeek's reasoning
text): it stays in the message metadata, as any block with no part does, and is not
sent. Bad input — a thinking text that is not a string, a signature that is not a
string, redacted thinking without its data — is an `InvalidMessageError` naming the
block and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._errors import InvalidMessageError
from ...model._checks import _require_str
from ...model._native import ProviderPart, ThinkingPart, dump_payload
from ...model._parts import ToolCallPart

__all__ = [
    "FC_IDS",
    "THINKING_SLOTS",
    "call_block",
    "call_ids",
    "call_natives",
    "fits_slot",
    "reasoning_kwarg",
    "thinking_in",
    "thinking_out",
]

FC_IDS = "__openai_function_call_ids__"  # langchain-openai's map: tool call id -> item id

# Content-template slots that hold a model's reasoning (`_convert` templates).
THINKING_SLOTS = frozenset({"thinking", "redacted_thinking", "reasoning", "responses"})

Reasoning = ThinkingPart | ProviderPart


def _text(value: object, where: str, *, empty_ok: bool = True) -> str:
    """``value`` if it is a string (``empty_ok``: may be empty), else `InvalidMessageError`."""
    _require_str(value, where, empty_ok=empty_ok)
    assert isinstance(value, str)
    return value


def _responses(item: Mapping[str, Any], where: str) -> ProviderPart:
    try:
        return ProviderPart("responses", "reasoning", dump_payload(item, where))
    except InvalidMessageError as exc:
        raise InvalidMessageError(where, exc.problem) from None


def thinking_in(block: Mapping[str, Any], where: str) -> tuple[Reasoning, dict[str, Any]] | None:
    """A reasoning block of an assistant message as its part and template slot (None: not one)."""
    kind = block.get("type")
    slot: dict[str, Any] = {"t": kind}
    known: tuple[str, ...] = ("type",)
    part: Reasoning
    if kind == "thinking":
        signature = block.get("signature")
        if signature is not None:
            known = ("type", "signature")
            _require_str(signature, f"{where}.signature", empty_ok=True)
        part = ThinkingPart(_text(block.get("thinking"), f"{where}.thinking"), signature)
        known += ("thinking",)
    elif kind == "redacted_thinking":
        data = _text(block.get("data"), f"{where}.data", empty_ok=False)
        part, known = ThinkingPart(redacted=True, data=data), ("type", "data")
    elif kind == "reasoning" and "summary" in block:  # a Responses item: all of it is the payload
        known = tuple(k for k in block if k != "index")
        part, slot = _responses({k: block[k] for k in known}, where), {"t": "responses"}
    elif kind == "reasoning":
        extras = block.get("extras")
        signature = extras.get("signature") if isinstance(extras, Mapping) else None
        if extras is None or signature is None:
            return None  # no signature, no summary: no provider known to take it back
        _require_str(signature, f"{where}.extras.signature", empty_ok=True)
        part = ThinkingPart(_text(block.get("reasoning", ""), f"{where}.reasoning"), signature)
        known = ("type", "reasoning", "extras")
        slot["extras"] = {k: v for k, v in extras.items() if k != "signature"}
        if "reasoning" not in block:
            slot["bare"] = True
    else:
        return None
    rest = {k: v for k, v in block.items() if k not in known}
    if rest:
        slot["rest"] = rest
    return part, slot


def thinking_out(part: Reasoning, slot: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The LangChain block of a reasoning part, in the shape its slot recorded (None: none).

    Without a slot (a part that did not come from LangChain) thinking becomes
    langchain-anthropic's block and a Responses reasoning item its content block;
    other provider parts have no LangChain form and are left out, as before.
    """
    rest = dict(slot.get("rest", {})) if slot else {}
    if isinstance(part, ProviderPart):
        if part.provider != "responses" or part.kind != "reasoning":
            return None
        return {**part.data, **rest}
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.data, **rest}
    if slot is not None and slot["t"] == "reasoning":
        out: dict[str, Any] = {"type": "reasoning"}
        if not slot.get("bare") or part.text:
            out["reasoning"] = part.text
        out["extras"] = {**slot.get("extras", {}), "signature": part.signature}
        return {**out, **rest}
    out = {"type": "thinking", "thinking": part.text}
    if part.signature is not None:
        out["signature"] = part.signature
    return {**out, **rest}


def fits_slot(kind: str, part: object) -> bool:
    """Whether a reasoning ``part`` is still what a template slot of ``kind`` held."""
    if kind == "responses":
        return isinstance(part, ProviderPart)
    if not isinstance(part, ThinkingPart):
        return False
    if kind == "redacted_thinking":
        return part.redacted
    return not part.redacted and (kind == "thinking" or part.signature is not None)


def reasoning_kwarg(value: object, where: str) -> ProviderPart | None:
    """``additional_kwargs["reasoning"]`` (langchain-openai's Responses reasoning item) as a part."""
    if not isinstance(value, Mapping) or value.get("type", "reasoning") != "reasoning":
        return None
    return _responses(value, where)


def call_natives(
    calls: list[ToolCallPart], kwargs: dict[str, Any], tpl: list[Any] | None, lc: dict[str, Any]
) -> list[ToolCallPart]:
    """``calls`` with the Responses ``function_call`` items langchain-openai keeps for them.

    The Responses API takes a reasoning item back only followed by the item it led
    to, with that item's id: a function call's ``fc_...`` id, which langchain-openai
    keeps in ``additional_kwargs["__openai_function_call_ids__"]`` (``"v0"``) or in
    a ``function_call`` content block (``"responses/v1"``). Each becomes the call's
    ``native`` form, as the Responses adapter reads it, so that the id is counted,
    sent, and taken off with the reasoning when older thinking is left out
    (`model._thinking`). The map leaves ``kwargs`` (``lc["fc_ids"]`` notes it) and
    a block's template slot becomes ``{"t": "fc", "call": call_id}``.
    """
    by_id = {c.id: c for c in calls}
    items: dict[str, dict[str, Any]] = {}
    ids = kwargs.get(FC_IDS)
    if isinstance(ids, Mapping) and all(
        k in by_id and isinstance(v, str) and v for k, v in ids.items()
    ):
        kwargs.pop(FC_IDS)
        lc["fc_ids"] = True
        for call_id, fc in ids.items():
            c = by_id[call_id]
            items[call_id] = {"type": "function_call", "id": fc, "call_id": call_id,
                              "name": c.name, "arguments": c.arguments}  # fmt: skip
    for i, t in enumerate(tpl or ()):
        block = t.get("block") if t["t"] == "keep" else None
        if not isinstance(block, Mapping) or block.get("type") != "function_call":
            continue
        call_id = block.get("call_id")
        if not isinstance(call_id, str) or call_id not in by_id or call_id in items:
            continue
        items[call_id] = {k: v for k, v in block.items() if k != "index"}
        slot: dict[str, Any] = {"t": "fc", "call": call_id}
        if "index" in block:
            slot["rest"] = {"index": block["index"]}
        tpl[i] = slot  # type: ignore[index]
    return [
        ToolCallPart(c.id, c.name, c.arguments, ProviderPart(
            "responses", "function_call", dump_payload(items[c.id], "native")
        )) if c.id in items else c
        for c in calls
    ]  # fmt: skip


def call_ids(calls: Sequence[ToolCallPart]) -> dict[str, str]:
    """``__openai_function_call_ids__`` again: each call's Responses item id, where it has one."""
    out = {}
    for c in calls:
        native = c.native.data if c.native is not None and c.native.provider == "responses" else {}
        if isinstance(native.get("id"), str):
            out[c.id] = native["id"]
    return out


def call_block(calls: Sequence[ToolCallPart], slot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``function_call`` content block of a template slot: the call's item as it is now."""
    for c in calls:
        if c.id == slot["call"] and c.native is not None and c.native.provider == "responses":
            return {**c.native.data, **slot.get("rest", {})}
    return None
