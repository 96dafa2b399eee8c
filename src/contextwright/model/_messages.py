"""The provider-neutral message model: the ground floor every other part stands on.

A `Message` has a role (system, developer, user, assistant, tool) and a tuple of
parts: `TextPart`, `ImagePart`, `ToolCallPart` (assistant only) and `ToolResultPart`
(tool only). Messages are immutable and validated when built, so everything above
this module may assume a well-formed message; a malformed one raises
`InvalidMessageError` naming the field, e.g. ``parts[1].call_id``.

`group_units` groups a list of messages into *units*: an assistant turn that calls
tools together with all the tool messages answering it is one unit, every other
message is a unit of its own. Windowing, trimming and compaction work on units, so
a tool call is never separated from its results (docs/architecture.md, Invariants). Tool
results without their call and calls without all their results are reported as
*broken* units, which the engine never sends to a provider.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .._errors import InvalidMessageError

__all__ = [
    "ROLES",
    "ImagePart",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "Unit",
    "UnitKind",
    "check_unicode",
    "group_units",
    "iter_units_backwards",
    "lone_surrogate",
    "unicode_problem",
]

Role: TypeAlias = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")


def lone_surrogate(text: str) -> int | None:
    """The index of the first character UTF-8 cannot encode in ``text``, or None.

    Only a lone surrogate (U+D800..U+DFFF outside a pair, e.g. from JSON's
    ``"\\ud800"`` escape or a bad decode with ``errors="surrogateescape"``) can be
    such a character. It would fail later, as a raw `UnicodeEncodeError`, wherever
    the text is written out: SQLite, the request's JSON, a file. ASCII text, most
    of it, is answered without encoding.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def unicode_problem(text: str) -> str | None:
    """What is wrong with ``text`` if UTF-8 cannot encode it (see `lone_surrogate`), or None."""
    i = lone_surrogate(text)
    if i is None:
        return None
    return (
        f"holds a lone surrogate U+{ord(text[i]):04X} at index {i}; "
        "text must be valid Unicode (encodable as UTF-8)"
    )


def check_unicode(text: str, where: str) -> str:
    """``text`` if UTF-8 can encode it, else `InvalidMessageError` naming ``where``."""
    problem = unicode_problem(text)
    if problem is not None:
        raise InvalidMessageError(where, problem)
    return text


def _require_str(value: object, where: str, *, empty_ok: bool = False) -> None:
    if not isinstance(value, str):
        raise InvalidMessageError(where, f"must be a string, got {type(value).__name__}")
    if not empty_ok and not value:
        raise InvalidMessageError(where, "must not be empty")
    if not value.isascii():
        check_unicode(value, where)


# Metadata nested deeper than this is refused rather than walked (a cycle never ends).
_MAX_METADATA_DEPTH = 200


def _unencodable_at(value: Any, where: str, depth: int = 0) -> tuple[object, ...] | None:
    """The path (keys and indexes) to the first string in ``value`` UTF-8 cannot encode.

    ``()`` when ``value`` is such a string itself, None when there is none. A key
    that cannot be encoded is reported as ``(KEY, key)``. Paths are only built on
    the way back from a bad string, so a clean value costs one pass and no strings.
    """
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is str or isinstance(value, str):
        return None if value.isascii() or lone_surrogate(value) is None else ()
    if depth >= _MAX_METADATA_DEPTH:
        raise InvalidMessageError(where, f"is nested more than {_MAX_METADATA_DEPTH} levels deep")
    if kind is dict or isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and not key.isascii() and lone_surrogate(key) is not None:
                return (_KEY, key)
            if type(item) is str and item.isascii():
                continue
            found = _unencodable_at(item, where, depth + 1)
            if found is not None:
                return (key, *found)
    elif kind is list or isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if type(item) is str and item.isascii():
                continue
            found = _unencodable_at(item, where, depth + 1)
            if found is not None:
                return (i, *found)
    return None


_KEY = object()  # marks a bad mapping key in a path from `_unencodable_at`
_SCALARS = frozenset({int, float, bool, type(None)})


def _check_metadata(value: object, where: str) -> None:
    """Every string in ``value`` (keys included) must be encodable (see `lone_surrogate`)."""
    path = _unencodable_at(value, where)
    if path is None:
        return
    bad: Any = value
    for step in path:
        if step is _KEY:  # the last step: the key itself
            key = str(path[-1])
            raise InvalidMessageError(f"{where} key {key!r}", unicode_problem(key) or "")
        bad = bad[step]
        where += f"[{step!r}]"
    raise InvalidMessageError(where, unicode_problem(bad) or "")


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text."""

    text: str
    type: Literal["text"] = field(default="text", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.text, f"{where}.text", empty_ok=True)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image given by URL or by base64 data (exactly one of the two)."""

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: str | None = None
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


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A request by the assistant to call a tool; ``arguments`` is a JSON object as text."""

    id: str
    name: str
    arguments: str = "{}"
    type: Literal["tool_call"] = field(default="tool_call", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.id, f"{where}.id")
        _require_str(self.name, f"{where}.name")
        _require_str(self.arguments, f"{where}.arguments", empty_ok=True)
        try:
            parsed = json.loads(self.arguments or "{}")
        except ValueError as exc:
            raise InvalidMessageError(f"{where}.arguments", f"is not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise InvalidMessageError(f"{where}.arguments", "must be a JSON object")
        if "\\u" in self.arguments:  # a "\ud800" escape decodes to a lone surrogate
            _check_metadata(parsed, f"{where}.arguments")

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
    type: Literal["tool_result"] = field(default="tool_result", init=False)

    def _check(self, where: str) -> None:
        _require_str(self.call_id, f"{where}.call_id")
        if self.name is not None:
            _require_str(self.name, f"{where}.name", empty_ok=True)
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


Part: TypeAlias = TextPart | ImagePart | ToolCallPart | ToolResultPart
_PART_TYPES = (TextPart, ImagePart, ToolCallPart, ToolResultPart)
_ALLOWED: dict[str, tuple[type, ...]] = {
    "system": (TextPart,),
    "developer": (TextPart,),
    "user": (TextPart, ImagePart),
    "assistant": (TextPart, ToolCallPart),
    "tool": (ToolResultPart,),
}


def _new_id() -> str:
    """A random UUID (version 4) as 32 hex digits, as ``uuid.uuid4().hex`` gives it.

    Set by hand: the engine makes a dozen messages a turn, and building a
    `uuid.UUID` object for each, only to read its hex, was most of their cost.
    """
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return b.hex()


@dataclass(frozen=True, slots=True, eq=True)
class Message:
    """One message of a conversation.

    ``parts`` may also be given as a plain string (one text part). ``created_at``
    is seconds since the epoch. ``metadata`` is free-form and JSON-serialisable.
    ``seq`` is the position in a stored conversation (``None`` outside a store).
    """

    role: Role
    parts: tuple[Part, ...]
    id: str = field(default_factory=_new_id)
    created_at: float | None = None
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    seq: int | None = None
    # Token counts by counter name; filled lazily by tokens.count_message.
    _token_cache: dict[str, int] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.parts, str):
            object.__setattr__(self, "parts", (TextPart(self.parts),))
        elif isinstance(self.parts, list):
            object.__setattr__(self, "parts", tuple(self.parts))
        self._check("")

    def _check(self, where: str) -> None:
        prefix = f"{where}." if where else ""
        if self.role not in _ALLOWED:
            raise InvalidMessageError(
                f"{prefix}role", f"unknown role {self.role!r}; expected one of {', '.join(ROLES)}"
            )
        if not isinstance(self.parts, tuple):
            raise InvalidMessageError(f"{prefix}parts", "must be a tuple of parts or a string")
        allowed = _ALLOWED[self.role]
        for i, part in enumerate(self.parts):
            here = f"{prefix}parts[{i}]"
            if not isinstance(part, _PART_TYPES):
                raise InvalidMessageError(
                    here, f"must be a message part, got {type(part).__name__}"
                )
            if not isinstance(part, allowed):
                names = ", ".join(t.__name__ for t in allowed)
                raise InvalidMessageError(
                    here,
                    f"a {self.role} message cannot hold {type(part).__name__} (allowed: {names})",
                )
            part._check(here)
        if self.role == "tool" and not self.parts:
            raise InvalidMessageError(
                f"{prefix}parts", "a tool message needs at least one tool result"
            )
        _require_str(self.id, f"{prefix}id")
        if self.created_at is not None and not isinstance(self.created_at, (int, float)):
            raise InvalidMessageError(f"{prefix}created_at", "must be seconds since the epoch")
        if self.name is not None:
            _require_str(self.name, f"{prefix}name")
        if not isinstance(self.metadata, Mapping):
            raise InvalidMessageError(f"{prefix}metadata", "must be a mapping")
        if self.metadata:
            _check_metadata(self.metadata, f"{prefix}metadata")
        if self.seq is not None and (not isinstance(self.seq, int) or self.seq < 0):
            raise InvalidMessageError(f"{prefix}seq", "must be a non-negative integer")

    # -- convenience constructors ------------------------------------------------------

    @classmethod
    def system(cls, text: str, **kw: Any) -> Message:
        return cls("system", (TextPart(text),), **kw)

    @classmethod
    def developer(cls, text: str, **kw: Any) -> Message:
        return cls("developer", (TextPart(text),), **kw)

    @classmethod
    def user(cls, text: str, **kw: Any) -> Message:
        return cls("user", (TextPart(text),), **kw)

    @classmethod
    def assistant(
        cls, text: str = "", *, tool_calls: Sequence[ToolCallPart] = (), **kw: Any
    ) -> Message:
        parts: list[Part] = [TextPart(text)] if text else []
        parts.extend(tool_calls)
        return cls("assistant", tuple(parts), **kw)

    @classmethod
    def tool(cls, call_id: str, content: str, *, is_error: bool = False, **kw: Any) -> Message:
        name = kw.pop("tool_name", None)
        return cls("tool", (ToolResultPart(call_id, content, is_error, name),), **kw)

    # -- views ---------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """All text of the message: text parts, and tool results' text, joined by newlines."""
        parts = self.parts
        if len(parts) == 1:
            p = parts[0]
            if isinstance(p, TextPart):
                return p.text
            if isinstance(p, ToolResultPart):
                return p.text
        out: list[str] = []
        for p in parts:
            if isinstance(p, (TextPart, ToolResultPart)):
                out.append(p.text)
        return "\n".join(out)

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolResultPart))

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed (the token cache is not carried over)."""
        values: dict[str, Any] = {
            "role": self.role,
            "parts": self.parts,
            "id": self.id,
            "created_at": self.created_at,
            "name": self.name,
            "metadata": self.metadata,
            "seq": self.seq,
        }
        values.update(changes)
        return Message(**values)

    def _stamped(self, seq: int, created_at: float | None) -> Message:
        """A copy with ``seq`` and ``created_at`` set, without validating it again.

        For the store, which assigns both to messages that were validated when they
        were built (and checks the clock's value once per append): `replace`
        re-checks every part, a third of the cost of storing a short message.
        The token cache is not carried over, as with `replace`.
        """
        new = object.__new__(Message)
        setattr_ = object.__setattr__
        setattr_(new, "role", self.role)
        setattr_(new, "parts", self.parts)
        setattr_(new, "id", self.id)
        setattr_(new, "created_at", created_at)
        setattr_(new, "name", self.name)
        setattr_(new, "metadata", self.metadata)
        setattr_(new, "seq", seq)
        setattr_(new, "_token_cache", {})
        return new

    # -- neutral JSON form ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `Message.from_dict` reads it back."""
        d: dict[str, Any] = {"role": self.role, "parts": [_part_to_dict(p) for p in self.parts]}
        d["id"] = self.id
        if self.created_at is not None:
            d["created_at"] = self.created_at
        if self.name is not None:
            d["name"] = self.name
        if self.metadata:
            d["metadata"] = dict(self.metadata)
        if self.seq is not None:
            d["seq"] = self.seq
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> Message:
        """Read the neutral form written by `to_dict` (errors name the path under ``where``)."""
        prefix = f"{where}." if where else ""
        if not isinstance(data, Mapping):
            raise InvalidMessageError(where or "message", "must be an object")
        raw_parts = data.get("parts")
        if isinstance(raw_parts, str):
            parts: tuple[Part, ...] = (TextPart(raw_parts),)
        elif isinstance(raw_parts, list):
            parts = tuple(
                _part_from_dict(p, f"{prefix}parts[{i}]") for i, p in enumerate(raw_parts)
            )
        else:
            raise InvalidMessageError(f"{prefix}parts", "must be a list of parts or a string")
        kwargs: dict[str, Any] = {}
        for key in ("id", "created_at", "name", "metadata", "seq"):
            if data.get(key) is not None:
                kwargs[key] = data[key]
        try:
            return cls(data.get("role"), parts, **kwargs)  # type: ignore[arg-type]
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"{prefix}{exc.where}", exc.problem) from None


def _part_to_dict(p: Part) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    if isinstance(p, ImagePart):
        d: dict[str, Any] = {"type": "image"}
        for key in ("url", "data", "media_type", "detail"):
            value = getattr(p, key)
            if value is not None:
                d[key] = value
        return d
    if isinstance(p, ToolCallPart):
        return {"type": "tool_call", "id": p.id, "name": p.name, "arguments": p.arguments}
    content: Any = (
        p.content if isinstance(p.content, str) else [_part_to_dict(c) for c in p.content]
    )
    d = {"type": "tool_result", "call_id": p.call_id, "content": content}
    if p.is_error:
        d["is_error"] = True
    if p.name is not None:
        d["name"] = p.name
    return d


def _part_from_dict(d: Any, where: str) -> Part:
    if not isinstance(d, Mapping):
        raise InvalidMessageError(where, "must be an object")
    kind = d.get("type")
    try:
        if kind == "text":
            return TextPart(d["text"])
        if kind == "image":
            return ImagePart(d.get("url"), d.get("data"), d.get("media_type"), d.get("detail"))
        if kind == "tool_call":
            return ToolCallPart(d["id"], d["name"], d.get("arguments", "{}"))
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
                d["call_id"], content, bool(d.get("is_error", False)), d.get("name")
            )
    except KeyError as exc:
        raise InvalidMessageError(f"{where}.{exc.args[0]}", "is required") from None
    raise InvalidMessageError(f"{where}.type", f"unknown part type {kind!r}")


# -- units ------------------------------------------------------------------------------

UnitKind: TypeAlias = Literal["message", "tool_call", "orphan_result", "incomplete_call"]


@dataclass(frozen=True, slots=True)
class Unit:
    """A run ``messages[start:end]`` that is kept or dropped as a whole.

    ``kind`` is ``"message"`` (one plain message), ``"tool_call"`` (an assistant
    turn with tool calls and every result answering it), or one of the broken
    kinds: ``"orphan_result"`` (tool results whose call is not there) and
    ``"incomplete_call"`` (a call some of whose results are missing).
    """

    start: int
    end: int
    kind: UnitKind

    @property
    def ok(self) -> bool:
        return self.kind in ("message", "tool_call")

    def __len__(self) -> int:
        return self.end - self.start


def _unit_from(messages: Sequence[Message], start: int, n: int) -> Unit:
    """The unit that begins at ``start`` (``messages[start]`` is not a tool message)."""
    msg = messages[start]
    calls = msg.tool_calls if msg.role == "assistant" else ()
    if not calls:
        return Unit(start, start + 1, "message")
    pending = {c.id for c in calls}
    if len(pending) != len(calls):  # duplicate call ids can never be answered unambiguously
        pending = set()
    end = start + 1
    broken = len(pending) == 0
    while end < n and messages[end].role == "tool":
        for r in messages[end].tool_results:
            if r.call_id in pending:
                pending.discard(r.call_id)
            else:
                broken = True
        end += 1
    if pending or broken:
        return Unit(start, end, "incomplete_call")
    return Unit(start, end, "tool_call")


def group_units(messages: Sequence[Message]) -> list[Unit]:
    """Split ``messages`` into units, oldest first (see the module docstring)."""
    units: list[Unit] = []
    n = len(messages)
    i = 0
    while i < n:
        if messages[i].role == "tool":
            j = i + 1
            while j < n and messages[j].role == "tool":
                j += 1
            units.append(Unit(i, j, "orphan_result"))
            i = j
            continue
        unit = _unit_from(messages, i, n)
        units.append(unit)
        i = unit.end
    return units


def iter_units_backwards(
    messages: Sequence[Message], stop: int = 0, end: int | None = None
) -> Iterator[Unit]:
    """Yield the units of ``messages[stop:end]`` newest first, touching only what is consumed.

    A sliding window walks this until its budget is spent, so the cost of a build
    depends on the size of the window, not on the length of the conversation.
    The units are the same as `group_units` would give for ``messages[stop:end]``.
    """
    n = len(messages) if end is None else end
    end = n
    while end > stop:
        j = end - 1
        while j >= stop and messages[j].role == "tool":
            j -= 1
        if j < stop:  # only tool messages remain: results without their call
            yield Unit(stop, end, "orphan_result")
            return
        if j == end - 1:
            m = messages[j]
            calls = m.role == "assistant" and any(isinstance(p, ToolCallPart) for p in m.parts)
            yield Unit(j, end, "incomplete_call" if calls else "message")
            end = j
            continue
        # messages[j] is followed by tool messages up to end.
        if messages[j].role == "assistant" and messages[j].tool_calls:
            unit = _unit_from(messages, j, end)
            if unit.end == end:
                yield unit
            else:  # cannot happen: _unit_from consumes every following tool message
                yield Unit(j, end, "incomplete_call")
            end = j
        else:
            yield Unit(j + 1, end, "orphan_result")
            end = j + 1


def now() -> float:
    """The current time in seconds since the epoch (the default clock)."""
    return time.time()
