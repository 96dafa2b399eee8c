"""Small helpers shared by the adapters: reading untrusted payloads and image URLs.

Provider payloads arrive as parsed JSON (often from files), so nothing about their
shape can be assumed. Every reader here either returns a value of the expected
type or raises `InvalidMessageError` naming the position, so a malformed payload
never surfaces as a `KeyError` or `TypeError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import InvalidMessageError
from ..model._checks import load_json
from ..model._messages import Message
from ..model._parts import ImagePart, Part, TextPart

__all__ = [
    "blank",
    "build_message",
    "check_arguments",
    "data_url",
    "expect_list",
    "expect_mapping",
    "expect_messages",
    "expect_neutral",
    "expect_str",
    "image_from_url",
    "image_url",
    "opt_str",
    "parse_data_url",
    "text_parts",
]

# RFC 2397: data:[<media type>][;base64],<data>. Providers only accept the base64 form.
_DATA_URL = re.compile(
    r"^data:(?P<media>[\w.+-]+/[\w.+-]+)(?:;[\w-]+=[^;,]*)*;base64,(?P<data>.*)$", re.S
)


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64 data)`` of a base64 ``data:`` URL, or None for any other URL."""
    match = _DATA_URL.match(url)
    if match is None:
        return None
    return match.group("media"), match.group("data")


def data_url(media_type: str, data: str) -> str:
    """The base64 ``data:`` URL carrying ``data``."""
    return f"data:{media_type};base64,{data}"


def image_url(part: ImagePart) -> str:
    """The URL of an image: its own, or a ``data:`` URL carrying its inline data."""
    if part.url is not None:
        return part.url
    # ImagePart guarantees data and media_type when there is no URL.
    return data_url(part.media_type or "", part.data or "")


def image_from_url(url: str, detail: str | None = None) -> ImagePart:
    """An `ImagePart` for ``url``; a base64 ``data:`` URL becomes inline data."""
    parsed = parse_data_url(url)
    if parsed is not None:
        return ImagePart(data=parsed[1], media_type=parsed[0], detail=detail)
    return ImagePart(url=url, detail=detail)


def blank(text: str) -> bool:
    """True for text with nothing but whitespace (Anthropic rejects such text blocks)."""
    return not text.strip()


def expect_messages(value: object, where: str) -> Sequence[Any]:
    """A list (or tuple) of payload items; a string or mapping is not accepted."""
    if isinstance(value, (list, tuple)):
        return value
    raise InvalidMessageError(where, f"must be a list, got {type(value).__name__}")


def expect_mapping(value: object, where: str) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    raise InvalidMessageError(where, f"must be an object, got {type(value).__name__}")


def expect_list(value: object, where: str) -> Sequence[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise InvalidMessageError(where, f"must be a list, got {type(value).__name__}")


def expect_str(value: object, where: str, *, empty_ok: bool = True) -> str:
    if value is None:
        raise InvalidMessageError(where, "is required")
    if not isinstance(value, str):
        raise InvalidMessageError(where, f"must be a string, got {type(value).__name__}")
    if not empty_ok and not value:
        raise InvalidMessageError(where, "must not be empty")
    return value


def opt_str(value: object, where: str) -> str | None:
    """A string or None (a missing optional field)."""
    if value is None:
        return None
    return expect_str(value, where)


def check_arguments(arguments: str, where: str) -> str:
    """Tool-call arguments must be a JSON object as text (empty text means ``{}``), standard
    JSON: no NaN or infinity (`load_json`)."""
    parsed = load_json(arguments or "{}", where)
    if not isinstance(parsed, dict):
        raise InvalidMessageError(where, "must be a JSON object")
    return arguments


def build_message(role: str, parts: Sequence[Part], where: str, **kwargs: Any) -> Message:
    """Build a `Message`, re-labelling any validation error with the payload position."""
    try:
        return Message(role, tuple(parts), **kwargs)  # type: ignore[arg-type]
    except InvalidMessageError as exc:
        raise InvalidMessageError(where, f"{exc.where}: {exc.problem}") from None


def text_parts(message: Message) -> list[str]:
    """The texts of a message's text parts, in order."""
    return [p.text for p in message.parts if isinstance(p, TextPart)]


def expect_neutral(messages: object) -> Sequence[Message]:
    """The input of a renderer: a sequence of `Message` objects."""
    seq = expect_messages(messages, "messages")
    for i, m in enumerate(seq):
        if not isinstance(m, Message):
            raise InvalidMessageError(
                f"messages[{i}]", f"must be a Message, got {type(m).__name__}"
            )
    return seq
