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
* Items the neutral model cannot hold (``reasoning``, built-in tool calls, item
  references, files) are rejected with an `InvalidMessageError` naming the item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError
from ..model._messages import Message
from ..model._parts import ImagePart, Part, TextPart, ToolCallPart, ToolResultPart
from ._common import (
    build_message,
    check_arguments,
    expect_list,
    expect_mapping,
    expect_messages,
    expect_neutral,
    expect_str,
    image_from_url,
    image_url,
    opt_str,
    text_parts,
)
from ._foreign import RenderNote
from ._rules import validate_responses

__all__ = ["from_responses", "render_responses"]

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")


# -- reading ----------------------------------------------------------------------------


def _parts(content: object, where: str, allowed: tuple[str, ...]) -> list[TextPart | ImagePart]:
    """Parts of a message ``content`` or a call ``output``: a string or a list of parts."""
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[TextPart | ImagePart] = []
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
        else:  # input_image
            if item.get("image_url") is None and item.get("file_id") is not None:
                raise InvalidMessageError(
                    f"{here}.file_id", "images given by file_id are not supported; use image_url"
                )
            url = expect_str(item.get("image_url"), f"{here}.image_url", empty_ok=False)
            parts.append(image_from_url(url, opt_str(item.get("detail"), f"{here}.detail")))
    return parts


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
        allowed = ("input_text", "input_image")
    else:
        allowed = ("input_text",)
    parts: list[Part] = list(_parts(content, f"{where}.content", allowed))
    return build_message(str(role), parts, where)


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
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            call_id = expect_str(item.get("call_id"), f"{where}.call_id", empty_ok=False)
            name = expect_str(item.get("name"), f"{where}.name", empty_ok=False)
            arguments = expect_str(item.get("arguments"), f"{where}.arguments")
            check_arguments(arguments, f"{where}.arguments")
            call_names[call_id] = name
            call = ToolCallPart(call_id, name, arguments)
            if out and out[-1].role == "assistant":
                out[-1] = out[-1].replace(parts=(*out[-1].parts, call))
            else:
                out.append(build_message("assistant", [call], where))
        elif kind == "function_call_output":
            call_id = expect_str(item.get("call_id"), f"{where}.call_id", empty_ok=False)
            output = item.get("output")
            if output is None:
                raise InvalidMessageError(f"{where}.output", "is required")
            content: str | tuple[TextPart | ImagePart, ...]
            if isinstance(output, str):
                content = output
            else:
                content = tuple(_parts(output, f"{where}.output", ("input_text", "input_image")))
            result = ToolResultPart(call_id, content, name=call_names.get(call_id))
            out.append(build_message("tool", [result], where))
        else:
            raise InvalidMessageError(
                f"{where}.type",
                f"unsupported item type {kind!r} "
                "(supported: message, function_call, function_call_output)",
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


def _content(parts: Sequence[Part]) -> str | list[dict[str, Any]]:
    """A lone text part renders as a plain string, anything else as a list of parts."""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    if not parts:
        return ""
    return [
        _input_part(p, require_detail=True) for p in parts if isinstance(p, (TextPart, ImagePart))
    ]


def render_responses(
    messages: Sequence[Message],
    *,
    system_role: Literal["system", "developer"] = "system",
    validate: bool = True,
    notes: list[RenderNote] | None = None,
) -> list[dict[str, Any]]:
    """Render neutral messages as a Responses API ``input`` item list.

    See the module docstring for the conventions. With ``validate`` (the default)
    the result is checked with `validate_responses`.
    """
    if system_role not in ("system", "developer"):
        raise ConfigError(f"system_role must be 'system' or 'developer', got {system_role!r}")
    out: list[dict[str, Any]] = []
    for m in expect_neutral(messages):
        if m.role in ("system", "developer"):
            out.append({"role": system_role, "content": _content(m.parts)})
        elif m.role == "user":
            out.append({"role": "user", "content": _content(m.parts)})
        elif m.role == "assistant":
            texts = text_parts(m)
            calls = m.tool_calls
            text = "\n".join(texts)
            if text or not calls:
                out.append({"role": "assistant", "content": text})
            out.extend(
                {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments or "{}",
                }
                for c in calls
            )
        else:
            for r in m.tool_results:
                output: str | list[dict[str, Any]]
                if isinstance(r.content, str):
                    output = r.content
                elif not r.content:
                    output = ""
                else:
                    output = [_input_part(p, require_detail=False) for p in r.content]
                out.append({"type": "function_call_output", "call_id": r.call_id, "output": output})
    if validate:
        validate_responses(out)
    return out
