"""OpenAI Responses items beyond messages and function calls: which neutral part each is.

* **Calls the client runs** — ``function_call``, ``custom_tool_call``,
  ``computer_call``, ``local_shell_call``, ``shell_call``, ``apply_patch_call``,
  ``program`` — are `ToolCallPart` s and their outputs (``*_output``)
  `ToolResultPart` s, so a call and its output stay one unit. An item with more
  than the neutral fields (an ``id``, a ``status``, a computer action) is the
  part's ``native`` form, written back while the part is unchanged; another
  provider gets a function call named after the tool (``computer``, ``shell``)
  with the action as its arguments.
* **Output the model or the server made** — ``reasoning`` (with its
  ``encrypted_content``), built-in tool calls the server ran (``web_search_call``,
  ``file_search_call``, ``code_interpreter_call``, ``image_generation_call``,
  ``mcp_call``, ...), ``item_reference`` and ``compaction`` items — are
  `ProviderPart` s of the assistant message they follow (`MODEL_KINDS`).
* An assistant ``message`` item with its ``id``, ``status``, annotations or
  logprobs is a `TextPart` (its text) with the item as its native form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._errors import InvalidMessageError
from ..model._native import ProviderPart, dump_payload
from ..model._parts import ImagePart, TextPart, ToolCallPart, ToolResultPart
from ._common import check_arguments, expect_str, image_from_url

__all__ = [
    "CALL_KINDS",
    "MODEL_KINDS",
    "OUTPUT_KINDS",
    "USER_KINDS",
    "call_part",
    "item_text",
    "neutral_output",
    "output_key",
    "result_part",
]

# call kind -> its output's kind (the client runs these and answers with the output).
CALL_KINDS: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "program": "program_output",
}
OUTPUT_KINDS = frozenset(CALL_KINDS.values())

# Items the model or the server produced: ProviderParts of the assistant message.
_MODEL = """reasoning web_search_call file_search_call code_interpreter_call image_generation_call
mcp_call mcp_list_tools mcp_approval_request tool_search_call tool_search_output additional_tools
configuration_update compaction compaction_trigger item_reference"""
MODEL_KINDS = frozenset(_MODEL.split())
# Items the user side sends that are not calls' outputs: ProviderParts of a user message.
USER_KINDS = frozenset({"mcp_approval_response"})

# Keys of a call item that are the neutral part's, or bookkeeping (not the arguments).
_CALL_KEYS = frozenset({"type", "id", "call_id", "name", "status", "caller", "namespace"})


def output_key(item: Mapping[str, Any]) -> str:
    """The key holding the id of the call an output answers (``id`` for local shell)."""
    return "id" if item.get("type") == "local_shell_call_output" else "call_id"


def call_part(item: Mapping[str, Any], where: str) -> ToolCallPart:
    """The `ToolCallPart` of a call item (any of `CALL_KINDS`)."""
    kind = str(item.get("type"))
    call_id = expect_str(item.get("call_id"), f"{where}.call_id", empty_ok=False)
    if kind == "function_call":
        name = expect_str(item.get("name"), f"{where}.name", empty_ok=False)
        arguments = expect_str(item.get("arguments"), f"{where}.arguments")
        check_arguments(arguments, f"{where}.arguments")
        plain = set(item) <= {"type", "call_id", "name", "arguments"}
    else:
        if kind == "custom_tool_call":
            name = expect_str(item.get("name"), f"{where}.name", empty_ok=False)
        else:
            name = kind.removesuffix("_call")
        args = {k: v for k, v in item.items() if k not in _CALL_KEYS}
        arguments = dump_payload(args, where)
        plain = False
    native = None if plain else ProviderPart("responses", kind, dump_payload(item, where))
    return ToolCallPart(call_id, name, arguments, native)


def _output_content(item: Mapping[str, Any], where: str) -> str | tuple[TextPart | ImagePart, ...]:
    """The neutral content of an output item: its text and images."""
    kind = item.get("type")
    output = item.get("result" if kind == "program_output" else "output")
    if output is None:
        if kind == "apply_patch_call_output":
            return ""
        raise InvalidMessageError(f"{where}.output", "is required")
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping):  # computer_call_output: a screenshot
        url = output.get("image_url")
        return (image_from_url(url),) if isinstance(url, str) and url else ()
    if not isinstance(output, list):
        raise InvalidMessageError(f"{where}.output", "must be a string or a list")
    parts: list[TextPart | ImagePart] = []
    for j, raw in enumerate(output):
        here = f"{where}.output[{j}]"
        if not isinstance(raw, Mapping):
            raise InvalidMessageError(here, "must be an object")
        kind_j = raw.get("type")
        if kind_j in ("input_text", "output_text"):
            parts.append(TextPart(expect_str(raw.get("text"), f"{here}.text")))
        elif kind_j == "input_image" and isinstance(raw.get("image_url"), str):
            parts.append(image_from_url(raw["image_url"], raw.get("detail")))
        elif kind_j == "input_image" or kind_j == "input_file":
            continue  # by file id or file data: only the native form carries it
        elif "stdout" in raw or "stderr" in raw:  # shell_call_output
            text = "\n".join(str(raw.get(k) or "") for k in ("stdout", "stderr")).strip()
            parts.append(TextPart(text))
        else:
            raise InvalidMessageError(
                f"{here}.type",
                f"unsupported output part type {kind_j!r} "
                "(supported: input_text, input_image, input_file)",
            )
    return tuple(parts)


def result_part(item: Mapping[str, Any], where: str, names: dict[str, str]) -> ToolResultPart:
    """The `ToolResultPart` of an output item (any of `OUTPUT_KINDS`)."""
    key = output_key(item)
    call_id = expect_str(item.get(key), f"{where}.{key}", empty_ok=False)
    content = _output_content(item, where)
    plain = item.get("type") == "function_call_output" and set(item) <= {
        "type", "call_id", "output",
    }  # fmt: skip
    if plain and not isinstance(content, str):
        raw = item["output"]
        plain = len(content) == len(raw) and all(
            set(r) <= {"type", "text", "image_url", "detail"} for r in raw
        )
    native = (
        None if plain else ProviderPart("responses", str(item["type"]), dump_payload(item, where))
    )
    return ToolResultPart(call_id, content, name=names.get(call_id), native=native)


def item_text(item: Mapping[str, Any]) -> str:
    """The faithful text form of a kept item ("" when it has none; never reasoning)."""
    kind = item.get("type")
    if kind == "file_search_call":
        found = item.get("results")
        if isinstance(found, list):
            return "\n".join(
                str(r.get("text")) for r in found if isinstance(r, Mapping) and r.get("text")
            )
    if kind == "code_interpreter_call":
        logs = [
            str(o.get("logs"))
            for o in item.get("outputs") or ()
            if isinstance(o, Mapping) and o.get("logs")
        ]
        code = item.get("code")
        return "\n".join(([code] if isinstance(code, str) and code else []) + logs)
    if kind == "mcp_call":
        output = item.get("output")
        return output if isinstance(output, str) else ""
    return ""


def same_call(native: Mapping[str, Any], p: ToolCallPart) -> bool:
    """Whether ``p`` still says what its native item says."""
    try:
        back = call_part(native, "native")
    except InvalidMessageError:
        return False
    return (back.id, back.name, json.loads(back.arguments or "{}")) == (
        p.id, p.name, json.loads(p.arguments or "{}"),
    )  # fmt: skip


def same_result(native: Mapping[str, Any], r: ToolResultPart) -> bool:
    try:
        back = result_part(native, "native", {})
    except InvalidMessageError:
        return False
    return (back.call_id, back.content) == (r.call_id, r.content)


def neutral_output(kind: str, call_id: str, text: str) -> dict[str, Any] | None:
    """The output item answering a call of ``kind`` with ``text`` (a result changed since
    it was read: shortened, compressed), or None where a function call output does."""
    if kind == "custom_tool_call":
        return {"type": "custom_tool_call_output", "call_id": call_id, "output": text}
    if kind == "local_shell_call":
        return {"type": "local_shell_call_output", "id": call_id, "output": text}
    if kind == "apply_patch_call":
        return {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed",
                "output": text}  # fmt: skip
    if kind == "shell_call":
        outcome = {"type": "exit", "exit_code": 0}
        return {"type": "shell_call_output", "call_id": call_id,
                "output": [{"stdout": text, "stderr": "", "outcome": outcome}]}  # fmt: skip
    return None
