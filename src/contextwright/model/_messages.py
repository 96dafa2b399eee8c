"""The provider-neutral message model: the ground floor every other part stands on.

A `Message` has a role (system, developer, user, assistant, tool) and a tuple of
parts: `TextPart`, `ImagePart`, `ToolCallPart` (assistant only), `ToolResultPart`
(tool only), and the provider content kept as it came (`_native`): `ThinkingPart`
(assistant only) and `ProviderPart` (user and assistant). Messages are immutable and validated when built, so everything above
this module may assume a well-formed message; a malformed one raises
`InvalidMessageError` naming the field, e.g. ``parts[1].call_id``.

`group_units` (in `_units`) groups a list of messages into *units*: an assistant turn that calls
tools together with all the tool messages answering it is one unit, every other
message is a unit of its own. Windowing, trimming and compaction work on units, so
a tool call is never separated from its results (see docs/architecture.md). Tool
results without their call and calls without all their results are reported as
*broken* units, which the engine never sends to a provider.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .._errors import InvalidMessageError
from ._checks import _check_metadata, _require_str
from ._parts import (
    _ALLOWED,
    _PART_TYPES,
    Part,
    ProviderPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    _part_from_dict,
    _part_to_dict,
)

__all__ = ["ROLES", "Message", "Role"]

Role: TypeAlias = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")


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
        if self.created_at is not None and (
            not isinstance(self.created_at, (int, float)) or not math.isfinite(self.created_at)
        ):  # NaN or infinity: not a time, and not JSON (to_dict is sent and exported as JSON)
            raise InvalidMessageError(
                f"{prefix}created_at",
                f"must be seconds since the epoch (a finite number), got {self.created_at!r}",
            )
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
        """All text of the message, joined by newlines: text parts, tool results' text,
        and the text form of provider parts (a document's text; never thinking)."""
        parts = self.parts
        if len(parts) == 1:
            p = parts[0]
            if isinstance(p, TextPart):
                return p.text
            if isinstance(p, ToolResultPart):
                return p.text
        out: list[str] = []
        for p in parts:
            if isinstance(p, (TextPart, ToolResultPart)) or (
                isinstance(p, ProviderPart) and p.text
            ):
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


# -- units ------------------------------------------------------------------------------


def now() -> float:
    """The current time in seconds since the epoch (the default clock)."""
    return time.time()
