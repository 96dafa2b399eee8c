"""Anthropic content blocks one by one: reading each into a neutral part, writing each back.

What `_anthropic` reads and renders turn by turn, block by block here:

* ``text`` becomes a `TextPart`; with ``citations`` or a ``cache_control`` the user
  set, the block is kept as the part's ``native`` form and written back as it was
  while the text is unchanged. ``image`` (base64 or URL) and ``tool_use`` likewise;
  an image given by ``file`` id is kept as a `ProviderPart`.
* ``thinking`` and ``redacted_thinking`` become a `ThinkingPart`, written back
  unchanged (Anthropic verifies the signature); one without a signature is dropped.
* ``tool_result`` becomes a `ToolResultPart`: text and images are its content, a
  document or search result in it its text; the whole block is its native form.
* Documents, search results, server tool use and results (web search, web fetch,
  code execution, tool search, MCP), container uploads, tool changes and
  compaction blocks become a `ProviderPart` (`ANTHROPIC_KINDS` lists them, by
  role), written back verbatim; the text form is what other providers get.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import InvalidMessageError
from ..model._checks import _check_metadata
from ..model._native import ProviderPart, ThinkingPart, dump_payload
from ..model._parts import ImagePart, Part, TextPart, ToolCallPart, ToolResultPart
from ._common import expect_list, expect_mapping, expect_str, opt_str, parse_data_url
from ._foreign import RenderNote, foreign_text, native_for, note

__all__ = [
    "ANTHROPIC_KINDS",
    "block_text",
    "content_blocks",
    "image_block",
    "read_block",
    "read_tool_result",
    "render_part",
    "render_tool_result",
]

_SHARED = {"container_upload", "tool_addition", "tool_removal"}

# Blocks kept verbatim as ProviderParts, by the role of the turn that holds them.
_SERVER = """server_tool_use web_search_tool_result web_fetch_tool_result advisor_tool_result
code_execution_tool_result bash_code_execution_tool_result text_editor_code_execution_tool_result
tool_search_tool_result mcp_tool_use mcp_tool_result mcp_tool_listing compaction fallback"""
ANTHROPIC_KINDS: dict[str, frozenset[str]] = {
    "user": frozenset({"document", "search_result", *_SHARED}),
    "assistant": frozenset({*_SERVER.split(), *_SHARED}),
}

_PLAIN = {
    "text": {"type", "text"},
    "image": {"type", "source"},
    "tool_use": {"type", "id", "name", "input"},
    "tool_result": {"type", "tool_use_id", "content", "is_error"},
}


def _texts(items: object) -> list[str]:
    """The texts of a list of text blocks (anything else is skipped)."""
    if isinstance(items, str):
        return [items]
    if not isinstance(items, list):
        return []
    return [b["text"] for b in items if isinstance(b, Mapping) and isinstance(b.get("text"), str)]


def block_text(block: Mapping[str, Any]) -> str:
    """The faithful text form of a kept block ("" when it has none)."""
    kind = block.get("type")
    if kind == "document":
        source = block.get("source")
        body: list[str] = []
        if isinstance(source, Mapping):
            if source.get("type") == "text" and isinstance(source.get("data"), str):
                body = [source["data"]]
            elif source.get("type") == "content":
                body = _texts(source.get("content"))
        if not body:
            return ""
        title = block.get("title")
        return "\n\n".join(([title] if isinstance(title, str) and title else []) + body)
    if kind == "search_result":
        head = f"{block.get('title', '')} ({block.get('source', '')})"
        return "\n".join([head, *_texts(block.get("content"))])
    if kind == "web_search_tool_result":
        found = block.get("content")
        if not isinstance(found, list):
            return ""
        lines = [
            f"- {r.get('title', '')} — {r.get('url', '')}"
            for r in found
            if isinstance(r, Mapping) and r.get("type") == "web_search_result"
        ]
        return "Web search results:\n" + "\n".join(lines) if lines else ""
    if kind == "web_fetch_tool_result":
        found = block.get("content")
        if isinstance(found, Mapping) and isinstance(found.get("content"), Mapping):
            text = block_text(found["content"])
            return f"{found.get('url', '')}\n{text}" if text else ""
        return ""
    if kind in ("code_execution_tool_result", "bash_code_execution_tool_result"):
        found = block.get("content")
        if isinstance(found, Mapping):
            out = [s for s in (found.get("stdout"), found.get("stderr")) if isinstance(s, str)]
            return "\n".join(s for s in out if s)
        return ""
    if kind == "mcp_tool_result":
        return "\n".join(_texts(block.get("content")))
    if kind == "compaction":
        content = block.get("content")
        return content if isinstance(content, str) else ""
    return ""


# What a kept block needs at the least (the rest is the provider's business).
_REQUIRED: dict[str, tuple[tuple[str, type], ...]] = {
    "document": (("source", Mapping),),
    "search_result": (("source", str), ("title", str), ("content", list)),
    "server_tool_use": (("id", str), ("name", str), ("input", Mapping)),
    "mcp_tool_use": (("id", str), ("name", str), ("input", Mapping)),
}


def _kept(block: Mapping[str, Any], where: str) -> ProviderPart:
    kind = str(block["type"])
    need = _REQUIRED.get(kind, (("tool_use_id", str),) if kind.endswith("_tool_result") else ())
    for key, typ in need:
        value = block.get(key)
        if value is None:
            raise InvalidMessageError(f"{where}.{key}", "is required")
        if not isinstance(value, typ):
            raise InvalidMessageError(f"{where}.{key}", f"must be {_TYPE_NAMES[typ]}")
    return ProviderPart("anthropic", kind, dump_payload(block, where), block_text(block))


_TYPE_NAMES: dict[type, str] = {str: "a string", list: "a list", Mapping: "an object"}


def _image(block: Mapping[str, Any], where: str) -> ImagePart | ProviderPart:
    source = expect_mapping(block.get("source"), f"{where}.source")
    kind = source.get("type")
    native = None if set(block) <= _PLAIN["image"] else _kept(block, where)
    if kind == "base64":
        media_type = expect_str(
            source.get("media_type"), f"{where}.source.media_type", empty_ok=False
        )
        data = expect_str(source.get("data"), f"{where}.source.data", empty_ok=False)
        return ImagePart(data=data, media_type=media_type, native=native)
    if kind == "url":
        url = expect_str(source.get("url"), f"{where}.source.url", empty_ok=False)
        return ImagePart(url=url, native=native)
    if kind == "file":
        expect_str(source.get("file_id"), f"{where}.source.file_id", empty_ok=False)
        return _kept(block, where)
    raise InvalidMessageError(
        f"{where}.source.type", f"unsupported image source {kind!r} (supported: base64, url, file)"
    )


def read_tool_result(
    block: Mapping[str, Any], where: str, call_names: dict[str, str]
) -> ToolResultPart:
    call_id = expect_str(block.get("tool_use_id"), f"{where}.tool_use_id", empty_ok=False)
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise InvalidMessageError(f"{where}.is_error", "must be a boolean")
    raw = block.get("content", "")
    plain = set(block) <= _PLAIN["tool_result"]
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
                plain = plain and set(inner) <= _PLAIN["text"]
            elif kind == "image":
                image = _image(inner, here)
                if isinstance(image, ImagePart) and image.native is None:
                    parts.append(image)
                else:
                    plain = False
                    if isinstance(image, ImagePart):
                        parts.append(ImagePart(image.url, image.data, image.media_type))
            elif kind in ("document", "search_result", "tool_reference", "browser_state"):
                plain = False
                text = _kept(inner, here).text
                if text:
                    parts.append(TextPart(text))
            else:
                raise InvalidMessageError(
                    f"{here}.type",
                    f"unsupported block type {kind!r} here (supported: text, image, document, "
                    "search_result, tool_reference, browser_state)",
                )
        content = tuple(parts)
    native = None if plain else _kept(block, where)
    return ToolResultPart(call_id, content, is_error, call_names.get(call_id), native)


def read_block(
    block: Mapping[str, Any], role: str, where: str, call_names: dict[str, str]
) -> Part | None:
    """The neutral part of a block of a ``role`` turn (None: not one this role holds)."""
    kind = block.get("type")
    if kind == "text":
        text = expect_str(block.get("text"), f"{where}.text")
        return TextPart(text, None if set(block) <= _PLAIN["text"] else _kept(block, where))
    if kind == "image" and role == "user":
        return _image(block, where)
    if kind == "tool_use" and role == "assistant":
        call_id = expect_str(block.get("id"), f"{where}.id", empty_ok=False)
        name = expect_str(block.get("name"), f"{where}.name", empty_ok=False)
        tool_input = expect_mapping(block.get("input", {}), f"{where}.input")
        try:
            arguments = json.dumps(tool_input, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            _check_metadata(tool_input, f"{where}.input")  # names a NaN or an infinity
            raise InvalidMessageError(f"{where}.input", f"is not JSON ({exc})") from None
        call_names[call_id] = name
        native = None if set(block) <= _PLAIN["tool_use"] else _kept(block, where)
        return ToolCallPart(call_id, name, arguments, native)
    if kind == "thinking" and role == "assistant":
        text = expect_str(block.get("thinking"), f"{where}.thinking")
        return ThinkingPart(text, opt_str(block.get("signature"), f"{where}.signature"))
    if kind == "redacted_thinking" and role == "assistant":
        data = expect_str(block.get("data"), f"{where}.data", empty_ok=False)
        return ThinkingPart(redacted=True, data=data)
    if isinstance(kind, str) and kind in ANTHROPIC_KINDS.get(role, ()):
        return _kept(block, where)
    return None


# -- writing ----------------------------------------------------------------------------


def image_block(part: ImagePart) -> dict[str, Any]:
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


def _same_call(native: Mapping[str, Any], p: ToolCallPart) -> bool:
    try:
        return (
            native.get("id") == p.id
            and native.get("name") == p.name
            and native.get("input") == json.loads(p.arguments or "{}")
        )
    except ValueError:
        return False


def render_part(p: Part, index: int, notes: list[RenderNote] | None) -> dict[str, Any] | None:
    """The block for a text, image, tool-call, thinking or provider part (None: nothing).

    Blank text is left out (Anthropic rejects it); a native form is used while the
    part still says what it said when read.
    """
    native = native_for(p, "anthropic", index, notes)
    if isinstance(p, TextPart):
        if native is not None and native.get("text") == p.text and not p.text.isspace():
            return native
        return None if not p.text.strip() else {"type": "text", "text": p.text}
    if isinstance(p, ImagePart):
        neutral = image_block(p)
        if native is not None and native.get("source") == neutral["source"]:
            return native
        return neutral
    if isinstance(p, ToolCallPart):
        if native is not None and _same_call(native, p):
            return native
        return {"type": "tool_use", "id": p.id, "name": p.name, "input": p.input}
    if isinstance(p, ThinkingPart):
        if p.redacted:
            return {"type": "redacted_thinking", "data": p.data}
        if p.signature:
            return {"type": "thinking", "thinking": p.text, "signature": p.signature}
        note(
            notes, index, "anthropic thinking", "dropped",
            "thinking without a signature: Anthropic rejects it",
        )  # fmt: skip
        return None
    if isinstance(p, ProviderPart):
        if p.provider == "anthropic":
            return p.data
        text = foreign_text(p, "anthropic", index, notes)
        return None if text is None else {"type": "text", "text": text}
    return None


def render_tool_result(
    r: ToolResultPart, index: int, notes: list[RenderNote] | None
) -> dict[str, Any]:
    native = native_for(r, "anthropic", index, notes)
    if native is not None:
        back = read_tool_result(native, "native", {})
        if (back.call_id, back.content, back.is_error) == (r.call_id, r.content, r.is_error):
            return native
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id}
    if isinstance(r.content, str):
        if r.content.strip():
            block["content"] = r.content
    else:
        inner = [b for b in (render_part(c, index, None) for c in r.content) if b is not None]
        if inner:
            block["content"] = inner
    if r.is_error:
        block["is_error"] = True
    return block


def content_blocks(
    parts: Sequence[Part], index: int, notes: list[RenderNote] | None
) -> list[dict[str, Any]]:
    """The blocks of a message's parts (tool results aside), in order."""
    return [b for b in (render_part(p, index, notes) for p in parts) if b is not None]
