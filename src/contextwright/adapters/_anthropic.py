"""Anthropic Messages API: ``system`` + ``messages``, to and from the neutral model.

Anthropic's request differs from the neutral model in four ways that shape the
conventions below: the system prompt is a top-level field, there is no tool role
(tool results are ``tool_result`` blocks in a user turn), turns must alternate
between user and assistant, and empty text is rejected.

Rendering (`render_anthropic`):

* **Leading system messages.** All system and developer messages before the first
  other message become the top-level ``system`` list of text blocks (one block per
  text part); the key is omitted when there are none.
* **Later system messages** (the engine's dynamic context and goal restatement
  come after the history) become text blocks of a *user* turn, because a system
  entry inside ``messages`` is not accepted by every model.
* **Tool messages** become ``tool_result`` blocks in a user turn.
* **Merging.** Consecutive messages that map to the same role are merged into one
  turn. Within a merged user turn all ``tool_result`` blocks come first, then the
  other blocks in order (the API: "Messages following tool_use blocks must begin
  with a matching number of tool_result blocks").
* **Empty text.** Text blocks that are empty or only whitespace are never emitted
  ("text content blocks must be non-empty" / "must contain non-whitespace text");
  a tool result with no text is sent without ``content``; a turn left with no
  blocks is dropped. The final assistant turn (a prefill) loses trailing
  whitespace ("final assistant content cannot end with trailing whitespace").
* **First turn.** A request whose first turn is an assistant turn is rejected by
  the Bedrock and Vertex endpoints ("first message must use the user role"); it
  happens when a window cuts the history just after a user turn. Rendering then
  puts a user turn holding ``first_user_text`` first (by default
  `FIRST_USER_TEXT`, a short note that earlier turns are not shown), so the
  request is valid everywhere. With ``first_user_text=None`` it raises
  `ProviderRuleError` (rule ``first_not_user``) instead.
* **Cache breakpoints.** ``cache_breakpoints`` are indexes into the *input* list
  (negative indexes count from the end). Each puts ``cache_control:
  {"type": "ephemeral"}`` on the last rendered block carrying content of that
  message (system blocks included); for a message that rendered nothing, on the
  last block before it. Indexes are deduplicated, and if more than
  ``max_breakpoints`` remain only the last ones are kept: Anthropic allows 4
  blocks with ``cache_control`` per request, and the latest breakpoints cover the
  longest prefix.
* ``Message.name`` and image ``detail`` have no Anthropic field and are dropped.

Reading (`from_anthropic`): ``system`` (a string or text blocks) becomes leading
system messages, one per block. A user turn holding ``tool_result`` blocks becomes
*one* tool message with all its results, followed by a user message with the
turn's remaining text and images, if any. A ``system`` entry inside ``messages``
(admitted by the SDK's ``MessageParam``) reads as a system message.
``cache_control`` and ``citations`` are ignored; thinking, documents, server tools
and file sources are rejected with an `InvalidMessageError` naming the position.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError, ProviderRuleError
from ..model._messages import Message
from ..model._parts import ImagePart, Part, TextPart, ToolCallPart, ToolResultPart
from ._common import (
    blank,
    build_message,
    expect_list,
    expect_mapping,
    expect_messages,
    expect_neutral,
    expect_str,
    parse_data_url,
)
from ._rules import validate_anthropic

__all__ = ["FIRST_USER_TEXT", "from_anthropic", "render_anthropic"]

# The user turn put first when a conversation would open with the assistant.
FIRST_USER_TEXT = "(Earlier turns of this conversation are not shown.)"

# -- reading ----------------------------------------------------------------------------


def _image(block: Mapping[str, Any], where: str) -> ImagePart:
    source = expect_mapping(block.get("source"), f"{where}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type = expect_str(
            source.get("media_type"), f"{where}.source.media_type", empty_ok=False
        )
        data = expect_str(source.get("data"), f"{where}.source.data", empty_ok=False)
        return ImagePart(data=data, media_type=media_type)
    if kind == "url":
        return ImagePart(url=expect_str(source.get("url"), f"{where}.source.url", empty_ok=False))
    raise InvalidMessageError(
        f"{where}.source.type", f"unsupported image source {kind!r} (supported: base64, url)"
    )


def _blocks(content: object, where: str) -> Sequence[Any]:
    """Content as a list of blocks: a string is shorthand for one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        raise InvalidMessageError(where, "is required")
    return expect_list(content, where)


def _unsupported(kind: object, where: str, supported: str) -> InvalidMessageError:
    return InvalidMessageError(
        f"{where}.type", f"unsupported block type {kind!r} here (supported: {supported})"
    )


def _tool_result(
    block: Mapping[str, Any], where: str, call_names: dict[str, str]
) -> ToolResultPart:
    call_id = expect_str(block.get("tool_use_id"), f"{where}.tool_use_id", empty_ok=False)
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InvalidMessageError(f"{where}.is_error", "must be a boolean")
    raw = block.get("content", "")
    content: str | tuple[TextPart | ImagePart, ...]
    if isinstance(raw, str):
        content = raw
    else:
        parts: list[TextPart | ImagePart] = []
        for j, item in enumerate(expect_list(raw, f"{where}.content")):
            here = f"{where}.content[{j}]"
            inner = expect_mapping(item, here)
            kind = inner.get("type")
            if kind == "text":
                parts.append(TextPart(expect_str(inner.get("text"), f"{here}.text")))
            elif kind == "image":
                parts.append(_image(inner, here))
            else:
                raise _unsupported(kind, here, "text, image")
        content = tuple(parts)
    return ToolResultPart(call_id, content, is_error, call_names.get(call_id))


def _text(block: Mapping[str, Any], where: str) -> TextPart:
    return TextPart(expect_str(block.get("text"), f"{where}.text"))


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], system: str | Sequence[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Read an Anthropic ``messages`` list (and optional ``system``) into neutral messages.

    Raises `InvalidMessageError` naming the position
    (``messages[3].content[1].tool_use_id``) for anything malformed or unsupported.
    """
    out: list[Message] = []
    if isinstance(system, str):
        if system:
            out.append(Message("system", (TextPart(system),)))
    elif system is not None:
        for j, raw in enumerate(expect_list(system, "system")):
            block = expect_mapping(raw, f"system[{j}]")
            if block.get("type") != "text":
                raise _unsupported(block.get("type"), f"system[{j}]", "text")
            out.append(build_message("system", [_text(block, f"system[{j}]")], f"system[{j}]"))

    call_names: dict[str, str] = {}
    for i, raw in enumerate(expect_messages(messages, "messages")):
        where = f"messages[{i}]"
        m = expect_mapping(raw, where)
        role = m.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidMessageError(
                f"{where}.role", f"unknown role {role!r}; expected user or assistant"
            )
        blocks = _blocks(m.get("content"), f"{where}.content")
        parts: list[Part] = []
        results: list[Part] = []
        for j, raw_block in enumerate(blocks):
            here = f"{where}.content[{j}]"
            block = expect_mapping(raw_block, here)
            kind = block.get("type")
            if kind == "text":
                parts.append(_text(block, here))
            elif kind == "image" and role == "user":
                parts.append(_image(block, here))
            elif kind == "tool_result" and role == "user":
                results.append(_tool_result(block, here, call_names))
            elif kind == "tool_use" and role == "assistant":
                call_id = expect_str(block.get("id"), f"{here}.id", empty_ok=False)
                name = expect_str(block.get("name"), f"{here}.name", empty_ok=False)
                tool_input = expect_mapping(block.get("input", {}), f"{here}.input")
                try:
                    arguments = json.dumps(tool_input, ensure_ascii=False)
                except (TypeError, ValueError) as exc:
                    raise InvalidMessageError(f"{here}.input", f"is not JSON ({exc})") from None
                call_names[call_id] = name
                parts.append(ToolCallPart(call_id, name, arguments))
            else:
                supported = {
                    "user": "text, image, tool_result",
                    "assistant": "text, tool_use",
                    "system": "text",
                }[str(role)]
                raise _unsupported(kind, here, supported)
        if role == "user":
            if results:
                out.append(build_message("tool", results, where))
            if parts or not results:
                out.append(build_message("user", parts, where))
        else:
            out.append(build_message(str(role), parts, where))
    return out


# -- rendering --------------------------------------------------------------------------

# A block paired with the index of the input message it carries content of.
_Placed = tuple[int, dict[str, Any]]


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    results: list[_Placed] = field(default_factory=list)
    others: list[_Placed] = field(default_factory=list)

    def blocks(self) -> list[_Placed]:
        # Anthropic: tool_result blocks must open the user turn that follows tool_use.
        return self.results + self.others


def _image_block(part: ImagePart) -> dict[str, Any]:
    source: dict[str, Any]
    if part.url is not None:
        parsed = parse_data_url(part.url)
        if parsed is None:
            source = {"type": "url", "url": part.url}
        else:
            source = {"type": "base64", "media_type": parsed[0], "data": parsed[1]}
    else:
        source = {"type": "base64", "media_type": part.media_type, "data": part.data}
    return {"type": "image", "source": source}


def _content_blocks(parts: Sequence[Part]) -> list[dict[str, Any]]:
    """Blocks for text, image and tool-call parts; blank text is left out."""
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            if not blank(p.text):
                out.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            out.append(_image_block(p))
        elif isinstance(p, ToolCallPart):
            out.append({"type": "tool_use", "id": p.id, "name": p.name, "input": p.input})
    return out


def _tool_result_block(r: ToolResultPart) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id}
    if isinstance(r.content, str):
        if not blank(r.content):
            block["content"] = r.content
    else:
        inner = _content_blocks(r.content)
        if inner:
            block["content"] = inner
    if r.is_error:
        block["is_error"] = True
    return block


def _message_blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [_tool_result_block(r) for r in m.tool_results]
    return _content_blocks(m.parts)


def _breakpoints(indexes: Sequence[int], limit: int, n: int) -> list[int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"max_breakpoints must be a non-negative integer, got {limit!r}")
    if isinstance(indexes, (str, bytes)) or not isinstance(indexes, Sequence):
        raise ConfigError(f"cache_breakpoints must be a sequence of integers, got {indexes!r}")
    found: set[int] = set()
    for b in indexes:
        if isinstance(b, bool) or not isinstance(b, int):
            raise ConfigError(f"cache breakpoints must be integers, got {b!r}")
        i = b + n if b < 0 else b
        if not 0 <= i < n:
            raise ConfigError(f"cache breakpoint {b} is out of range for {n} messages")
        found.add(i)
    ordered = sorted(found)
    return ordered[max(0, len(ordered) - limit) :]


def _mark(placed: list[_Placed], index: int) -> None:
    """Put cache_control on the last block of message ``index`` (else the last before it)."""
    own = [block for owner, block in placed if owner == index]
    before = [block for owner, block in placed if owner < index]
    target = own[-1] if own else before[-1] if before else None
    if target is not None:
        target["cache_control"] = {"type": "ephemeral"}


def _strip_prefill(turn: _Turn) -> None:
    """Anthropic: "final assistant content cannot end with trailing whitespace"."""
    while turn.others:
        owner, block = turn.others[-1]
        if block["type"] != "text":
            return
        text = block["text"].rstrip()
        if text:
            turn.others[-1] = (owner, {**block, "text": text})
            return
        turn.others.pop()


def render_anthropic(
    messages: Sequence[Message],
    *,
    cache_breakpoints: Sequence[int] = (),
    max_breakpoints: int = 4,
    first_user_text: str | None = FIRST_USER_TEXT,
    validate: bool = True,
) -> dict[str, Any]:
    """Render neutral messages as ``{"system": [...], "messages": [...]}`` for Anthropic.

    See the module docstring for the conventions. With ``validate`` (the default)
    the result is checked with `validate_anthropic`, so a request that Anthropic
    would reject raises `ProviderRuleError` here instead.
    """
    seq = expect_neutral(messages)
    marks = _breakpoints(cache_breakpoints, max_breakpoints, len(seq))

    system: list[_Placed] = []
    start = 0
    while start < len(seq) and seq[start].role in ("system", "developer"):
        system.extend((start, b) for b in _content_blocks(seq[start].parts))
        start += 1

    turns: list[_Turn] = []
    for k in range(start, len(seq)):
        m = seq[k]
        role: Literal["user", "assistant"] = "assistant" if m.role == "assistant" else "user"
        blocks = _message_blocks(m)
        if not blocks:
            continue  # nothing left to send: an empty turn is rejected
        if not turns or turns[-1].role != role:
            turns.append(_Turn(role))
        for b in blocks:
            (turns[-1].results if b["type"] == "tool_result" else turns[-1].others).append((k, b))

    if turns and turns[-1].role == "assistant":
        _strip_prefill(turns[-1])
        if not turns[-1].blocks():
            turns.pop()
    if turns and turns[0].role == "assistant":
        if first_user_text is None:
            raise ProviderRuleError(
                "anthropic",
                "messages[0]",
                "first_not_user",
                "first message must use the 'user' role, and the conversation would start "
                "with an assistant turn (first_user_text=None)",
            )
        if blank(first_user_text):
            raise ConfigError("first_user_text must contain non-whitespace text")
        turns.insert(0, _Turn("user", others=[(-1, {"type": "text", "text": first_user_text})]))

    placed = system + [pair for t in turns for pair in t.blocks()]
    for index in marks:
        _mark(placed, index)

    request: dict[str, Any] = {}
    if system:
        request["system"] = [b for _, b in system]
    request["messages"] = [{"role": t.role, "content": [b for _, b in t.blocks()]} for t in turns]
    if validate:
        validate_anthropic(request)
    return request
