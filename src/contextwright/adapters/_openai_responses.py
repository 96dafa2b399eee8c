"""OpenAI Responses API: the ``input`` item list, to and from the neutral model.

The shapes follow the SDK's request types (``openai.types.responses``):

* messages are ``EasyInputMessageParam`` — ``{"role": ..., "content": ...}`` with a
  string, or a list of ``input_text`` / ``input_image`` parts;
* tool calls are ``ResponseFunctionToolCallParam`` —
  ``{"type": "function_call", "call_id", "name", "arguments"}``;
* tool results are ``FunctionCallOutput`` —
  ``{"type": "function_call_output", "call_id", "output"}`` where ``output`` is a
  string or a list of ``input_text`` / ``input_image`` parts.

Conventions, where the two models differ:

* **System and developer** both render with the role ``system_role``; later system
  messages stay in place (the Responses API accepts them anywhere in ``input``).
* **Assistant text** renders as one string (the API wants ``output_text`` rather
  than ``input_text`` parts for assistant content, and the easy string form avoids
  both); several text parts are joined with a newline. Each tool call becomes its
  own ``function_call`` item after the text.
* **Reading** attaches ``function_call`` items to the assistant message right
  before them (an assistant text item or another call), so an assistant turn with
  text and parallel calls reads back as one neutral message. Each
  ``function_call_output`` becomes one neutral tool message, with the tool name
  filled from its call.
* ``is_error`` and ``Message.name`` have no wire field and are dropped. Images in
  ``input`` messages always carry ``detail`` (the SDK type requires it): the part's
  own, else ``"auto"``.
* **Everything else the API returns** is read (`_responses_items`): reasoning items,
  built-in tool calls, item references and compaction items join the assistant
  message they follow as `ProviderPart` s; client-run calls (custom, computer,
  shell, apply_patch) are tool calls and their outputs tool results; an assistant
  ``message`` item with its ``id`` and annotations is kept whole as its text's
  native form. All of it is written back as it came, in order; another
  provider's parts are converted or dropped with a note (`_foreign`). An
  assistant ``message`` item joins the assistant message before it while that
  one has no text yet (a response's reasoning, then its answer).
* An ``item_reference`` followed by outputs whose calls are not in the input
  stands for a stored call: it becomes that call (named ``item_reference``).
* ``input_file`` parts and images given by ``file_id`` are kept as provider parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError
from ..model._messages import Message
from ..model._native import ProviderPart, ThinkingPart, dump_payload
from ..model._parts import ImagePart, Part, TextPart, ToolCallPart
from ._common import (
    build_message,
    expect_list,
    expect_mapping,
    expect_messages,
    expect_neutral,
    expect_str,
    image_from_url,
    image_url,
    opt_str,
)
from ._foreign import RenderNote, foreign_text, native_for, note
from ._responses_items import (
    CALL_KINDS,
    MODEL_KINDS,
    OUTPUT_KINDS,
    USER_KINDS,
    call_part,
    item_text,
    neutral_output,
    result_part,
    same_call,
    same_result,
)
from ._rules import validate_responses

__all__ = ["from_responses", "render_responses"]

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")


# -- reading ----------------------------------------------------------------------------

_PLAIN_PARTS = {
    "input_text": {"type", "text"},
    "output_text": {"type", "text"},
    "refusal": {"type", "refusal"},
    "input_image": {"type", "image_url", "detail"},
}


def _parts(content: object, where: str, allowed: tuple[str, ...]) -> list[Part]:
    """Parts of a message ``content`` or a call ``output``: a string or a list of parts."""
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for j, raw in enumerate(expect_list(content, where)):
        here = f"{where}[{j}]"
        item = expect_mapping(raw, here)
        kind = item.get("type")
        if kind not in allowed:
            raise InvalidMessageError(
                f"{here}.type",
                f"unsupported content part type {kind!r} here (supported: {', '.join(allowed)})",
            )
        if kind in ("input_text", "output_text"):
            parts.append(TextPart(expect_str(item.get("text"), f"{here}.text")))
        elif kind == "refusal":
            parts.append(TextPart(expect_str(item.get("refusal"), f"{here}.refusal")))
        elif kind == "input_file" or (kind == "input_image" and item.get("image_url") is None):
            if item.get("file_id") is None and kind == "input_image":
                raise InvalidMessageError(f"{here}.image_url", "is required (or a file_id)")
            parts.append(ProviderPart("responses", str(kind), dump_payload(item, here)))
        else:  # input_image by URL
            url = expect_str(item.get("image_url"), f"{here}.image_url", empty_ok=False)
            image = image_from_url(url, opt_str(item.get("detail"), f"{here}.detail"))
            if not set(item) <= _PLAIN_PARTS["input_image"]:
                native = ProviderPart("responses", "input_image", dump_payload(item, here))
                image = ImagePart(image.url, image.data, image.media_type, image.detail, native)
            parts.append(image)
    return parts


def _plain_message(item: Mapping[str, Any]) -> bool:
    if not set(item) <= {"type", "role", "content"}:
        return False
    content = item["content"]
    return isinstance(content, str) or all(
        isinstance(c, Mapping) and set(c) <= _PLAIN_PARTS.get(str(c.get("type")), set())
        for c in content
    )


def _message(item: Mapping[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        raise InvalidMessageError(
            f"{where}.role", f"unknown role {role!r}; expected one of {', '.join(_MESSAGE_ROLES)}"
        )
    content = item.get("content")
    if content is None:
        raise InvalidMessageError(f"{where}.content", "is required")
    allowed: tuple[str, ...]
    if role == "assistant":
        # output_text is what the API returns; input_text is tolerated on reading.
        allowed = ("output_text", "input_text", "refusal")
    elif role == "user":
        allowed = ("input_text", "input_image", "input_file")
    else:
        allowed = ("input_text",)
    parts = _parts(content, f"{where}.content", allowed)
    if role == "assistant" and not _plain_message(item):
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
        parts = [TextPart(text, ProviderPart("responses", "message", dump_payload(item, where)))]
    return build_message(str(role), parts, where)


def _join(out: list[Message], part: Part, where: str, *, text: bool = False) -> None:
    """Add ``part`` to the assistant message just read (while it has no text, for text)."""
    last = out[-1] if out else None
    if (
        last is not None
        and last.role == "assistant"
        and not (text and any(isinstance(p, TextPart) for p in last.parts))
    ):
        out[-1] = last.replace(parts=(*last.parts, part))
    else:
        out.append(build_message("assistant", [part], where))


def _reference_call(out: list[Message], call_id: str) -> bool:
    """Make the first item reference of the last assistant message stand for ``call_id``."""
    if not out or out[-1].role not in ("assistant", "tool"):
        return False
    k = len(out) - 1
    while k >= 0 and out[k].role == "tool":
        k -= 1
    if k < 0 or out[k].role != "assistant":
        return False
    parts = list(out[k].parts)
    for j, p in enumerate(parts):
        if isinstance(p, ProviderPart) and p.kind == "item_reference":
            parts[j] = ToolCallPart(call_id, "item_reference", "{}", p)
            out[k] = out[k].replace(parts=tuple(parts))
            return True
    return False


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read a Responses API ``input`` item list into neutral messages.

    Raises `InvalidMessageError` naming the position (``input[2].call_id``) for
    anything malformed or unsupported.
    """
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, raw in enumerate(expect_messages(items, "input")):
        where = f"input[{i}]"
        item = expect_mapping(raw, where)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # EasyInputMessageParam: "type" is optional
        if not isinstance(kind, str):
            raise InvalidMessageError(f"{where}.type", "must be a string")
        if kind == "message":
            message = _message(item, where)
            if message.role == "assistant" and out and out[-1].role == "assistant":
                for p in message.parts:
                    _join(out, p, where, text=True)
            else:
                out.append(message)
        elif kind in CALL_KINDS:
            call = call_part(item, where)
            call_names[call.id] = call.name
            _join(out, call, where)
        elif kind in OUTPUT_KINDS:
            result = result_part(item, where, call_names)
            if result.call_id not in call_names and _reference_call(out, result.call_id):
                call_names[result.call_id] = "item_reference"
            out.append(build_message("tool", [result], where))
        elif kind in MODEL_KINDS:
            if kind == "item_reference":
                expect_str(item.get("id"), f"{where}.id", empty_ok=False)
            part = ProviderPart("responses", str(kind), dump_payload(item, where), item_text(item))
            _join(out, part, where)
        elif kind in USER_KINDS:
            part = ProviderPart("responses", str(kind), dump_payload(item, where))
            out.append(build_message("user", [part], where))
        else:
            raise InvalidMessageError(
                f"{where}.type",
                f"unsupported item type {kind!r} (supported: message, "
                + ", ".join(sorted({*CALL_KINDS, *OUTPUT_KINDS, *MODEL_KINDS, *USER_KINDS}))
                + ")",
            )
    return out


# -- rendering --------------------------------------------------------------------------


def _input_part(part: TextPart | ImagePart, *, require_detail: bool) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    d: dict[str, Any] = {"type": "input_image", "image_url": image_url(part)}
    if part.detail is not None or require_detail:
        d["detail"] = part.detail or "auto"
    return d


def _content(
    parts: Sequence[Part], k: int, notes: list[RenderNote] | None
) -> str | list[dict[str, Any]]:
    """A lone text part renders as a plain string, anything else as a list of parts."""
    out: list[dict[str, Any]] = []
    for p in parts:
        native = native_for(p, "responses", k, notes)
        if (
            isinstance(p, ImagePart)
            and native is not None
            and native.get("image_url") == image_url(p)
        ):
            out.append(native)
        elif isinstance(p, (TextPart, ImagePart)):
            out.append(_input_part(p, require_detail=True))
        elif isinstance(p, ProviderPart) and p.provider == "responses":
            out.append(p.data)
        elif isinstance(p, (ProviderPart, ThinkingPart)):
            converted = foreign_text(p, "responses", k, notes)
            if converted is not None:
                out.append({"type": "input_text", "text": converted})
    if len(out) == 1 and out[0]["type"] == "input_text":
        text: str = out[0]["text"]
        return text
    return out or ""


def _message_text(native: Mapping[str, Any]) -> str:
    content = native.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(
        str(c.get("text", c.get("refusal", ""))) for c in content or () if isinstance(c, Mapping)
    )


def _assistant(m: Message, k: int, notes: list[RenderNote] | None) -> list[dict[str, Any]]:
    """The items of an assistant message, in the order of its parts."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            out.append({"role": "assistant", "content": "\n".join(texts)})
            texts.clear()

    for p in m.parts:
        native = native_for(p, "responses", k, notes)
        if isinstance(p, TextPart):
            if native is not None and _message_text(native) == p.text:
                flush()
                out.append(native)
            else:
                texts.append(p.text)
        elif isinstance(p, ToolCallPart):
            flush()
            if native is not None and (
                same_call(native, p)
                or (native.get("type") == "item_reference" and p.name == "item_reference")
            ):
                out.append(native)
            else:
                out.append({"type": "function_call", "call_id": p.id, "name": p.name,
                            "arguments": p.arguments or "{}"})  # fmt: skip
        elif isinstance(p, ProviderPart) and p.provider == "responses":
            flush()
            out.append(p.data)
        elif isinstance(p, (ProviderPart, ThinkingPart)):
            text = foreign_text(p, "responses", k, notes)
            if text is not None:
                texts.append(text)
    flush()
    if not out:
        out.append({"role": "assistant", "content": ""})
    return out


def _results(
    m: Message, k: int, notes: list[RenderNote] | None, kinds: dict[str, str]
) -> list[dict[str, Any]]:
    """The output items of a tool message; ``kinds`` maps call ids to the call's item type."""
    out: list[dict[str, Any]] = []
    for r in m.tool_results:
        native = native_for(r, "responses", k, notes)
        if native is not None and same_result(native, r):
            out.append(native)
            continue
        answer = neutral_output(kinds.get(r.call_id, ""), r.call_id, r.text)
        if answer is not None:  # a client-run call is answered by its own output type
            out.append(answer)
            continue
        output: str | list[dict[str, Any]]
        if isinstance(r.content, str):
            output = r.content
        elif not r.content:
            output = ""
        else:
            output = [_input_part(p, require_detail=False) for p in r.content]
        out.append({"type": "function_call_output", "call_id": r.call_id, "output": output})
    return out


def render_responses(
    messages: Sequence[Message],
    *,
    system_role: Literal["system", "developer"] = "system",
    validate: bool = True,
    notes: list[RenderNote] | None = None,
) -> list[dict[str, Any]]:
    """Render neutral messages as a Responses API ``input`` item list.

    See the module docstring for the conventions. With ``validate`` (the default)
    the result is checked with `validate_responses`. Parts not sent as they came
    are told in ``notes`` (`RenderNote`), when a list is given.
    """
    if system_role not in ("system", "developer"):
        raise ConfigError(f"system_role must be 'system' or 'developer', got {system_role!r}")
    out: list[dict[str, Any]] = []
    kinds: dict[str, str] = {}  # call id -> the type of the call item sent for it
    for k, m in enumerate(expect_neutral(messages)):
        if m.role in ("system", "developer"):
            out.append({"role": system_role, "content": _content(m.parts, k, notes)})
        elif m.role == "user":
            items = [p for p in m.parts if isinstance(p, ProviderPart) and p.kind in USER_KINDS]
            rest = [p for p in m.parts if not any(p is x for x in items)]
            if rest or not items:
                out.append({"role": "user", "content": _content(rest, k, notes)})
            out.extend(p.data for p in items if p.provider == "responses")
            for p in items:
                if p.provider != "responses":
                    note(notes, k, f"{p.provider} {p.kind}", "dropped", "not a Responses item")
        elif m.role == "assistant":
            sent = _assistant(m, k, notes)
            kinds.update((i["call_id"], i["type"]) for i in sent if "call_id" in i)
            out.extend(sent)
        else:
            out.extend(_results(m, k, notes, kinds))
    if validate:
        validate_responses(out)
    return out
