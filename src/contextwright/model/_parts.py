"""The parts a message holds: text, image, tool call (assistant only), tool result (tool
only), thinking and provider parts (`_native`), validated when built, and their dict form.

Text, image, tool-call and tool-result parts may carry the wire form they were read
from (``native``, a `ProviderPart`), which the same provider's renderer writes back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .._errors import InvalidMessageError
from ._checks import _check_metadata, _require_str, check_unicode, load_json
from ._native import ProviderPart, ThinkingPart, dump_payload

__all__ = [
    "_ALLOWED",
    "_PART_TYPES",
    "ImagePart",
    "Part",
    "ProviderPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
    "_part_from_dict",
    "_part_to_dict",
]


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text."""

    text: str
    native: ProviderPart | None = None
    type: Literal["text"] = field(default="text", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.text, f"{where}.text", empty_ok=True)
        if self.native is not None:
            _check_native(self.native, where)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image given by URL or by base64 data (exactly one of the two)."""

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: str | None = None
    native: ProviderPart | None = None
    type: Literal["image"] = field(default="image", init=False)

    def _check(self, where: str) -> None:
        if (self.url is None) == (self.data is None):
            raise InvalidMessageError(where, "an image needs exactly one of 'url' or 'data'")
        if self.url is not None:
            _require_str(self.url, f"{where}.url")
        if self.data is not None:
            _require_str(self.data, f"{where}.data")
        if self.media_type is not None:
            _require_str(self.media_type, f"{where}.media_type", empty_ok=True)
        if self.detail is not None:
            _require_str(self.detail, f"{where}.detail", empty_ok=True)
        if self.data is not None and not self.media_type:
            raise InvalidMessageError(
                f"{where}.media_type", "base64 image data needs a media type such as image/png"
            )
        if self.native is not None:
            _check_native(self.native, where)


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A request by the assistant to call a tool; ``arguments`` is a JSON object as text."""

    id: str
    name: str
    arguments: str = "{}"
    native: ProviderPart | None = None
    type: Literal["tool_call"] = field(default="tool_call", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.id, f"{where}.id")
        _require_str(self.name, f"{where}.name")
        _require_str(self.arguments, f"{where}.arguments", empty_ok=True)
        parsed = load_json(self.arguments or "{}", f"{where}.arguments")
        if not isinstance(parsed, dict):
            raise InvalidMessageError(f"{where}.arguments", "must be a JSON object")
        if "\\u" in self.arguments:  # a "\ud800" escape decodes to a lone surrogate
            _check_metadata(parsed, f"{where}.arguments")
        if self.native is not None:
            _check_native(self.native, where)

    @property
    def input(self) -> dict[str, Any]:
        """The arguments parsed into a dict."""
        parsed: dict[str, Any] = json.loads(self.arguments or "{}")
        return parsed


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """The result of a tool call, answering the call whose id is ``call_id``."""

    call_id: str
    content: str | tuple[TextPart | ImagePart, ...] = ""
    is_error: bool = False
    name: str | None = None
    native: ProviderPart | None = None
    type: Literal["tool_result"] = field(default="tool_result", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.call_id, f"{where}.call_id")
        if self.name is not None:
            _require_str(self.name, f"{where}.name", empty_ok=True)
        if self.native is not None:
            _check_native(self.native, where)
        if isinstance(self.content, str):
            if not self.content.isascii():
                check_unicode(self.content, f"{where}.content")
            return
        if not isinstance(self.content, tuple):
            raise InvalidMessageError(
                f"{where}.content", "must be a string or a tuple of text and image parts"
            )
        for i, part in enumerate(self.content):
            if not isinstance(part, (TextPart, ImagePart)):
                raise InvalidMessageError(
                    f"{where}.content[{i}]",
                    f"must be a text or image part, got {type(part).__name__}",
                )
            part._check(f"{where}.content[{i}]")

    @property
    def text(self) -> str:
        """The textual content of the result (images are left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


Part: TypeAlias = TextPart | ImagePart | ToolCallPart | ToolResultPart | ThinkingPart | ProviderPart


_PART_TYPES = (TextPart, ImagePart, ToolCallPart, ToolResultPart, ThinkingPart, ProviderPart)


_ALLOWED: dict[str, tuple[type, ...]] = {
    "system": (TextPart,),
    "developer": (TextPart,),
    "user": (TextPart, ImagePart, ProviderPart),
    "assistant": (TextPart, ToolCallPart, ThinkingPart, ProviderPart),
    "tool": (ToolResultPart,),
}


def _check_native(native: object, where: str) -> None:
    if not isinstance(native, ProviderPart):
        raise InvalidMessageError(
            f"{where}.native", f"must be a ProviderPart, got {type(native).__name__}"
        )
    native._check(f"{where}.native")


def _native_to_dict(p: ProviderPart) -> dict[str, Any]:
    d: dict[str, Any] = {"provider": p.provider, "kind": p.kind, "payload": p.data}
    if p.text:
        d["text"] = p.text
    return d


def _native_from_dict(d: Any, where: str) -> ProviderPart:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(where, "must be an object")
    payload = d.get("payload")
    if isinstance(payload, str):
        return ProviderPart(d.get("provider"), d.get("kind"), payload, d.get("text", ""))  # type: ignore[arg-type]
    return ProviderPart(
        d.get("provider"),  # type: ignore[arg-type]
        d.get("kind"),  # type: ignore[arg-type]
        dump_payload(payload, f"{where}.payload"),
        d.get("text", ""),
    )


def _part_to_dict(p: Part) -> dict[str, Any]:
    d: dict[str, Any]
    if isinstance(p, TextPart):
        d = {"type": "text", "text": p.text}
    elif isinstance(p, ImagePart):
        d = {"type": "image"}
        for key in ("url", "data", "media_type", "detail"):
            value = getattr(p, key)
            if value is not None:
                d[key] = value
    elif isinstance(p, ToolCallPart):
        d = {"type": "tool_call", "id": p.id, "name": p.name, "arguments": p.arguments}
    elif isinstance(p, ToolResultPart):
        content: Any = (
            p.content if isinstance(p.content, str) else [_part_to_dict(c) for c in p.content]
        )
        d = {"type": "tool_result", "call_id": p.call_id, "content": content}
        if p.is_error:
            d["is_error"] = True
        if p.name is not None:
            d["name"] = p.name
    elif isinstance(p, ThinkingPart):
        if p.redacted:
            return {"type": "thinking", "redacted": True, "data": p.data}
        d = {"type": "thinking", "text": p.text}
        if p.signature is not None:
            d["signature"] = p.signature
        return d
    else:
        return {"type": "provider", **_native_to_dict(p)}
    if p.native is not None:
        d["native"] = _native_to_dict(p.native)
    return d


def _part_from_dict(d: Any, where: str) -> Part:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(where, "must be an object")
    kind = d.get("type")
    raw = d.get("native")
    native = None if raw is None else _native_from_dict(raw, f"{where}.native")
    try:
        if kind == "text":
            return TextPart(d["text"], native)
        if kind == "image":
            return ImagePart(
                d.get("url"), d.get("data"), d.get("media_type"), d.get("detail"), native
            )
        if kind == "tool_call":
            return ToolCallPart(d["id"], d["name"], d.get("arguments", "{}"), native)
        if kind == "tool_result":
            content = d.get("content", "")
            if isinstance(content, list):
                inner = tuple(
                    _part_from_dict(c, f"{where}.content[{i}]") for i, c in enumerate(content)
                )
                for i, c in enumerate(inner):
                    if not isinstance(c, (TextPart, ImagePart)):
                        raise InvalidMessageError(f"{where}.content[{i}]", "must be text or image")
                content = inner
            return ToolResultPart(
                d["call_id"], content, bool(d.get("is_error", False)), d.get("name"), native
            )
        if kind == "thinking":
            if d.get("redacted"):
                return ThinkingPart(redacted=True, data=d.get("data"))
            return ThinkingPart(d.get("text", ""), d.get("signature"))
        if kind == "provider":
            return _native_from_dict(d, where)
    except KeyError as exc:
        raise InvalidMessageError(f"{where}.{exc.args[0]}", "is required") from None
    raise InvalidMessageError(f"{where}.type", f"unknown part type {kind!r}")
