"""LangChain messages ↔ contextwright `Message`s, both ways without loss.

What maps onto the message model does: the role (`SystemMessage` → system, or
developer when its ``additional_kwargs`` say ``__openai_role__: developer``;
`HumanMessage` → user; `AIMessage` → assistant, its ``tool_calls`` as
`ToolCallPart`s with their ids and arguments; `ToolMessage` → tool, one
`ToolResultPart` with ``tool_call_id``, tool ``name`` and ``status``; a `ChatMessage`
of one of those roles), ``name`` and ``id``; text and image content blocks become
`TextPart`s and `ImagePart`s; an assistant message's reasoning — thinking blocks
with their signatures, Responses reasoning items and the ids of the calls they led
to — becomes `ThinkingPart`s, `ProviderPart`s and the calls' native forms
(`_reasoning`). What does not map is kept in the message metadata under
``"langchain"`` and restored from there: ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a JSON
``artifact``, the shape of list content (which block each part came from, its
extra keys) and content blocks the model has no part for (provider blocks, a
``tool_use`` copy of a tool call, reasoning of no known provider). A
contextwright message's own ``metadata``, ``created_at`` and ``seq`` travel the
other way in ``response_metadata["contextwright"]``, which LangChain never sends
to a provider.

``for_model=True`` (what the middleware hands the model) leaves out the blocks
with no part and the stored provider metadata: the engine counted the parts, and
only what it counted is sent — the thinking with it, in its place, as the
providers require it back. The ``response_metadata`` keys that say how to read
the content (``output_version``, ``model_provider``) stay. A tool message holding
several results (as read from an Anthropic request) becomes one `ToolMessage` per
result, ids ``id``, ``id~1``, …; `from_langchain_messages` joins them again.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ..._errors import InvalidMessageError
from ...model._checks import _check_metadata
from ...model._messages import ROLES, Message
from ...model._native import ProviderPart, ThinkingPart, is_thinking
from ...model._parts import ImagePart, Part, TextPart, ToolCallPart, ToolResultPart
from ._reasoning import (
    FC_IDS,
    THINKING_SLOTS,
    call_block,
    call_ids,
    call_natives,
    fits_slot,
    reasoning_kwarg,
    thinking_in,
    thinking_out,
)

__all__ = ["from_langchain", "from_langchain_messages", "to_langchain", "to_langchain_messages"]

LC = "langchain"  # the metadata key of what LangChain has and the message model does not
CW = "contextwright"  # the response_metadata key of what contextwright has and LangChain does not
_DEV = "__openai_role__"
# response_metadata keys that say how to read the content (langchain-anthropic translates
# v1 blocks only when they say "v1"): kept in what the model gets; LangChain sends none.
_FORMAT = ("output_version", "model_provider")
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.DOTALL)
_Content = str | list[str | dict[str, Any]]


def _json(value: Any, where: str) -> Any:
    """``value`` if JSON can hold it (it is stored), else `InvalidMessageError` at ``where``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        _check_metadata(value, where)  # names a NaN or an infinity
        raise InvalidMessageError(
            where, f"must be JSON-serialisable to be stored ({exc})"
        ) from None
    return value


# -- content ---------------------------------------------------------------------------


def _image_in(block: Mapping[str, Any], where: str) -> tuple[ImagePart, dict[str, Any]] | None:
    """An image block as an `ImagePart` and its template (None: not an image we model)."""
    kind = block.get("type")
    rest = {k: v for k, v in block.items() if k not in ("type", "image_url")}
    if kind == "image_url":
        inner = block.get("image_url")
        inner = {"url": inner} if isinstance(inner, str) else inner
        if not isinstance(inner, Mapping) or not isinstance(inner.get("url"), str):
            return None
        extra = {k: v for k, v in inner.items() if k not in ("url", "detail")}
        if extra:
            rest["image_url"] = extra
        url, detail = inner["url"], inner.get("detail")
        m = _DATA_URL.fullmatch(url)
        mime = block.get("mime_type") if not m else None
        if isinstance(mime, str):
            rest.pop("mime_type")
        else:
            mime = None
        part = (
            ImagePart(data=m[2], media_type=m[1], detail=detail)
            if m
            else ImagePart(url, media_type=mime, detail=detail)
        )
        tpl: dict[str, Any] = {"t": "image_url", "str": isinstance(block.get("image_url"), str)}
    elif kind == "image":
        data = block.get("base64", block.get("data"))
        url = block.get("url")
        mime = block.get("mime_type")
        if isinstance(url, str) and data is None:
            part, key = ImagePart(url, media_type=mime), "url"
        elif isinstance(data, str) and isinstance(mime, str) and url is None:
            part, key = (
                ImagePart(data=data, media_type=mime),
                "base64" if "base64" in block else "data",
            )
        else:
            return None
        for k in ("url", "base64", "data", "mime_type"):
            rest.pop(k, None)
        tpl = {"t": "image", "k": key, "mime": mime is not None}
    else:
        return None
    part._check(where)
    if rest:
        tpl["rest"] = _json(rest, where)
    return part, tpl


def _parts_in(
    content: Any, where: str, role: str, as_list: bool
) -> tuple[list[Part], list[Any] | None]:
    """Parts of LangChain content, and its template (None when the parts alone restore it).

    Image blocks are parts of user and tool messages, reasoning blocks of assistant
    messages (`_reasoning`); elsewhere such a block is kept as a block the model has
    no part for.
    """
    parts, tpl = _read_content(content, where, role)
    if tpl is not None and _content_out(parts, None, False, as_list=as_list) == content:
        return parts, None  # the default shape: nothing to remember
    return parts, tpl


def _read_content(content: Any, where: str, role: str) -> tuple[list[Part], list[Any] | None]:
    if isinstance(content, str):
        return ([TextPart(content)] if content else []), None
    if not isinstance(content, list):
        raise InvalidMessageError(
            where, f"must be a string or a list, got {type(content).__name__}"
        )
    parts: list[Part] = []
    tpl: list[Any] = []
    images = role in ("user", "tool")
    for i, block in enumerate(content):
        here = f"{where}[{i}]"
        if isinstance(block, str):
            parts.append(TextPart(block))
            tpl.append({"t": "s"})
            continue
        if not isinstance(block, Mapping):
            raise InvalidMessageError(
                here, f"must be a string or an object, got {type(block).__name__}"
            )
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
            rest = {k: v for k, v in block.items() if k not in ("type", "text")}
            tpl.append({"t": "text", "rest": _json(rest, here)} if rest else {"t": "text"})
            continue
        found = (
            _image_in(block, here)
            if images
            else thinking_in(block, here)
            if role == "assistant"
            else None
        )
        if found is not None:
            parts.append(found[0])
            tpl.append(found[1])
        else:
            tpl.append({"t": "keep", "block": _json(dict(block), here)})
    for i, p in enumerate(parts):
        p._check(f"{where}.parts[{i}]")
    return parts, tpl


def _image_out(p: ImagePart, tpl: Mapping[str, Any] | None) -> dict[str, Any]:
    kind = tpl["t"] if tpl else ("image_url" if p.detail is not None else "image")
    rest = dict(tpl.get("rest", {})) if tpl else {}
    if kind == "image_url":
        url = p.url if p.url is not None else f"data:{p.media_type};base64,{p.data}"
        inner: dict[str, Any] = {"url": url, **rest.pop("image_url", {})}
        if p.detail is not None:
            inner["detail"] = p.detail
        top: dict[str, Any] = {"type": "image_url"}
        top["image_url"] = url if tpl is not None and tpl.get("str") and len(inner) == 1 else inner
        if p.url is not None and p.media_type is not None:
            top["mime_type"] = p.media_type
        return {**top, **rest}
    out: dict[str, Any] = {"type": "image"}
    if p.url is not None:
        out["url"] = p.url
    else:
        out["base64" if not tpl or tpl.get("k") != "data" else "data"] = p.data
    if p.media_type is not None and (tpl is None or tpl.get("mime", True)):
        out["mime_type"] = p.media_type
    return {**out, **rest}


def _fits(parts: Sequence[Part], tpl: Sequence[Any]) -> bool:
    """Whether a stored template still describes ``parts`` (the engine may have shortened them)."""
    slots = [t["t"] for t in tpl if t["t"] not in ("keep", "fc")]
    if len(slots) != len(parts):
        return False
    for slot, p in zip(slots, parts, strict=True):
        if slot in THINKING_SLOTS:
            if not fits_slot(slot, p):
                return False
        elif (slot in ("s", "text")) != isinstance(p, TextPart) or is_thinking(p):
            return False
    return True


def _content_out(
    parts: Sequence[Part],
    tpl: Any,
    for_model: bool,
    *,
    as_list: bool = False,
    calls: Sequence[ToolCallPart] = (),
) -> _Content:
    """LangChain content for text and image ``parts``, in the shape the template recorded.

    Without a template, one text part (or none) is a string unless ``as_list``
    (a tool result's content given as parts). A template whose reasoning the engine
    left out (older thinking goes first) still shapes the rest.
    """
    if isinstance(tpl, list) and not any(is_thinking(p) for p in parts):
        tpl = [t for t in tpl if t["t"] not in THINKING_SLOTS]
    if isinstance(tpl, list) and _fits(parts, tpl):
        out: list[str | dict[str, Any]] = []
        it = iter(parts)
        for t in tpl:
            if t["t"] == "keep":
                if not for_model:
                    out.append(dict(t["block"]))
                continue
            if t["t"] == "fc":  # a Responses function call item, its id counted with the call
                fc = call_block(calls, t)
                if fc is not None:
                    out.append(fc)
                continue
            p = next(it)
            if isinstance(p, TextPart):
                out.append(
                    p.text
                    if t["t"] == "s"
                    else {"type": "text", "text": p.text, **t.get("rest", {})}
                )
            elif isinstance(p, ImagePart):
                out.append(_image_out(p, t))
            elif isinstance(p, (ThinkingPart, ProviderPart)):
                block = thinking_out(p, t)
                if block is not None:
                    out.append(block)
        return out
    if not as_list and all(isinstance(p, TextPart) for p in parts) and len(parts) <= 1:
        return parts[0].text if parts else ""  # type: ignore[union-attr]
    blocks: list[str | dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            blocks.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            blocks.append(_image_out(p, None))
        elif isinstance(p, (ThinkingPart, ProviderPart)):
            block = thinking_out(p, None)
            if block is not None:
                blocks.append(block)
    return blocks


# -- LangChain → contextwright ---------------------------------------------------------


def _role(message: BaseMessage, where: str) -> str:
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, SystemMessage):
        return "developer" if message.additional_kwargs.get(_DEV) == "developer" else "system"
    if isinstance(message, ChatMessage):
        if message.role not in ROLES:
            raise InvalidMessageError(
                f"{where}.role",
                f"unknown role {message.role!r}; expected one of {', '.join(ROLES)}",
            )
        return message.role
    raise InvalidMessageError(where, f"cannot store a {type(message).__name__}")


def from_langchain(message: BaseMessage, *, where: str = "message") -> Message:
    """One LangChain message as a contextwright `Message` (see the module docstring)."""
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(
            where, f"must be a LangChain message, got {type(message).__name__}"
        )
    role = _role(message, where)
    lc: dict[str, Any] = {}
    if isinstance(message, ChatMessage):
        lc["chat"] = True
    kwargs = dict(message.additional_kwargs)
    if role == "developer":
        kwargs.pop(_DEV, None)
    response = dict(message.response_metadata)
    own = response.pop(CW, None)
    if response:
        lc["response_metadata"] = _json(response, f"{where}.response_metadata")
    own = own if isinstance(own, Mapping) else {}
    name = message.name
    as_list = isinstance(message, ToolMessage)  # a tool result's parts are a list
    content_parts, tpl = _parts_in(message.content, f"{where}.content", role, as_list)
    if tpl is not None:
        lc["content"] = tpl
    parts: list[Part] = list(content_parts)
    kw_reasoning = (
        reasoning_kwarg(kwargs["reasoning"], f"{where}.additional_kwargs.reasoning")
        if role == "assistant" and "reasoning" in kwargs
        else None
    )
    if kw_reasoning is not None:  # the model's reasoning: a part, counted and sent, first
        parts.insert(0, kw_reasoning)
        lc["reasoning"] = True
        kwargs.pop("reasoning")
    if isinstance(message, ToolMessage):
        if message.artifact is not None:
            lc["artifact"] = _json(message.artifact, f"{where}.artifact")
        content: str | tuple[TextPart | ImagePart, ...] = (
            message.content
            if isinstance(message.content, str)
            else tuple(cast("list[TextPart | ImagePart]", content_parts))
        )
        parts = [ToolResultPart(message.tool_call_id, content, message.status == "error", name)]
        name = own.get("name")
    elif isinstance(message, AIMessage):
        calls = []
        for i, call in enumerate(message.tool_calls):
            args = _json(call["args"], f"{where}.tool_calls[{i}].args")
            call_id = call.get("id") or f"call_{uuid.uuid4().hex}"
            calls.append(ToolCallPart(call_id, call["name"], json.dumps(args, ensure_ascii=False)))
        parts += call_natives(calls, kwargs, tpl, lc)
        if message.invalid_tool_calls:
            lc["invalid_tool_calls"] = _json(
                [dict(c) for c in message.invalid_tool_calls], f"{where}.invalid_tool_calls"
            )
        if message.usage_metadata:
            lc["usage_metadata"] = _json(dict(message.usage_metadata), f"{where}.usage_metadata")
    if kwargs:
        lc["additional_kwargs"] = _json(kwargs, f"{where}.additional_kwargs")
    metadata = dict(own.get("metadata") or {})
    if lc:
        metadata[LC] = lc
    extra: dict[str, Any] = {}
    if message.id:
        extra["id"] = message.id
    for key in ("created_at", "seq"):
        if own.get(key) is not None:
            extra[key] = own[key]
    try:
        return Message(cast(Any, role), tuple(parts), name=name, metadata=metadata, **extra)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}.{exc.where}", exc.problem) from None


def from_langchain_messages(messages: Iterable[BaseMessage]) -> list[Message]:
    """LangChain messages as `Message`s; the `ToolMessage`s a multi-result message became are joined."""
    out: list[Message] = []
    for i, lm in enumerate(messages):
        m = from_langchain(lm, where=f"messages[{i}]")
        own = lm.response_metadata.get(CW) if isinstance(lm, ToolMessage) else None
        split = own.get("part") if isinstance(own, Mapping) else None
        if split and split[0] > 0 and out and out[-1].role == "tool" and out[-1].id == split[2]:
            prev = out[-1]
            out[-1] = prev.replace(parts=(*prev.parts, *m.parts))
            continue
        if split:
            m = m.replace(id=split[2])
        out.append(m)
    return out


# -- contextwright → LangChain ---------------------------------------------------------


def _own(m: Message, lc: Mapping[str, Any]) -> dict[str, Any]:
    """``response_metadata`` of the LangChain message: the stored one and contextwright's own."""
    response = dict(lc.get("response_metadata", {}))
    own: dict[str, Any] = {}
    meta = {k: v for k, v in m.metadata.items() if k != LC}
    if meta:
        own["metadata"] = meta
    if m.created_at is not None:
        own["created_at"] = m.created_at
    if m.seq is not None:
        own["seq"] = m.seq
    if own:
        response[CW] = own
    return response


def to_langchain(message: Message, *, for_model: bool = False) -> list[BaseMessage]:
    """One `Message` as LangChain messages (one, or one per tool result)."""
    lc = message.metadata.get(LC)
    lc = lc if isinstance(lc, Mapping) else {}
    kw: dict[str, Any] = {"id": message.id}
    if not for_model:
        kw["additional_kwargs"] = dict(lc.get("additional_kwargs", {}))
    if for_model:  # what tells LangChain the content's format (v1 blocks) still goes
        fmt = {k: v for k, v in lc.get("response_metadata", {}).items() if k in _FORMAT}
        kw["response_metadata"] = _own(message, {"response_metadata": fmt})
    else:
        kw["response_metadata"] = _own(message, lc)
    tpl = lc.get("content")
    if message.role == "tool":
        results = message.tool_results
        out: list[BaseMessage] = []
        for i, r in enumerate(results):
            rkw = dict(kw)
            if len(results) > 1:
                rkw["id"] = message.id if i == 0 else f"{message.id}~{i}"
                rmeta = dict(rkw["response_metadata"])
                rmeta[CW] = {**rmeta.get(CW, {}), "part": [i, len(results), message.id]}
                rkw["response_metadata"] = rmeta
            if message.name is not None:
                rmeta = dict(rkw["response_metadata"])
                rmeta[CW] = {**rmeta.get(CW, {}), "name": message.name}
                rkw["response_metadata"] = rmeta
            content = (
                r.content
                if isinstance(r.content, str)
                else _content_out(r.content, tpl, for_model, as_list=True)
            )
            if "artifact" in lc and not for_model:
                rkw["artifact"] = lc["artifact"]
            out.append(ToolMessage(
                content=content, tool_call_id=r.call_id, name=r.name,
                status="error" if r.is_error else "success", **rkw,
            ))  # fmt: skip
        return out
    kw["name"] = message.name
    text_parts = [p for p in message.parts if not isinstance(p, ToolCallPart)]
    first = text_parts[0] if text_parts else None
    if lc.get("reasoning") and isinstance(first, ProviderPart) and is_thinking(first):
        # written back where langchain-openai keeps it, also for the model (it was counted)
        kw["additional_kwargs"] = {**kw.get("additional_kwargs", {}), "reasoning": first.data}
        text_parts = text_parts[1:]
    if lc.get("fc_ids"):  # the Responses ids of the calls, kept with them
        kw["additional_kwargs"] = {
            **kw.get("additional_kwargs", {}),
            FC_IDS: call_ids(message.tool_calls),
        }
    content = _content_out(text_parts, tpl, for_model, calls=message.tool_calls)
    if lc.get("chat") and not message.tool_calls:
        return [ChatMessage(content=content, role=message.role, **kw)]
    if message.role == "assistant":
        calls = [
            {"name": p.name, "args": p.input, "id": p.id, "type": "tool_call"}
            for p in message.tool_calls
        ]
        extra: dict[str, Any] = {}
        if not for_model:
            if lc.get("invalid_tool_calls"):
                extra["invalid_tool_calls"] = lc["invalid_tool_calls"]
            if lc.get("usage_metadata"):
                extra["usage_metadata"] = lc["usage_metadata"]
        return [AIMessage(content=content, tool_calls=calls, **extra, **kw)]
    if message.role == "user":
        return [HumanMessage(content=content, **kw)]
    if message.role == "developer":
        kw["additional_kwargs"] = {**kw.get("additional_kwargs", {}), _DEV: "developer"}
    return [SystemMessage(content=content, **kw)]


def to_langchain_messages(
    messages: Iterable[Message], *, for_model: bool = False
) -> list[BaseMessage]:
    """`Message`s as LangChain messages (``for_model``: only what the engine counted)."""
    return [lm for m in messages for lm in to_langchain(m, for_model=for_model)]
