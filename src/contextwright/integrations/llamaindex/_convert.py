"""LlamaIndex ``ChatMessage`` to and from contextwright `Message`, without loss of what a
model needs: roles, text, images, the model's thinking, tool calls with their ids and
arguments, tool results.

Conventions where the two models differ:

* **Tool calls** are ``ToolCallBlock``s of an assistant message (``tool_call_id``,
  ``tool_name``, ``tool_kwargs`` as a dict or JSON text), written back as blocks with
  the arguments as a dict. The older form, OpenAI-shaped
  ``additional_kwargs["tool_calls"]``, is read too and written back as it was (the
  LLM class that wrote it reads it). A call without an id is refused: its result
  could never be paired with it.
* **Tool results** are ``role="tool"`` messages naming the call in
  ``additional_kwargs["tool_call_id"]`` (as ``FunctionAgent`` writes them); a
  contextwright tool message with several results becomes one ChatMessage each.
  ``is_error`` and the tool's name have no place in a ChatMessage and are not written.
* **Other roles**: ``chatbot`` and ``model`` read as assistant, ``function`` as tool.
* **Other keys of** ``additional_kwargs`` ride along in the message's metadata
  (``metadata["llamaindex"]["additional_kwargs"]``, JSON values only) and come back:
  LlamaIndex's LLM classes send that dict to the provider, so nothing is added to it.
* **Thinking**: a ``ThinkingBlock`` of an assistant message is a `ThinkingPart`, counted
  and sent back unchanged (Anthropic rejects a tool loop whose last assistant turn lost
  its thinking): its ``content`` the text, ``additional_information["signature"]`` (where
  llama-index-llms-anthropic keeps it) the signature, and
  ``{"type": "redacted_thinking", "data": ...}`` redacted thinking. What else the
  block holds (``num_tokens``, other ``additional_information`` keys, a ``None``
  content) rides in ``metadata["llamaindex"]["thinking"]``, one entry per part, and
  comes back. A signature that is not a string is refused. Thinking in another role's
  message is not the model's own and is left out.
* **Blocks without an equivalent**: ``CachePoint`` is left out (a provider hint, not
  conversation); audio, video, documents and citations are refused with
  `InvalidMessageError` naming the block.
  Images keep their URL (pydantic normalises it, e.g. a trailing ``/`` on a bare
  host) or their base64 data and media type; an image given by path is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ContentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)

from ..._errors import InvalidMessageError
from ...model._messages import Message
from ...model._native import ThinkingPart
from ...model._parts import ImagePart, Part, TextPart, ToolCallPart, ToolResultPart

__all__ = ["chat_from_message", "from_llamaindex", "message_from_chat", "to_llamaindex"]

_ROLES = {
    "system": "system", "developer": "developer", "user": "user", "assistant": "assistant",
    "tool": "tool", "chatbot": "assistant", "model": "assistant", "function": "tool",
}  # fmt: skip
_KEY = "llamaindex"  # the metadata key the other additional_kwargs ride under


def _json_safe(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        try:
            json.dumps(value, allow_nan=False)  # stored: standard JSON, no NaN or infinity
        except (TypeError, ValueError):
            continue  # a provider's object (a streamed delta, a raw response): not history
        out[str(key)] = value
    return out


def _call(call_id: object, name: object, arguments: object, where: str) -> ToolCallPart:
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(
            f"{where}.tool_call_id",
            "is required: a tool call without an id cannot be paired with its result",
        )
    if not isinstance(name, str) or not name:
        raise InvalidMessageError(f"{where}.tool_name", "must be a non-empty string")
    if isinstance(arguments, Mapping):
        text = json.dumps(dict(arguments), ensure_ascii=False)
    elif isinstance(arguments, str):
        text = arguments
    else:
        raise InvalidMessageError(f"{where}.tool_kwargs", "must be a dict or JSON text")
    try:
        part = ToolCallPart(call_id, name, text)
        part._check(where)
    except InvalidMessageError as exc:
        where = exc.where.replace(".arguments", ".tool_kwargs")
        raise InvalidMessageError(where, exc.problem) from None
    return part


def _legacy_calls(raw: object, where: str) -> list[ToolCallPart]:
    """``additional_kwargs["tool_calls"]`` in the OpenAI shape (dicts or SDK objects)."""
    if not isinstance(raw, (list, tuple)):
        raise InvalidMessageError(where, "must be a list of tool calls")
    calls = []
    for i, call in enumerate(raw):
        data = call.model_dump() if hasattr(call, "model_dump") else call
        if not isinstance(data, Mapping):
            raise InvalidMessageError(f"{where}[{i}]", "must be a tool call object")
        function = data.get("function") or {}
        if not isinstance(function, Mapping):
            raise InvalidMessageError(f"{where}[{i}].function", "must be an object")
        calls.append(
            _call(
                data.get("id"),
                function.get("name"),
                function.get("arguments") or "{}",
                f"{where}[{i}]",
            )
        )
    return calls


def _image(block: ImageBlock, where: str) -> ImagePart:
    if isinstance(block.image, bytes) and block.image:
        return ImagePart(
            data=block.image.decode("ascii"),
            media_type=block.image_mimetype or "image/png",
            detail=block.detail,
        )
    if block.url is not None:
        return ImagePart(url=str(block.url), detail=block.detail)
    try:
        data = block.resolve_image(as_base64=True).read()
    except (ValueError, OSError) as exc:
        raise InvalidMessageError(where, f"the image cannot be read ({exc})") from None
    return ImagePart(
        data=data.decode("ascii"), media_type=block.image_mimetype or "image/png",
        detail=block.detail,
    )  # fmt: skip


def _thinking(block: ThinkingBlock, where: str) -> tuple[ThinkingPart, dict[str, Any]]:
    """A ``ThinkingBlock`` as a `ThinkingPart` and what else it holds (to write it back).

    The signature is ``additional_information["signature"]`` (where
    llama-index-llms-anthropic keeps it); a block whose ``additional_information``
    is ``{"type": "redacted_thinking", "data": ...}`` is redacted thinking.
    """
    info = _json_safe(block.additional_information)
    content = block.content
    if content is not None and not isinstance(content, str):
        raise InvalidMessageError(f"{where}.content", "must be a string")
    record: dict[str, Any] = {}
    data = info.get("data")
    if info.get("type") == "redacted_thinking" and isinstance(data, str) and data and not content:
        part = ThinkingPart(redacted=True, data=data)
        info = {k: v for k, v in info.items() if k != "data"}
        if content == "":
            record["empty"] = True
    else:
        signature = info.pop("signature", None)
        if signature is not None and not isinstance(signature, str):
            raise InvalidMessageError(
                f"{where}.additional_information.signature", "must be a string"
            )
        part = ThinkingPart(content or "", signature)
        if content is None:
            record["none"] = True
    if info:
        record["info"] = info
    if block.num_tokens is not None:
        record["num_tokens"] = block.num_tokens
    return part, record


def _thinking_block(part: ThinkingPart, record: Mapping[str, Any]) -> ThinkingBlock:
    info = dict(record.get("info", {}))
    if part.redacted:
        info = {"type": "redacted_thinking", **info, "data": part.data}
        content = "" if record.get("empty") else None
    else:
        if part.signature is not None:
            info["signature"] = part.signature
        content = None if record.get("none") and not part.text else part.text
    return ThinkingBlock(
        content=content, num_tokens=record.get("num_tokens"), additional_information=info
    )


def _parts(
    blocks: Sequence[ContentBlock], where: str, role: str, thinking: list[dict[str, Any]]
) -> list[Part]:
    """The parts of ``blocks``; what a thinking block holds besides its part goes to ``thinking``."""
    parts: list[Part] = []
    for i, block in enumerate(blocks):
        here = f"{where}.blocks[{i}]"
        if isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(_image(block, here))
        elif isinstance(block, ToolCallBlock):
            parts.append(_call(block.tool_call_id, block.tool_name, block.tool_kwargs, here))
        elif isinstance(block, ThinkingBlock) and role == "assistant":
            part, record = _thinking(block, here)
            parts.append(part)
            thinking.append(record)
        elif isinstance(block, (CachePoint, ThinkingBlock)):
            continue
        else:
            raise InvalidMessageError(
                here,
                f"{getattr(block, 'block_type', type(block).__name__)} blocks are not supported "
                "(text, image and tool_call are)",
            )
    return parts


def message_from_chat(chat: ChatMessage, where: str = "message") -> Message:
    """One LlamaIndex ``ChatMessage`` as a contextwright `Message` (see the module docstring)."""
    if not isinstance(chat, ChatMessage):
        raise InvalidMessageError(where, f"must be a ChatMessage, got {type(chat).__name__}")
    raw_role = chat.role.value if isinstance(chat.role, MessageRole) else str(chat.role)
    role = _ROLES.get(raw_role)
    if role is None:
        raise InvalidMessageError(f"{where}.role", f"unknown role {raw_role!r}")
    kwargs = dict(chat.additional_kwargs)
    thinking: list[dict[str, Any]] = []
    parts = _parts(chat.blocks, where, role, thinking)
    legacy = kwargs.pop("tool_calls", None)
    if legacy:
        known = {p.id for p in parts if isinstance(p, ToolCallPart)}
        here = f"{where}.additional_kwargs.tool_calls"
        parts += [c for c in _legacy_calls(legacy, here) if c.id not in known]
        # kept in their own form too: the LLM class that wrote them reads them back
        kwargs["tool_calls"] = [c.model_dump() if hasattr(c, "model_dump") else c for c in legacy]
    if role == "tool":
        call_id = kwargs.pop("tool_call_id", None)
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(
                f"{where}.additional_kwargs.tool_call_id",
                "a tool message needs the id of the call it answers",
            )
        content: list[TextPart | ImagePart] = []
        for i, p in enumerate(parts):
            if not isinstance(p, (TextPart, ImagePart)):
                raise InvalidMessageError(
                    f"{where}.blocks[{i}]", "a tool result holds no tool call"
                )
            content.append(p)
        body: str | tuple[TextPart | ImagePart, ...]
        if not content:
            body = ""
        elif len(content) == 1 and isinstance(content[0], TextPart):
            body = content[0].text
        else:
            body = tuple(content)
        parts = [ToolResultPart(call_id, body)]
    carried = _json_safe(kwargs)
    kept: dict[str, Any] = {"additional_kwargs": carried} if carried else {}
    if any(thinking):
        kept["thinking"] = thinking  # one per ThinkingPart, in order
    metadata = {_KEY: kept} if kept else {}
    try:
        return Message(role, tuple(parts), metadata=metadata)  # type: ignore[arg-type]
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}.{exc.where}", exc.problem) from None


def from_llamaindex(chats: Iterable[ChatMessage]) -> list[Message]:
    """`message_from_chat` of each, errors naming ``messages[i]``."""
    if isinstance(chats, ChatMessage):
        raise InvalidMessageError("messages", "must be a list of ChatMessage, got one")
    return [message_from_chat(c, f"messages[{i}]") for i, c in enumerate(chats)]


def _block(part: TextPart | ImagePart) -> ContentBlock:
    if isinstance(part, TextPart):
        return TextBlock(text=part.text)
    if part.url is not None:
        return ImageBlock(url=part.url, detail=part.detail)
    assert part.data is not None  # an ImagePart has exactly one of url and data
    return ImageBlock(image=part.data.encode("ascii"), image_mimetype=part.media_type, detail=part.detail)  # fmt: skip


def chat_from_message(message: Message) -> list[ChatMessage]:
    """One contextwright `Message` as ChatMessages: one, or one per tool result."""
    carried = message.metadata.get(_KEY) if message.metadata else None
    kwargs: dict[str, Any] = {}
    if isinstance(carried, Mapping) and isinstance(carried.get("additional_kwargs"), Mapping):
        kwargs = dict(carried["additional_kwargs"])
    if message.role == "tool":
        out = []
        for r in message.tool_results:
            blocks: list[ContentBlock] = (
                [TextBlock(text=r.content)]
                if isinstance(r.content, str)
                else [_block(p) for p in r.content]
            )
            extra = {**kwargs, "tool_call_id": r.call_id}
            out.append(ChatMessage(role=MessageRole.TOOL, blocks=blocks, additional_kwargs=extra))
        return out
    blocks = []
    legacy = {c.get("id") for c in kwargs.get("tool_calls") or () if isinstance(c, Mapping)}
    records = carried.get("thinking") if isinstance(carried, Mapping) else None
    records = records if isinstance(records, list) else []
    n = 0
    for p in message.parts:
        if isinstance(p, ThinkingPart):
            record = records[n] if n < len(records) and isinstance(records[n], Mapping) else {}
            blocks.append(_thinking_block(p, record))
            n += 1
        elif isinstance(p, ToolCallPart):
            if p.id in legacy:
                continue  # written back where it came from: additional_kwargs["tool_calls"]
            blocks.append(ToolCallBlock(tool_call_id=p.id, tool_name=p.name, tool_kwargs=p.input))
        elif isinstance(p, (TextPart, ImagePart)):
            blocks.append(_block(p))
    return [ChatMessage(role=MessageRole(message.role), blocks=blocks, additional_kwargs=kwargs)]


def to_llamaindex(messages: Iterable[Message]) -> list[ChatMessage]:
    """`chat_from_message` of each, in order."""
    return [chat for m in messages for chat in chat_from_message(m)]
