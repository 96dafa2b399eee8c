"""Reading conversation files for the command line: JSON, JSONL, or the object form.

A file holds a JSON list of messages, one message per line (JSONL), or an object
``{"messages": [...], "system": ..., "state": ..., ...}`` like the bundled demo.
Errors name the file, and the line and column for malformed JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import InvalidMessageError

__all__ = ["OBJECT_KEYS", "load_conversation"]

OBJECT_KEYS = {
    "messages", "system", "message", "state", "user", "tenant", "conversation", "locale",
    "memories", "knowledge", "knowledge_gate", "experiences", "experience_stages",
    "core_fields", "stage_names", "labels", "model", "max_message_tokens",
}  # fmt: skip


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
    unknown = sorted(set(data) - OBJECT_KEYS)
    if unknown:
        raise InvalidMessageError(
            f"{path}: {unknown[0]}", f"unknown key; expected some of {sorted(OBJECT_KEYS)}"
        )
    if not isinstance(data.get("messages"), list):
        raise InvalidMessageError(f"{path}: messages", "must be a list")
    return dict(data)
