"""The Anthropic Messages validator (re-exported by ``_rules`` and the package).

`validate_anthropic` raises `ProviderRuleError` (provider ``"anthropic"``) for the
first of these it finds, quoting the API's own message where it has one:

* shape: ``invalid_request``, ``invalid_message``, ``invalid_content``,
  ``invalid_block``, ``unknown_role``, ``empty_messages``;
* ``system_in_messages`` — the system prompt goes in the top-level ``system``;
* ``first_not_user`` — "first message must use the 'user' role". The first-party
  API has relaxed this; Bedrock and Vertex have not, so it is kept, except for a
  conversation that opens with a compaction block (as the API returns it);
* ``compaction_block_misplaced`` — a ``compaction`` block must be "the first block
  of the conversation" (at most one, then);
* ``invalid_thinking`` — thinking blocks belong to assistant turns and come back
  as returned: ``thinking`` with its text and ``signature``, ``redacted_thinking``
  with its ``data``;
* ``thinking_not_first`` — with ``thinking`` enabled in the request, during a tool
  loop (the last user message answers tool calls) the assistant message that
  opened the turn must start with its thinking: "When `thinking` is enabled, a
  final `assistant` message must start with a thinking block (preceding the
  lastmost set of `tool_use` and `tool_result` blocks)". Checked only when the
  body says ``"thinking": {"type": "enabled"}`` (adaptive thinking may not think);
* ``roles_not_alternating`` — the API now merges consecutive same-role turns, but
  a merged turn can put text before tool results, so the renderer never emits
  them and the validator flags them;
* ``empty_content`` — "all messages must have non-empty content except for the
  optional final assistant message";
* ``empty_text`` — "text content blocks must be non-empty" / "must contain
  non-whitespace text" (whitespace is accepted only beside real text);
* ``missing_tool_result`` — "tool_use ids were found without tool_result blocks
  immediately after";
* ``orphan_tool_result`` — "unexpected tool_use_id found in tool_result blocks";
* ``tool_result_not_first`` — "Messages following tool_use blocks must begin with
  a matching number of tool_result blocks";
* ``duplicate_tool_use_id`` — tool_use ids must be unique in the request;
* ``unsupported_media_type`` — base64 images must be jpeg, png, gif or webp;
* ``trailing_whitespace_prefill`` — "final assistant content cannot end with
  trailing whitespace";
* ``too_many_cache_controls`` — "A maximum of 4 blocks with cache_control may be
  provided" (tools, system and messages counted together);
* ``cache_ttl_order`` — a breakpoint with the one-hour ``ttl`` may not follow one
  with the default five minutes (longer TTLs come first).

An assistant message last is allowed: it is a prefill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .._errors import ProviderRuleError
from ._common import blank

__all__ = ["MAX_CACHE_CONTROLS", "validate_anthropic"]

# Anthropic: "A maximum of 4 blocks with cache_control may be provided."
MAX_CACHE_CONTROLS = 4


def _anth(where: str, rule: str, detail: str) -> NoReturn:
    raise ProviderRuleError("anthropic", where, rule, detail)


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _anthropic_blocks(m: Mapping[str, Any], where: str, last: bool) -> list[Mapping[str, Any]]:
    """The content blocks of a message (a string is one text block), checked for shape."""
    role = m.get("role")
    content = m.get("content")
    if content is None:
        _anth(f"{where}.content", "empty_content", "content is required")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = content
    else:
        _anth(f"{where}.content", "invalid_content", "must be a string or a list")
    if not blocks and not (last and role == "assistant"):
        _anth(
            where,
            "empty_content",
            "all messages must have non-empty content except for the optional final "
            "assistant message",
        )
    for j, block in enumerate(blocks):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            _anth(f"{where}.content[{j}]", "invalid_block", "a block needs a 'type'")
    return blocks


# The image formats the Messages API accepts for base64 sources.
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _check_blocks(blocks: Sequence[Mapping[str, Any]], where: str) -> None:
    """Text blocks non-empty, images well-sourced, also inside tool results."""
    # Whitespace-only text is accepted only next to real text in the same content.
    real = any(
        b["type"] == "text" and isinstance(b.get("text"), str) and not blank(b["text"])
        for b in blocks
    )
    for j, b in enumerate(blocks):
        here = f"{where}[{j}]"
        if b["type"] == "text":
            text = b.get("text")
            if not isinstance(text, str):
                _anth(here, "invalid_block", "a text block needs a string 'text'")
            if not text:
                _anth(here, "empty_text", "text content blocks must be non-empty")
            if blank(text) and not real:
                _anth(here, "empty_text", "text content blocks must contain non-whitespace text")
        elif b["type"] == "image":
            source = b.get("source")
            if not isinstance(source, Mapping) or source.get("type") not in (
                "base64",
                "url",
                "file",
            ):
                _anth(here, "invalid_block", "an image block needs a base64, url or file 'source'")
            if source["type"] == "base64" and source.get("media_type") not in _IMAGE_TYPES:
                _anth(
                    f"{here}.source.media_type",
                    "unsupported_media_type",
                    f"{source.get('media_type')!r} is not one of {', '.join(_IMAGE_TYPES)}",
                )
        elif b["type"] == "tool_result" and isinstance(b.get("content"), list):
            inner = [
                x for x in b["content"] if isinstance(x, Mapping) and isinstance(x.get("type"), str)
            ]
            if len(inner) != len(b["content"]):
                _anth(f"{here}.content", "invalid_block", "a block needs a 'type'")
            _check_blocks(inner, f"{here}.content")


def _opens_with_compaction(m: Mapping[str, Any]) -> bool:
    content = m.get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and isinstance(content[0], Mapping)
        and content[0].get("type") == "compaction"
    )


def _check_provider_blocks(
    blocks: Sequence[Mapping[str, Any]], where: str, role: object, i: int
) -> None:
    """Thinking in assistant turns, as returned; a compaction block only first of all."""
    for j, b in enumerate(blocks):
        here = f"{where}.content[{j}]"
        kind = b["type"]
        if kind in ("thinking", "redacted_thinking"):
            if role != "assistant":
                _anth(here, "invalid_thinking", "thinking blocks belong to assistant turns")
            if kind == "thinking" and not (
                isinstance(b.get("thinking"), str) and _nonempty_str(b.get("signature"))
            ):
                _anth(
                    here, "invalid_thinking",
                    "a thinking block needs its 'thinking' text and 'signature' as returned",
                )  # fmt: skip
            if kind == "redacted_thinking" and not _nonempty_str(b.get("data")):
                _anth(here, "invalid_thinking", "a redacted_thinking block needs its 'data'")
        elif kind == "compaction" and (i, j) != (0, 0):
            _anth(
                here, "compaction_block_misplaced",
                "a compaction block must be the first block of the conversation",
            )  # fmt: skip


def _cache_controls(request: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Positions (and ttl) of every block carrying cache_control (tools, system, messages)."""
    found: list[tuple[str, object]] = []

    def scan(blocks: object, where: str) -> None:
        if not isinstance(blocks, list):
            return
        for j, b in enumerate(blocks):
            if isinstance(b, Mapping):
                mark = b.get("cache_control")
                if mark is not None:
                    ttl = mark.get("ttl", "5m") if isinstance(mark, Mapping) else None
                    found.append((f"{where}[{j}]", ttl))
                scan(b.get("content"), f"{where}[{j}].content")

    scan(request.get("tools"), "tools")
    scan(request.get("system"), "system")
    messages = request.get("messages")
    if isinstance(messages, list):
        for i, m in enumerate(messages):
            if isinstance(m, Mapping):
                scan(m.get("content"), f"messages[{i}].content")
    return found


def validate_anthropic(request: Mapping[str, Any]) -> None:
    """Raise `ProviderRuleError` if the Anthropic Messages API would reject ``request``.

    ``request`` is the body (or the part of it holding ``system`` and ``messages``).
    """
    if not isinstance(request, Mapping):
        _anth("request", "invalid_request", "must be an object")
    system = request.get("system")
    if isinstance(system, list):
        for j, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                _anth(f"system[{j}]", "invalid_block", "system blocks must be text blocks")
        _check_blocks(system, "system")
    elif system is not None and not isinstance(system, str):
        _anth("system", "invalid_request", "must be a string or a list of text blocks")

    messages = request.get("messages")
    if not isinstance(messages, list):
        _anth("messages", "invalid_request", "must be a list of messages")
    if not messages:
        _anth("messages", "empty_messages", "at least one message is required")
    n = len(messages)
    prev_role: object = None
    prev_uses: dict[str, int] = {}  # tool_use ids of the previous assistant turn
    all_uses: dict[str, int] = {}
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            _anth(where, "invalid_message", "must be an object")
        role = m.get("role")
        if role == "system":
            _anth(
                f"{where}.role",
                "system_in_messages",
                "system prompts go in the top-level 'system' field, not in messages",
            )
        if role not in ("user", "assistant"):
            _anth(f"{where}.role", "unknown_role", f"unknown role {role!r}")
        if i == 0 and role != "user" and not _opens_with_compaction(m):
            _anth(where, "first_not_user", "first message must use the 'user' role")
        if role == prev_role:
            _anth(
                where,
                "roles_not_alternating",
                f"two {role} turns in a row (messages[{i - 1}] and {where}); roles must alternate",
            )
        blocks = _anthropic_blocks(m, where, i == n - 1)
        _check_blocks(blocks, f"{where}.content")
        _check_provider_blocks(blocks, where, role, i)

        if role == "user":
            answered: set[str] = set()
            seen_other = False
            for j, b in enumerate(blocks):
                here = f"{where}.content[{j}]"
                if b["type"] == "tool_use":
                    _anth(here, "invalid_block", "tool_use blocks belong to assistant turns")
                if b["type"] != "tool_result":
                    seen_other = True
                    continue
                use_id = b.get("tool_use_id")
                if not _nonempty_str(use_id):
                    _anth(here, "invalid_block", "a tool_result needs a 'tool_use_id'")
                if use_id not in prev_uses:
                    _anth(
                        here,
                        "orphan_tool_result",
                        f"unexpected tool_use_id found in tool_result blocks: {use_id}. Each "
                        "tool_result block must have a corresponding tool_use block in the "
                        "previous message",
                    )
                if seen_other:
                    _anth(
                        here,
                        "tool_result_not_first",
                        "messages following tool_use blocks must begin with the tool_result "
                        "blocks; other content must come after them",
                    )
                answered.add(str(use_id))
            missing = [u for u in prev_uses if u not in answered]
            if missing:
                _anth(
                    f"messages[{i - 1}]",
                    "missing_tool_result",
                    "tool_use ids were found without tool_result blocks immediately after: "
                    + ", ".join(missing),
                )
            prev_uses = {}
        else:
            prev_uses = {}
            for j, b in enumerate(blocks):
                here = f"{where}.content[{j}]"
                if b["type"] == "tool_result":
                    _anth(here, "invalid_block", "tool_result blocks belong to user turns")
                if b["type"] != "tool_use":
                    continue
                use_id = b.get("id")
                if not _nonempty_str(use_id) or not _nonempty_str(b.get("name")):
                    _anth(here, "invalid_block", "a tool_use needs an 'id' and a 'name'")
                if not isinstance(b.get("input"), Mapping):
                    _anth(f"{here}.input", "invalid_block", "must be an object")
                if use_id in all_uses:
                    _anth(
                        here,
                        "duplicate_tool_use_id",
                        f"tool_use ids must be unique; {use_id!r} is also used in "
                        f"messages[{all_uses[use_id]}]",
                    )
                all_uses[str(use_id)] = i
                prev_uses[str(use_id)] = j
            if prev_uses and i == n - 1:
                _anth(
                    where,
                    "missing_tool_result",
                    "the request ends with tool_use blocks that no tool_result answers: "
                    + ", ".join(prev_uses),
                )
        prev_role = role

    _check_thinking_first(request, messages)
    final = messages[-1]
    if final.get("role") == "assistant":
        content = final.get("content")
        tail = content if isinstance(content, str) else None
        if isinstance(content, list) and content and content[-1].get("type") == "text":
            tail = content[-1].get("text")
        if isinstance(tail, str) and tail != tail.rstrip():
            _anth(
                f"messages[{n - 1}]",
                "trailing_whitespace_prefill",
                "final assistant content cannot end with trailing whitespace",
            )

    marked = _cache_controls(request)
    if len(marked) > MAX_CACHE_CONTROLS:
        _anth(
            marked[MAX_CACHE_CONTROLS][0],
            "too_many_cache_controls",
            f"A maximum of {MAX_CACHE_CONTROLS} blocks with cache_control may be provided. "
            f"Found {len(marked)}.",
        )
    short = None  # the first breakpoint with the default (five-minute) ttl
    for where, ttl in marked:
        if ttl == "1h" and short is not None:
            _anth(
                where,
                "cache_ttl_order",
                f"a cache_control with ttl '1h' must come before those with '5m' ({short})",
            )
        if ttl != "1h" and short is None:
            short = where


def _check_thinking_first(request: Mapping[str, Any], messages: list[Any]) -> None:
    """With thinking enabled and a tool loop under way, the turn's first assistant message thinks first.

    Without interleaved thinking the model thinks once, at the start of its turn;
    the assistant messages after tool results continue that turn. The turn starts
    after the last user message that is not only tool results.
    """
    thinking = request.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled":
        return
    if not _only_results(messages[-1]):
        return  # a new user turn (or a prefill): earlier thinking may be left out
    start = len(messages) - 1
    while start > 0 and not (
        messages[start]["role"] == "user" and not _only_results(messages[start])
    ):
        start -= 1
    opener = next(
        (i for i in range(start, len(messages)) if messages[i]["role"] == "assistant"), None
    )
    if opener is None:
        return  # the validation above has already refused results with no call
    content = messages[opener].get("content")
    first = content[0].get("type") if isinstance(content, list) and content else "text"
    if first not in ("thinking", "redacted_thinking"):
        _anth(
            f"messages[{opener}].content[0]",
            "thinking_not_first",
            f"Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` "
            "is enabled, a final `assistant` message must start with a thinking block "
            "(preceding the lastmost set of `tool_use` and `tool_result` blocks)",
        )


def _only_results(message: Mapping[str, Any]) -> bool:
    """Whether a user message holds tool results and nothing else."""
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
    )
