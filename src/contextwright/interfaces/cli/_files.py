"""Reading conversation files for the command line: JSON, JSONL, or the object form.

A file holds a JSON list of messages, one message per line (JSONL), or an object
``{"messages": [...], "system": ..., "state": ..., ...}`` like the bundled demo.
A whole saved request body is read too: an OpenAI Chat Completions or Anthropic
Messages request (``messages``; Anthropic's ``system`` as a string or text blocks)
or an OpenAI Responses request (``input``, a string or a list of items;
``instructions`` is the system prompt). Its other parameters (``temperature``,
``tools``, ``max_tokens``, ``stream``, ``metadata``, ...) say nothing about the
context and are ignored; ``model`` is kept. Errors name the file, and the line and
column for malformed JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..._errors import InvalidMessageError

__all__ = ["OBJECT_KEYS", "REQUEST_KEYS", "load_conversation"]

OBJECT_KEYS = {
    "messages", "system", "message", "state", "user", "tenant", "conversation", "locale",
    "memories", "knowledge", "knowledge_gate", "experiences", "experience_stages",
    "core_fields", "stage_names", "labels", "model", "max_message_tokens",
}  # fmt: skip

# Parameters of the providers' request bodies that are not part of the context: ignored.
# OpenAI Chat Completions, OpenAI Responses and Anthropic Messages API references.
REQUEST_KEYS = {
    # OpenAI Chat Completions
    "temperature", "top_p", "n", "stream", "stream_options", "stop", "max_tokens",
    "max_completion_tokens", "presence_penalty", "frequency_penalty", "logit_bias",
    "logprobs", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "seed", "service_tier", "store", "metadata", "modalities", "audio",
    "prediction", "reasoning_effort", "web_search_options", "functions", "function_call",
    "verbosity", "prompt_cache_key", "safety_identifier", "user",
    # OpenAI Responses ("input" and "instructions" are read, see `load_conversation`)
    "input", "instructions", "max_output_tokens", "previous_response_id", "reasoning",
    "text", "truncation", "include", "background", "prompt", "max_tool_calls",
    # Anthropic Messages
    "stop_sequences", "top_k", "thinking", "container", "mcp_servers",
    # both: server-side context management (compaction, clearing), output settings
    "context_management", "output_config",
}  # fmt: skip


def _system_text(value: Any, where: str) -> str:
    """A system prompt given as a string or as Anthropic text blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, block in enumerate(value):
            if not isinstance(block, Mapping) or not isinstance(block.get("text"), str):
                raise InvalidMessageError(f"{where}[{i}]", "must be a text block")
            texts.append(block["text"])
        return "\n\n".join(texts)
    raise InvalidMessageError(where, "must be a string or a list of text blocks")


def _from_request(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` with a request body's context read and its other parameters dropped."""
    if "messages" not in data and "input" in data:  # an OpenAI Responses request
        items = data["input"]
        data["messages"] = [{"role": "user", "content": items}] if isinstance(items, str) else items
    if "instructions" in data and data["instructions"] is not None:
        if data.get("system"):
            raise InvalidMessageError(f"{path}: instructions", "conflicts with 'system'")
        data["system"] = data["instructions"]
    if "system" in data and not isinstance(data["system"], str):
        data["system"] = _system_text(data["system"], f"{path}: system")
    if data.get("user") is not None and not isinstance(data["user"], str):
        raise InvalidMessageError(f"{path}: user", "must be a string")
    conversation = data.get("conversation")
    if isinstance(conversation, Mapping):  # a Responses request's {"id": "conv_..."}
        if not isinstance(conversation.get("id"), str):
            raise InvalidMessageError(f"{path}: conversation.id", "must be a string")
        data["conversation"] = conversation["id"]
    for key in REQUEST_KEYS - {"user"}:
        data.pop(key, None)
    return data


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidMessageError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidMessageError(str(path), "is not UTF-8 text") from None
    stripped = text.lstrip()
    if not stripped:
        raise InvalidMessageError(str(path), "is empty")
    if stripped[0] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            if stripped[0] == "[":
                raise InvalidMessageError(
                    f"{path}:{exc.lineno}:{exc.colno}", f"invalid JSON: {exc.msg}"
                ) from None
            # a JSONL file also starts with "{": try it line by line
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InvalidMessageError(
                f"{path}:{n}:{exc.colno}", f"invalid JSON: {exc.msg}"
            ) from None
    return items


def load_conversation(path: Path) -> dict[str, Any]:
    data = _read(path)
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, Mapping):
        raise InvalidMessageError(
            str(path), "must hold a list of messages or an object with 'messages'"
        )
    unknown = sorted(set(data) - OBJECT_KEYS - REQUEST_KEYS)
    if unknown:
        raise InvalidMessageError(
            f"{path}: {unknown[0]}",
            f"unknown key; expected some of {sorted(OBJECT_KEYS)} or a provider's request body",
        )
    data = _from_request(dict(data), path)
    if not isinstance(data.get("messages"), list):
        raise InvalidMessageError(f"{path}: messages", "must be a list")
    return dict(data)
