"""Telling which provider shape a JSON payload has (for tools that read any of them).

`detect_format` looks for marks only one shape has:

* **responses** — items with a ``type`` (``message``, ``function_call``,
  ``function_call_output``, ``reasoning``, ...), or ``input_text``,
  ``input_image``, ``output_text`` parts; an object with an ``input`` list;
* **openai** — role ``tool`` or ``function``, ``tool_calls``, ``tool_call_id``,
  ``function_call``, or ``image_url`` / ``refusal`` / ``input_audio`` / ``file`` parts;
* **anthropic** — ``tool_use`` / ``tool_result`` / ``thinking`` / ``document`` /
  server tool blocks, ``image`` blocks with a ``source``; an object with a
  top-level ``system`` beside ``messages``;
* **contextwright** — messages with ``parts`` (`Message.to_dict`, as
  ``contextwright export --format jsonl`` writes them).

`read_messages` reads a list of any of these into `Message` objects.

A payload with no mark at all (plain ``{"role", "content": "text"}`` messages)
is reported as ``"openai"``: such a list is valid Chat Completions input, and it
reads the same in every format. A payload with marks of two shapes is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from .._errors import InvalidMessageError
from ..model._messages import Message

__all__ = ["Format", "detect_format", "read_messages"]

Format: TypeAlias = Literal["openai", "anthropic", "responses", "contextwright"]

_PART_MARKS: dict[str, Format] = {
    "input_text": "responses",
    "input_image": "responses",
    "input_file": "responses",
    "output_text": "responses",
    "image_url": "openai",
    "refusal": "openai",
    "input_audio": "openai",
    "file": "openai",
    "tool_use": "anthropic",
    "tool_result": "anthropic",
    "thinking": "anthropic",
    "redacted_thinking": "anthropic",
    "document": "anthropic",
    "search_result": "anthropic",
    "server_tool_use": "anthropic",
    "web_search_tool_result": "anthropic",
    "web_fetch_tool_result": "anthropic",
    "code_execution_tool_result": "anthropic",
    "bash_code_execution_tool_result": "anthropic",
    "text_editor_code_execution_tool_result": "anthropic",
    "mcp_tool_use": "anthropic",
    "mcp_tool_result": "anthropic",
    "container_upload": "anthropic",
    "compaction": "anthropic",  # a content block here; a Responses compaction is an item
}


def _marks(item: Mapping[str, Any]) -> set[Format]:
    found: set[Format] = set()
    if "parts" in item:  # only the neutral model's own dicts have parts (its roles
        return {"contextwright"}  # include "tool", which would read as OpenAI's)
    if isinstance(item.get("type"), str):
        found.add("responses")  # only Responses items carry a type (message, function_call, ...)
    role = item.get("role")
    if role in ("tool", "function") or any(
        k in item for k in ("tool_calls", "tool_call_id", "function_call")
    ):
        found.add("openai")
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            mark = _PART_MARKS.get(str(part.get("type")))
            if mark is not None:
                found.add(mark)
            elif part.get("type") == "image" and "source" in part:
                found.add("anthropic")
    return found


def _detect_list(items: Sequence[Any], where: str) -> Format:
    seen: dict[Format, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidMessageError(f"{where}[{i}]", "must be an object")
        for mark in _marks(item):
            seen.setdefault(mark, i)
    if len(seen) > 1:
        shapes = ", ".join(f"{fmt} (first at {where}[{i}])" for fmt, i in seen.items())
        raise InvalidMessageError(where, f"mixes the shapes of several providers: {shapes}")
    if seen:
        return next(iter(seen))
    return "openai"


def detect_format(payload: object) -> Format:
    """Which shape ``payload`` has: ``"openai"``, ``"anthropic"``, ``"responses"`` or
    ``"contextwright"``.

    ``payload`` is a list of messages/items, or an object holding them
    (``{"messages": [...]}``, ``{"system": ..., "messages": [...]}``,
    ``{"input": [...]}``). Raises `InvalidMessageError` for anything else, or for a
    list mixing the shapes of several providers.
    """
    if isinstance(payload, Mapping):
        if isinstance(payload.get("input"), list):
            return "responses"
        messages = payload.get("messages")
        if not isinstance(messages, list):
            raise InvalidMessageError(
                "payload", "an object payload needs a 'messages' list (or an 'input' list)"
            )
        if "system" in payload:
            return "anthropic"
        return _detect_list(messages, "messages")
    if isinstance(payload, (list, tuple)):
        return _detect_list(payload, "payload")
    raise InvalidMessageError(
        "payload",
        f"must be a list of messages or an object holding them, got {type(payload).__name__}",
    )


def read_messages(items: Sequence[Any]) -> list[Message]:
    """A list of messages in any shape `detect_format` knows, as `Message` objects."""
    from ._anthropic import from_anthropic
    from ._openai_chat import from_openai_chat
    from ._openai_responses import from_responses

    fmt = detect_format(items)
    if fmt == "contextwright":
        return [Message.from_dict(d, f"messages[{i}]") for i, d in enumerate(items)]
    if fmt == "anthropic":
        return from_anthropic(items)
    if fmt == "responses":
        return from_responses(items)
    return from_openai_chat(items)
