"""OpenAI Chat Completions: the ``messages`` list, to and from the neutral model.

`from_openai_chat` reads the message shapes the Chat Completions API accepts;
`render_openai_chat` writes them. The conventions, where the two models differ:

* **System and developer.** Both neutral roles render with the role given as
  ``system_role`` (``"system"`` by default, ``"developer"`` for models that prefer
  it); OpenAI treats the two alike, so the distinction is not kept on the wire.
  Reading keeps whichever role the payload used.
* **Later system messages** (the engine's dynamic context and goal restatement)
  stay where they are: Chat Completions accepts system messages at any position.
* **Tool results.** The wire has one ``tool`` message per call, so a neutral tool
  message holding several results renders as several tool messages, and reading
  gives one neutral tool message per wire message. ``content`` is always a string.
  ``is_error`` has no wire field and is dropped. Tool messages may only hold text
  (``ChatCompletionToolMessageParam``), so images in a tool result are moved into
  one ``user`` message right after the run of tool messages, introduced by a line
  naming the call; the tool message text notes that the images follow.
* **Assistant tool calls** with no text render with ``content: None``, as the API
  returns them. Reading fills each result's tool ``name`` from the matching call.
* ``name`` is kept on system, developer, user and assistant messages (the tool
  message type has no ``name``).
* **Provider content.** A refusal (the ``refusal`` field or a ``refusal`` part)
  reads as its text, with the wire form as the part's native form, so it goes
  back as a refusal here and as text elsewhere; ``input_audio`` and ``file`` parts
  of a user message and an assistant's ``audio`` reference are kept as provider
  parts; ``custom`` tool calls are tool calls whose native form is the call.
  Another provider's parts are converted or dropped with a note (`_foreign`):
  Chat Completions takes no thinking, reasoning, documents or compactions.
* Legacy function calling (role ``"function"``, ``function_call``) is rejected
  with an `InvalidMessageError` naming the position: convert it to tool calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError
from ..model._messages import Message
from ..model._native import ProviderPart, ThinkingPart, dump_payload
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
from ._foreign import RenderNote, foreign_text, native_for
from ._rules import validate_openai_chat

__all__ = ["from_openai_chat", "render_openai_chat"]

_ROLES = "system, developer, user, assistant or tool"


# -- reading ----------------------------------------------------------------------------


def _content_parts(content: object, where: str, *, images: bool, refusal: bool) -> list[Part]:
    """Parts of a ``content`` value: a string or a list of content parts."""
    if isinstance(content, str):
        return [TextPart(content)]
    items = expect_list(content, where)
    parts: list[Part] = []
    for j, raw in enumerate(items):
        here = f"{where}[{j}]"
        item = expect_mapping(raw, here)
        kind = item.get("type")
        if kind == "text":
            parts.append(TextPart(expect_str(item.get("text"), f"{here}.text")))
        elif kind == "image_url" and images:
            image = expect_mapping(item.get("image_url"), f"{here}.image_url")
            url = expect_str(image.get("url"), f"{here}.image_url.url", empty_ok=False)
            detail = opt_str(image.get("detail"), f"{here}.image_url.detail")
            parts.append(image_from_url(url, detail))
        elif kind == "refusal" and refusal:
            text = expect_str(item.get("refusal"), f"{here}.refusal")
            parts.append(
                TextPart(text, ProviderPart("openai", "refusal", dump_payload(item, here)))
            )
        elif kind in ("input_audio", "file") and images:
            expect_mapping(item.get(str(kind)), f"{here}.{kind}")
            parts.append(ProviderPart("openai", str(kind), dump_payload(item, here)))
        else:
            supported = (
                ["text"]
                + (["image_url", "input_audio", "file"] if images else [])
                + (["refusal"] if refusal else [])
            )
            raise InvalidMessageError(
                f"{here}.type",
                f"unsupported content part type {kind!r} here (supported: {', '.join(supported)})",
            )
    return parts


def _tool_calls(value: object, where: str, call_names: dict[str, str]) -> list[Part]:
    calls: list[Part] = []
    for j, raw in enumerate(expect_list(value, where)):
        here = f"{where}[{j}]"
        call = expect_mapping(raw, here)
        kind = call.get("type", "function")
        if kind == "custom":
            call_id = expect_str(call.get("id"), f"{here}.id", empty_ok=False)
            custom = expect_mapping(call.get("custom"), f"{here}.custom")
            name = expect_str(custom.get("name"), f"{here}.custom.name", empty_ok=False)
            text = expect_str(custom.get("input"), f"{here}.custom.input")
            native = ProviderPart("openai", "custom", dump_payload(call, here))
            call_names[call_id] = name
            calls.append(ToolCallPart(call_id, name, dump_payload({"input": text}, here), native))
            continue
        if kind != "function":
            raise InvalidMessageError(
                f"{here}.type", f"unsupported tool call type {kind!r} (function or custom)"
            )
        call_id = expect_str(call.get("id"), f"{here}.id", empty_ok=False)
        function = expect_mapping(call.get("function"), f"{here}.function")
        name = expect_str(function.get("name"), f"{here}.function.name", empty_ok=False)
        arguments = expect_str(function.get("arguments", "{}"), f"{here}.function.arguments")
        check_arguments(arguments, f"{here}.function.arguments")
        call_names[call_id] = name
        calls.append(ToolCallPart(call_id, name, arguments))
    return calls


def _tool_content(content: object, where: str) -> str | tuple[TextPart | ImagePart, ...]:
    if isinstance(content, str):
        return content
    if content is None:
        raise InvalidMessageError(where, "is required")
    parts = _content_parts(content, where, images=False, refusal=False)
    return tuple(p for p in parts if isinstance(p, TextPart))


def from_openai_chat(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read a Chat Completions ``messages`` list into neutral messages.

    Raises `InvalidMessageError` naming the position (``messages[3].tool_calls[0].id``)
    for anything malformed or unsupported.
    """
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, raw in enumerate(expect_messages(messages, "messages")):
        where = f"messages[{i}]"
        m = expect_mapping(raw, where)
        role = m.get("role")
        if role == "function":
            raise InvalidMessageError(
                f"{where}.role",
                "legacy role 'function' is not supported; use tool_calls and 'tool' messages",
            )
        if m.get("function_call") is not None:
            raise InvalidMessageError(
                f"{where}.function_call",
                "legacy function_call is not supported; use tool_calls and 'tool' messages",
            )
        name = opt_str(m.get("name"), f"{where}.name")
        parts: list[Part]
        if role in ("system", "developer"):
            parts = _content_parts(
                _required(m, "content", where), f"{where}.content", images=False, refusal=False
            )
        elif role == "user":
            parts = _content_parts(
                _required(m, "content", where), f"{where}.content", images=True, refusal=False
            )
        elif role == "assistant":
            content = m.get("content")
            parts = (
                []
                if content is None
                else _content_parts(content, f"{where}.content", images=False, refusal=True)
            )
            refusal = opt_str(m.get("refusal"), f"{where}.refusal")
            if refusal:
                native = ProviderPart(
                    "openai", "refusal", dump_payload({"refusal": refusal}, where)
                )
                parts.append(TextPart(refusal, native))
            if m.get("audio") is not None:
                audio = expect_mapping(m["audio"], f"{where}.audio")
                expect_str(audio.get("id"), f"{where}.audio.id", empty_ok=False)
                parts.append(ProviderPart("openai", "audio", dump_payload(audio, f"{where}.audio")))
            if m.get("tool_calls") is not None:
                parts.extend(_tool_calls(m["tool_calls"], f"{where}.tool_calls", call_names))
        elif role == "tool":
            call_id = expect_str(m.get("tool_call_id"), f"{where}.tool_call_id", empty_ok=False)
            result = ToolResultPart(
                call_id,
                _tool_content(m.get("content"), f"{where}.content"),
                name=call_names.get(call_id) or name,
            )
            out.append(build_message("tool", [result], where))
            continue
        else:
            raise InvalidMessageError(f"{where}.role", f"unknown role {role!r}; expected {_ROLES}")
        out.append(build_message(str(role), parts, where, name=name))
    return out


def _required(m: Mapping[str, Any], key: str, where: str) -> object:
    value = m.get(key)
    if value is None:
        raise InvalidMessageError(f"{where}.{key}", "is required")
    return value


# -- rendering --------------------------------------------------------------------------


def _image(part: ImagePart) -> dict[str, Any]:
    image: dict[str, Any] = {"url": image_url(part)}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def _text_content(texts: list[str]) -> str | list[dict[str, Any]]:
    """One text renders as a plain string, several as a list of text parts."""
    if not texts:
        return ""
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def _images_message(images: list[tuple[str, ImagePart]]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    last_call: str | None = None
    for call_id, image in images:
        if call_id != last_call:
            content.append({"type": "text", "text": f"Images returned by tool call {call_id}:"})
            last_call = call_id
        content.append(_image(image))
    return {"role": "user", "content": content}


def _tool_messages(m: Message, images: list[tuple[str, ImagePart]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in m.tool_results:
        if isinstance(r.content, str):
            text = r.content
        else:
            text = "\n".join(p.text for p in r.content if isinstance(p, TextPart))
            found = [p for p in r.content if isinstance(p, ImagePart)]
            if found:
                images.extend((r.call_id, p) for p in found)
                note = f"[{len(found)} image(s) attached in the next user message]"
                text = f"{text}\n{note}" if text else note
        out.append({"role": "tool", "tool_call_id": r.call_id, "content": text})
    return out


def _user_content(m: Message, k: int, notes: list[RenderNote] | None) -> str | list[Any]:
    content: list[dict[str, Any]] = []
    for p in m.parts:
        native_for(p, "openai", k, notes)  # notes another provider's native form
        if isinstance(p, TextPart):
            content.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            content.append(_image(p))
        elif isinstance(p, ProviderPart) and p.provider == "openai":
            content.append(p.data)
        elif isinstance(p, (ProviderPart, ThinkingPart)):
            text = foreign_text(p, "openai", k, notes)
            if text is not None:
                content.append({"type": "text", "text": text})
    if len(content) <= 1 and all(c["type"] == "text" for c in content):
        return _text_content([c["text"] for c in content])
    return content


def _same_custom(native: Mapping[str, Any], c: ToolCallPart) -> bool:
    custom = native.get("custom")
    return (
        isinstance(custom, Mapping)
        and native.get("id") == c.id
        and custom.get("name") == c.name
        and c.input == {"input": custom.get("input")}
    )


def _assistant(m: Message, k: int, notes: list[RenderNote] | None) -> dict[str, Any]:
    pieces: list[dict[str, Any]] = []  # text and refusal parts, in order
    d: dict[str, Any] = {"role": "assistant"}
    calls: list[dict[str, Any]] = []
    for p in m.parts:
        native = native_for(p, "openai", k, notes)
        if isinstance(p, TextPart):
            if native is not None and native.get("refusal") == p.text:
                if "type" in native:
                    pieces.append(native)
                else:
                    d["refusal"] = p.text
            else:
                pieces.append({"type": "text", "text": p.text})
        elif isinstance(p, ToolCallPart):
            if native is not None and _same_custom(native, p):
                calls.append(native)
            else:
                function = {"name": p.name, "arguments": p.arguments or "{}"}
                calls.append({"id": p.id, "type": "function", "function": function})
        elif isinstance(p, ProviderPart) and p.provider == "openai" and p.kind == "audio":
            d["audio"] = p.data
        elif isinstance(p, (ProviderPart, ThinkingPart)):
            text = foreign_text(p, "openai", k, notes)
            if text is not None:
                pieces.append({"type": "text", "text": text})
    if any(c["type"] == "refusal" for c in pieces):
        content: Any = pieces
    elif pieces or not (calls or "refusal" in d or "audio" in d):
        content = _text_content([c["text"] for c in pieces])
    else:
        content = None
    d = {"role": "assistant", "content": content, **{k_: v for k_, v in d.items() if k_ != "role"}}
    if calls:
        d["tool_calls"] = calls
    return d


def render_openai_chat(
    messages: Sequence[Message],
    *,
    system_role: Literal["system", "developer"] = "system",
    validate: bool = True,
    notes: list[RenderNote] | None = None,
) -> list[dict[str, Any]]:
    """Render neutral messages as a Chat Completions ``messages`` list.

    See the module docstring for the conventions. With ``validate`` (the default)
    the result is checked with `validate_openai_chat`, so a request that OpenAI
    would reject raises `ProviderRuleError` here instead. Parts not sent as they
    came are told in ``notes`` (`RenderNote`), when a list is given.
    """
    if system_role not in ("system", "developer"):
        raise ConfigError(f"system_role must be 'system' or 'developer', got {system_role!r}")
    out: list[dict[str, Any]] = []
    images: list[tuple[str, ImagePart]] = []
    for k, m in enumerate(expect_neutral(messages)):
        if m.role != "tool" and images:
            # The run of tool messages is over: tool messages must directly follow
            # the assistant turn, so the images can only come now.
            out.append(_images_message(images))
            images = []
        d: dict[str, Any]
        if m.role in ("system", "developer"):
            for p in m.parts:
                native_for(p, "openai", k, notes)
            d = {"role": system_role, "content": _text_content(text_parts(m))}
        elif m.role == "user":
            d = {"role": "user", "content": _user_content(m, k, notes)}
        elif m.role == "assistant":
            d = _assistant(m, k, notes)
        else:
            for r in m.tool_results:
                native_for(r, "openai", k, notes)
            out.extend(_tool_messages(m, images))
            continue
        if m.name is not None:
            d["name"] = m.name
        out.append(d)
    if images:
        out.append(_images_message(images))
    if validate:
        validate_openai_chat(out)
    return out
