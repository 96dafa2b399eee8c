"""Validators that reproduce the providers' HTTP 400 rejections, before the request is sent.

Each validator takes a wire payload (as rendered, or read from a file) and raises
`ProviderRuleError(provider, where, rule, detail)` for the first problem found, so
a bad request fails here with a position and a rule id instead of at the provider.
The rules, with the provider's own wording where it has one:

OpenAI Chat Completions (``validate_openai_chat``, provider ``"openai"``)
    ``invalid_request``, ``invalid_message``, ``unknown_role``, ``missing_content``,
    ``invalid_content``; ``invalid_tool_call`` (malformed or empty ``tool_calls``);
    ``missing_tool_call_id``; ``orphan_tool_result`` ("messages with role 'tool'
    must be a response to a preceding message with 'tool_calls'");
    ``missing_tool_result`` ("an assistant message with 'tool_calls' must be followed
    by tool messages responding to each 'tool_call_id'"); ``duplicate_tool_call_id``
    (twice in one assistant message, or answered twice: "Duplicate value for
    'tool_call_id'").

OpenAI Responses (``validate_responses``, provider ``"responses"``)
    ``invalid_request``, ``invalid_item``, ``unknown_role``, ``missing_content``,
    ``invalid_content``, ``invalid_content_part`` (assistant content must be
    ``output_text``/``refusal``, other roles' ``input_*``); ``invalid_function_call``,
    ``invalid_function_call_output``; ``duplicate_call_id``;
    ``orphan_function_call_output`` ("No tool call found for function call output
    with call_id ..."); ``missing_function_call_output`` ("No tool output found for
    function call ...") — for every call the client runs (function, custom,
    computer, shell, apply_patch calls) and its output; an ``item_reference`` may
    stand for a stored call, so an output after one is not an orphan;
    ``reasoning_without_following_item`` ("Item 'rs_...' of type 'reasoning' was
    provided without its required following item": the item after a reasoning item
    must be the model's next output item, with its ``id``). Other item types are the
    provider's business and pass unchecked.

Anthropic Messages (``validate_anthropic``, provider ``"anthropic"``)
    see ``_rules_anthropic``, where it lives to keep each module short.

`detect_format` (in ``_detect``) tells which of these shapes a payload has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .._errors import ProviderRuleError
from ._rules_anthropic import MAX_CACHE_CONTROLS, validate_anthropic

__all__ = ["MAX_CACHE_CONTROLS", "validate_anthropic", "validate_openai_chat", "validate_responses"]


def _oai(where: str, rule: str, detail: str) -> NoReturn:
    raise ProviderRuleError("openai", where, rule, detail)


def _resp(where: str, rule: str, detail: str) -> NoReturn:
    raise ProviderRuleError("responses", where, rule, detail)


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value)


# -- OpenAI Chat Completions ------------------------------------------------------------

_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _chat_tool_calls(m: Mapping[str, Any], where: str) -> dict[str, int]:
    """The call ids of an assistant message, in order; malformed entries fail."""
    calls = m.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        _oai(f"{where}.tool_calls", "invalid_tool_call", "must be a non-empty list")
    ids: dict[str, int] = {}
    for j, call in enumerate(calls):
        here = f"{where}.tool_calls[{j}]"
        if not isinstance(call, Mapping) or not _nonempty_str(call.get("id")):
            _oai(here, "invalid_tool_call", "a tool call needs a non-empty string 'id'")
        kind = call.get("type")
        if kind == "function":
            fn = call.get("function")
            if (
                not isinstance(fn, Mapping)
                or not _nonempty_str(fn.get("name"))
                or not isinstance(fn.get("arguments"), str)
            ):
                _oai(
                    here,
                    "invalid_tool_call",
                    "a function call needs 'function': {'name': str, 'arguments': str}",
                )
        elif kind != "custom":
            _oai(here, "invalid_tool_call", f"unknown tool call type {kind!r}")
        call_id = call["id"]
        if call_id in ids:
            _oai(
                here,
                "duplicate_tool_call_id",
                f"tool call id {call_id!r} also used by tool_calls[{ids[call_id]}]",
            )
        ids[call_id] = j
    return ids


def validate_openai_chat(messages: Sequence[Any]) -> None:
    """Raise `ProviderRuleError` if OpenAI Chat Completions would reject ``messages``."""
    if not isinstance(messages, (list, tuple)):
        _oai("messages", "invalid_request", "must be a list of messages")
    # The assistant turn whose tool messages may follow, and what has been answered.
    open_calls: dict[str, int] | None = None
    owner = -1
    answered: dict[str, int] = {}

    def close(i: int) -> None:
        missing = [c for c in (open_calls or {}) if c not in answered]
        if missing:
            until = f"messages[{i}]" if i >= 0 else "the end"
            _oai(
                f"messages[{owner}]",
                "missing_tool_result",
                "an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'; unanswered before {until}: "
                + ", ".join(missing),
            )

    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            _oai(where, "invalid_message", "must be an object")
        role = m.get("role")
        if role not in _CHAT_ROLES:
            _oai(f"{where}.role", "unknown_role", f"unknown role {role!r}")
        content = m.get("content")
        if content is None:
            if role != "assistant":
                _oai(f"{where}.content", "missing_content", f"a {role} message needs content")
            if not (
                m.get("tool_calls") or m.get("function_call") or m.get("refusal") or m.get("audio")
            ):
                _oai(
                    f"{where}.content",
                    "missing_content",
                    "an assistant message needs content unless it has tool_calls, a refusal "
                    "or audio",
                )
        elif not isinstance(content, (str, list)):
            _oai(f"{where}.content", "invalid_content", "must be a string or a list of parts")

        if role == "tool":
            call_id = m.get("tool_call_id")
            if not _nonempty_str(call_id):
                _oai(f"{where}.tool_call_id", "missing_tool_call_id", "is required")
            if open_calls is None:
                _oai(
                    where,
                    "orphan_tool_result",
                    "messages with role 'tool' must be a response to a preceding message "
                    "with 'tool_calls'",
                )
            if call_id not in open_calls:
                _oai(
                    where,
                    "orphan_tool_result",
                    f"tool_call_id {call_id!r} is not among the tool_calls of messages[{owner}]",
                )
            if call_id in answered:
                _oai(
                    where,
                    "duplicate_tool_call_id",
                    f"Duplicate value for 'tool_call_id' of {call_id!r} in "
                    f"messages[{answered[call_id]}] and messages[{i}]",
                )
            answered[str(call_id)] = i
            continue

        # Any other message ends the run of tool messages answering the last calls.
        close(i)
        open_calls = None
        if role == "assistant" and m.get("tool_calls") is not None:
            open_calls = _chat_tool_calls(m, where)
            owner = i
            answered = {}
    close(-1)


# -- OpenAI Responses -------------------------------------------------------------------

_RESPONSES_ROLES = ("user", "assistant", "system", "developer")


def _responses_message(item: Mapping[str, Any], where: str) -> None:
    role = item.get("role")
    if role not in _RESPONSES_ROLES:
        _resp(f"{where}.role", "unknown_role", f"unknown role {role!r}")
    content = item.get("content")
    if content is None:
        _resp(f"{where}.content", "missing_content", "a message needs content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        _resp(f"{where}.content", "invalid_content", "must be a string or a list")
    # The API: assistant content takes output parts, the other roles input parts.
    allowed = (
        ("output_text", "refusal")
        if role == "assistant"
        else ("input_text", "input_image", "input_file")
    )
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in allowed:
            _resp(
                f"{where}.content[{j}]",
                "invalid_content_part",
                f"a {role} message cannot hold a {kind!r} part (allowed: {', '.join(allowed)})",
            )


# Calls the client runs, and the kind of the output answering each.
_CALLS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "program": "program_output",
}
_OUTPUTS = frozenset(_CALLS.values())


def _model_item(item: object) -> bool:
    """Whether ``item`` is something the model output (it may follow a reasoning item)."""
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return (
        isinstance(kind, str)
        and kind not in _OUTPUTS
        and kind not in ("item_reference", "mcp_approval_response")
    )


def _check_reasoning(items: Sequence[Any], i: int) -> None:
    j = i + 1
    while j < len(items) and isinstance(items[j], Mapping) and items[j].get("type") == "reasoning":
        j += 1
    after = items[j] if j < len(items) else None
    if not _model_item(after) or not _nonempty_str(after.get("id")):  # type: ignore[union-attr]
        _resp(
            f"input[{i}]",
            "reasoning_without_following_item",
            f"Item {items[i].get('id')!r} of type 'reasoning' was provided without its "
            "required following item (the model's next output item, with its id)",
        )


def validate_responses(items: Sequence[Any]) -> None:
    """Raise `ProviderRuleError` if the Responses API would reject ``items`` as ``input``."""
    if not isinstance(items, (list, tuple)):
        _resp("input", "invalid_request", "must be a list of items")
    calls: dict[str, int] = {}
    outputs: dict[str, int] = {}
    references = 0  # item references not yet taken to stand for a stored call
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            _resp(where, "invalid_item", "must be an object")
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind is not None and not isinstance(kind, str):
            _resp(f"{where}.type", "invalid_item", "must be a string")
        if kind == "message":
            _responses_message(item, where)
        elif kind == "reasoning":
            _check_reasoning(items, i)
        elif kind == "item_reference":
            references += 1
        elif kind in _CALLS:
            call_id = item.get("call_id")
            if kind == "function_call" and (
                not _nonempty_str(call_id)
                or not _nonempty_str(item.get("name"))
                or not isinstance(item.get("arguments"), str)
            ):
                _resp(
                    where,
                    "invalid_function_call",
                    "needs a non-empty 'call_id' and 'name' and string 'arguments'",
                )
            if not _nonempty_str(call_id):
                _resp(where, "invalid_function_call", f"a {kind} needs a non-empty 'call_id'")
            if call_id in calls:
                _resp(
                    where,
                    "duplicate_call_id",
                    f"Duplicate 'call_id' {call_id!r}, also in input[{calls[call_id]}]",
                )
            calls[str(call_id)] = i
        elif kind in _OUTPUTS:
            call_id = item.get("id" if kind == "local_shell_call_output" else "call_id")
            output = item.get("output")
            if kind == "function_call_output" and not isinstance(output, (str, list)):
                _resp(
                    where,
                    "invalid_function_call_output",
                    "needs a non-empty 'call_id' and an 'output' (string or list)",
                )
            if not _nonempty_str(call_id):
                _resp(
                    where,
                    "invalid_function_call_output",
                    "needs a non-empty 'call_id' and an 'output' (string or list)",
                )
            if call_id not in calls and references > 0:
                references -= 1  # a stored call, referenced
                calls[str(call_id)] = -1
            if call_id not in calls:
                _resp(
                    where,
                    "orphan_function_call_output",
                    f"No tool call found for function call output with call_id {call_id}",
                )
            if call_id in outputs:
                _resp(
                    where,
                    "duplicate_call_id",
                    f"call_id {call_id!r} already answered in input[{outputs[call_id]}]",
                )
            outputs[str(call_id)] = i
        elif kind is None:
            _resp(where, "invalid_item", "an item needs a 'type' (or a 'role')")
    for call_id, i in calls.items():
        if call_id not in outputs and i >= 0:
            _resp(
                f"input[{i}]",
                "missing_function_call_output",
                f"No tool output found for function call {call_id}",
            )
