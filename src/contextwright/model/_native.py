"""Provider content the neutral model keeps as it came: `ThinkingPart` and `ProviderPart`.

Today's model APIs return more than text and tool calls, and some of it must be
sent back unchanged (docs/providers.md):

* `ThinkingPart` — Anthropic's extended thinking: a ``thinking`` block (its text
  and the ``signature`` that authenticates it) or a ``redacted_thinking`` block
  (opaque ``data``). Assistant only. Anthropic requires the thinking of the
  last assistant turn of a tool loop to come back unmodified, so the part is
  immutable and is never shortened.
* `ProviderPart` — any block or item of one provider's wire format that has no
  neutral equivalent, kept verbatim as JSON (``payload``): Anthropic documents,
  search results, server tool use and results, compaction blocks; OpenAI
  Responses reasoning items, built-in tool calls, item references, compaction
  items; OpenAI Chat audio and file parts. ``text`` is its faithful text form
  (a document's text, a search result's titles, a compaction summary) or ``""``:
  what another provider is sent instead, what search and summaries read.

A neutral part read from a wire form with more fields than it holds (a text
block with ``citations`` or ``cache_control``, a Responses ``function_call`` with
its ``id``) carries that wire form as its ``native`` `ProviderPart`; the
renderer of the same provider writes the native form back while the part still
says what it said (a shortened copy drops it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import InvalidMessageError
from ._checks import _require_str, check_unicode, dump_json, load_json

__all__ = [
    "PROVIDERS",
    "REASONING_KINDS",
    "ProviderPart",
    "ThinkingPart",
    "dump_payload",
    "is_compaction",
    "is_thinking",
]

# The wire formats a ProviderPart can come from (the names `BuiltContext.render` takes).
PROVIDERS = ("anthropic", "responses", "openai")

# ProviderPart kinds that are a model's reasoning: droppable first, never converted.
REASONING_KINDS = frozenset({"reasoning"})


def dump_payload(data: object, where: str) -> str:
    """``data`` (a JSON object) as compact JSON text with sorted keys, or
    `InvalidMessageError` naming ``where``.

    Keys are sorted as the stores write them (JSON objects are unordered, and
    SQLite's and PostgreSQL's JSON do not keep the order), so a part read back from
    any store equals the part that was stored.
    """
    if not isinstance(data, Mapping):
        raise InvalidMessageError(where, f"must be a JSON object, got {type(data).__name__}")
    return dump_json(data, where)


@dataclass(frozen=True, slots=True)
class ThinkingPart:
    """Anthropic extended thinking, sent back exactly as the API returned it.

    ``text`` and ``signature`` are a ``thinking`` block's; a ``redacted_thinking``
    block has ``redacted=True`` and its opaque ``data`` (and no text). A thinking
    part without a signature cannot be sent to Anthropic (the API rejects it)
    and is dropped when rendered, with a receipt line.
    """

    text: str = ""
    signature: str | None = None
    redacted: bool = False
    data: str | None = None
    type: Literal["thinking"] = field(default="thinking", init=False)

    def _check(self, where: str) -> None:
        if not isinstance(self.redacted, bool):
            raise InvalidMessageError(f"{where}.redacted", "must be a boolean")
        if self.redacted:
            _require_str(self.data, f"{where}.data")
            if self.text or self.signature is not None:
                raise InvalidMessageError(
                    where, "redacted thinking holds only its 'data' (no text, no signature)"
                )
            return
        if self.data is not None:
            raise InvalidMessageError(f"{where}.data", "only redacted thinking has data")
        _require_str(self.text, f"{where}.text", empty_ok=True)
        if self.signature is not None:
            _require_str(self.signature, f"{where}.signature", empty_ok=True)


@dataclass(frozen=True, slots=True)
class ProviderPart:
    """One provider's block or item, kept verbatim (``payload``: a JSON object as text).

    ``provider`` is ``"anthropic"``, ``"responses"`` or ``"openai"`` (Chat
    Completions); ``kind`` the wire type (``"document"``, ``"reasoning"``,
    ``"web_search_call"``, ...); ``text`` the faithful text form, ``""`` if none.
    Build one from a dict with `ProviderPart.of`; ``data`` parses the payload.
    """

    provider: str
    kind: str
    payload: str
    text: str = ""
    type: Literal["provider"] = field(default="provider", init=False)

    @classmethod
    def of(cls, provider: str, kind: str, data: Mapping[str, Any], text: str = "") -> ProviderPart:
        return cls(provider, kind, dump_payload(data, "payload"), text)

    @property
    def data(self) -> dict[str, Any]:
        """The payload parsed (a new dict each time: change it freely)."""
        parsed: dict[str, Any] = json.loads(self.payload)
        return parsed

    def _check(self, where: str) -> None:
        if self.provider not in PROVIDERS:
            raise InvalidMessageError(
                f"{where}.provider",
                f"unknown provider {self.provider!r}; expected one of {', '.join(PROVIDERS)}",
            )
        _require_str(self.kind, f"{where}.kind")
        _require_str(self.text, f"{where}.text", empty_ok=True)
        if not isinstance(self.payload, str):
            raise InvalidMessageError(f"{where}.payload", "must be JSON text")
        if not self.payload.isascii():
            check_unicode(self.payload, f"{where}.payload")
        parsed = load_json(self.payload, f"{where}.payload")
        if not isinstance(parsed, dict):
            raise InvalidMessageError(f"{where}.payload", "must be a JSON object")


def is_thinking(part: object) -> bool:
    """Whether ``part`` is a model's reasoning: Anthropic thinking or a Responses reasoning item."""
    if isinstance(part, ThinkingPart):
        return True
    return isinstance(part, ProviderPart) and part.kind in REASONING_KINDS


def is_compaction(part: object) -> bool:
    """Whether ``part`` is a provider's compaction (it stands in for the turns before it)."""
    return isinstance(part, ProviderPart) and part.kind == "compaction"
