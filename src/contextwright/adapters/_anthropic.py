"""Anthropic Messages API: ``system`` + ``messages``, to and from the neutral model.

Anthropic's request differs from the neutral model in four ways that shape the
conventions below: the system prompt is a top-level field, there is no tool role
(tool results are ``tool_result`` blocks in a user turn), turns must alternate
between user and assistant, and empty text is rejected.

Rendering (`render_anthropic`):

* **Leading system messages.** All system and developer messages before the first
  other message become the top-level ``system`` list of text blocks (one block per
  text part); the key is omitted when there are none.
* **Later system messages** (the engine's dynamic context and goal restatement
  come after the history) become text blocks of a *user* turn, because a system
  entry inside ``messages`` is not accepted by every model.
* **Tool messages** become ``tool_result`` blocks in a user turn.
* **Merging.** Consecutive messages that map to the same role are merged into one
  turn. Within a merged user turn all ``tool_result`` blocks come first, then the
  other blocks in order (the API: "Messages following tool_use blocks must begin
  with a matching number of tool_result blocks").
* **Empty text.** Text blocks that are empty or only whitespace are never emitted
  ("text content blocks must be non-empty" / "must contain non-whitespace text");
  a tool result with no text is sent without ``content``; a turn left with no
  blocks is dropped. The final assistant turn (a prefill) loses trailing
  whitespace ("final assistant content cannot end with trailing whitespace").
* **First turn.** A request whose first turn is an assistant turn is rejected by
  the Bedrock and Vertex endpoints ("first message must use the user role"); it
  happens when a window cuts the history just after a user turn. Rendering then
  puts a user turn holding ``first_user_text`` first (by default
  `FIRST_USER_TEXT`, a short note that earlier turns are not shown), so the
  request is valid everywhere. With ``first_user_text=None`` it raises
  `ProviderRuleError` (rule ``first_not_user``) instead.
* **Cache breakpoints.** ``cache_breakpoints`` are indexes into the *input* list
  (negative indexes count from the end). Each puts ``cache_control:
  {"type": "ephemeral"}`` on the last rendered block carrying content of that
  message (system blocks included); for a message that rendered nothing, on the
  last block before it. Indexes are deduplicated, and if more than
  ``max_breakpoints`` remain only the last ones are kept: Anthropic allows 4
  blocks with ``cache_control`` per request, and the latest breakpoints cover the
  longest prefix.
  Breakpoints the user set (``cache_control`` kept in a block's native form)
  count against the 4: the renderer's own go first, then the user's oldest, each
  with a note; none of the renderer's is put before a block the user marked with
  the one-hour ``ttl`` (longer TTLs must come first).
* **Provider content** (`_anthropic_blocks`): thinking, documents, citations,
  server tools and the rest are written back as they were read; another
  provider's parts are converted or dropped (`_foreign`). Each such decision is
  appended to ``notes`` when a list is given.
* **Compaction.** A ``compaction`` block stands in for everything before it and
  must be the first block of the conversation: the messages before the last one
  (system messages aside) are left out, with a note, and no user turn is put
  before it.
* ``Message.name`` and image ``detail`` have no Anthropic field and are dropped.

Reading (`from_anthropic`): ``system`` (a string or text blocks) becomes leading
system messages, one per block. A user turn holding ``tool_result`` blocks becomes
*one* tool message with all its results, followed by a user message with the
turn's remaining text and images, if any. A ``system`` entry inside ``messages``
(admitted by the SDK's ``MessageParam``) reads as a system message. Every block of
the Messages API is read (`_anthropic_blocks`); an unknown type is rejected with
an `InvalidMessageError` naming the position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError, ProviderRuleError
from ..model._messages import Message
from ..model._native import is_compaction
from ..model._parts import Part, TextPart
from ._anthropic_blocks import (
    ANTHROPIC_KINDS,
    content_blocks,
    read_block,
    read_tool_result,
    render_tool_result,
)
from ._common import (
    blank,
    build_message,
    expect_list,
    expect_mapping,
    expect_messages,
    expect_neutral,
)
from ._foreign import RenderNote, note
from ._rules import MAX_CACHE_CONTROLS, validate_anthropic

__all__ = ["FIRST_USER_TEXT", "from_anthropic", "render_anthropic"]

# The user turn put first when a conversation would open with the assistant.
FIRST_USER_TEXT = "(Earlier turns of this conversation are not shown.)"

# -- reading ----------------------------------------------------------------------------


def _blocks(content: object, where: str) -> Sequence[Any]:
    """Content as a list of blocks: a string is shorthand for one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        raise InvalidMessageError(where, "is required")
    return expect_list(content, where)


_SUPPORTED = {
    "user": ", ".join(["text", "image", "tool_result", *sorted(ANTHROPIC_KINDS["user"])]),
    "assistant": ", ".join(
        ["text", "tool_use", "thinking", "redacted_thinking", *sorted(ANTHROPIC_KINDS["assistant"])]
    ),
    "system": "text",
}


def _unsupported(kind: object, where: str, supported: str) -> InvalidMessageError:
    return InvalidMessageError(
        f"{where}.type", f"unsupported block type {kind!r} here (supported: {supported})"
    )


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], system: str | Sequence[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Read an Anthropic ``messages`` list (and optional ``system``) into neutral messages.

    Raises `InvalidMessageError` naming the position
    (``messages[3].content[1].tool_use_id``) for anything malformed or unsupported.
    """
    out: list[Message] = []
    call_names: dict[str, str] = {}
    if isinstance(system, str):
        if system:
            out.append(Message("system", (TextPart(system),)))
    elif system is not None:
        for j, raw in enumerate(expect_list(system, "system")):
            block = expect_mapping(raw, f"system[{j}]")
            if block.get("type") != "text":
                raise _unsupported(block.get("type"), f"system[{j}]", "text")
            text = read_block(block, "system", f"system[{j}]", call_names)
            out.append(build_message("system", [text] if text else [], f"system[{j}]"))

    for i, raw in enumerate(expect_messages(messages, "messages")):
        where = f"messages[{i}]"
        m = expect_mapping(raw, where)
        role = m.get("role")
        if role not in ("user", "assistant", "system"):
            raise InvalidMessageError(
                f"{where}.role", f"unknown role {role!r}; expected user or assistant"
            )
        blocks = _blocks(m.get("content"), f"{where}.content")
        parts: list[Part] = []
        results: list[Part] = []
        for j, raw_block in enumerate(blocks):
            here = f"{where}.content[{j}]"
            block = expect_mapping(raw_block, here)
            kind = block.get("type")
            if kind == "tool_result" and role == "user":
                results.append(read_tool_result(block, here, call_names))
                continue
            part = read_block(block, str(role), here, call_names)
            if part is None:
                raise _unsupported(kind, here, _SUPPORTED[str(role)])
            parts.append(part)
        if role == "user":
            if results:
                out.append(build_message("tool", results, where))
            if parts or not results:
                out.append(build_message("user", parts, where))
        else:
            out.append(build_message(str(role), parts, where))
    return out


# -- rendering --------------------------------------------------------------------------

# A block paired with the index of the input message it carries content of.
_Placed = tuple[int, dict[str, Any]]

# Blocks that cannot carry cache_control (the Messages API's thinking params have no such field).
_UNMARKABLE = ("thinking", "redacted_thinking")


@dataclass
class _Turn:
    role: Literal["user", "assistant"]
    results: list[_Placed] = field(default_factory=list)
    others: list[_Placed] = field(default_factory=list)

    def blocks(self) -> list[_Placed]:
        # Anthropic: tool_result blocks must open the user turn that follows tool_use.
        return self.results + self.others


def _message_blocks(m: Message, k: int, notes: list[RenderNote] | None) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [render_tool_result(r, k, notes) for r in m.tool_results]
    return content_blocks(m.parts, k, notes)


def _breakpoints(indexes: Sequence[int], limit: int, n: int) -> list[int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"max_breakpoints must be a non-negative integer, got {limit!r}")
    if isinstance(indexes, (str, bytes)) or not isinstance(indexes, Sequence):
        raise ConfigError(f"cache_breakpoints must be a sequence of integers, got {indexes!r}")
    found: set[int] = set()
    for b in indexes:
        if isinstance(b, bool) or not isinstance(b, int):
            raise ConfigError(f"cache breakpoints must be integers, got {b!r}")
        i = b + n if b < 0 else b
        if not 0 <= i < n:
            raise ConfigError(f"cache breakpoint {b} is out of range for {n} messages")
        found.add(i)
    return sorted(found)


def _mark(placed: list[_Placed], index: int) -> dict[str, Any] | None:
    """The last block of message ``index`` that can carry cache_control (else the last
    before it)."""
    own = [b for owner, b in placed if owner == index and b["type"] not in _UNMARKABLE]
    before = [b for owner, b in placed if owner < index and b["type"] not in _UNMARKABLE]
    return own[-1] if own else before[-1] if before else None


def _place_marks(
    placed: list[_Placed], marks: list[int], most: int, notes: list[RenderNote] | None
) -> None:
    """Put at most ``most`` of the renderer's breakpoints beside the user's own, at most
    `MAX_CACHE_CONTROLS` in all."""
    limit = MAX_CACHE_CONTROLS
    position = {id(b): n for n, (_, b) in enumerate(placed)}
    users = [(owner, b) for owner, b in placed if b.get("cache_control") is not None]
    # The newest breakpoints cover the longest prefix: drop the oldest beyond the limit.
    for owner, b in users[: max(0, len(users) - limit)]:
        del b["cache_control"]
        note(notes, owner, "anthropic cache_control", "dropped",
             f"more than {limit} blocks with cache_control; the newest are kept")  # fmt: skip
    users = users[max(0, len(users) - limit) :]
    hour = [position[id(b)] for _, b in users if b["cache_control"].get("ttl") == "1h"]
    room = min(most, limit - len(users))
    chosen: list[dict[str, Any]] = []
    for index in reversed(marks):
        target = _mark(placed, index)
        if target is None or target.get("cache_control") is not None or room <= 0:
            continue
        if hour and position[id(target)] < max(hour):
            continue  # a one-hour breakpoint later covers it (longer TTLs come first)
        if all(t is not target for t in chosen):
            chosen.append(target)
            room -= 1
    for target in chosen:
        target["cache_control"] = {"type": "ephemeral"}


def _strip_prefill(turn: _Turn) -> None:
    """Anthropic: "final assistant content cannot end with trailing whitespace"."""
    while turn.others:
        owner, block = turn.others[-1]
        if block["type"] != "text":
            return
        text = block["text"].rstrip()
        if text:
            turn.others[-1] = (owner, {**block, "text": text})
            return
        turn.others.pop()


def _compacted(seq: Sequence[Message], start: int, notes: list[RenderNote] | None) -> int:
    """Where the turns start: at the last message holding an Anthropic compaction block."""
    last = None
    for k in range(len(seq) - 1, start - 1, -1):
        if any(is_compaction(p) and p.provider == "anthropic" for p in seq[k].parts):  # type: ignore[union-attr]
            last = k
            break
    if last is None:
        return start
    gone = [k for k in range(start, last) if seq[k].role not in ("system", "developer")]
    if gone:
        note(notes, gone[0], "history", "dropped",
             f"{len(gone)} message(s) before an Anthropic compaction block, which stands in "
             "for them (it must open the conversation)")  # fmt: skip
    return last


def render_anthropic(
    messages: Sequence[Message],
    *,
    cache_breakpoints: Sequence[int] = (),
    max_breakpoints: int = 4,
    first_user_text: str | None = FIRST_USER_TEXT,
    validate: bool = True,
    notes: list[RenderNote] | None = None,
) -> dict[str, Any]:
    """Render neutral messages as ``{"system": [...], "messages": [...]}`` for Anthropic.

    See the module docstring for the conventions. With ``validate`` (the default)
    the result is checked with `validate_anthropic`, so a request that Anthropic
    would reject raises `ProviderRuleError` here instead. Parts not sent as they
    came are told in ``notes`` (`RenderNote`), when a list is given.
    """
    seq = expect_neutral(messages)
    marks = _breakpoints(cache_breakpoints, max_breakpoints, len(seq))

    system: list[_Placed] = []
    start = 0
    while start < len(seq) and seq[start].role in ("system", "developer"):
        system.extend((start, b) for b in content_blocks(seq[start].parts, start, notes))
        start += 1
    first = _compacted(seq, start, notes)

    turns: list[_Turn] = []
    for k in range(first, len(seq)):
        m = seq[k]
        role: Literal["user", "assistant"] = "assistant" if m.role == "assistant" else "user"
        blocks = _message_blocks(m, k, notes)
        at = next((j for j, b in enumerate(blocks) if b["type"] == "compaction"), 0)
        if at:  # the compaction block must open the conversation
            note(notes, k, "content", "dropped", f"{at} block(s) before a compaction block")
            blocks = blocks[at:]
        if not blocks:
            continue  # nothing left to send: an empty turn is rejected
        if not turns or turns[-1].role != role:
            turns.append(_Turn(role))
        for b in blocks:
            (turns[-1].results if b["type"] == "tool_result" else turns[-1].others).append((k, b))

    if turns and turns[-1].role == "assistant":
        _strip_prefill(turns[-1])
        if not turns[-1].blocks():
            turns.pop()
    opens = turns[0].blocks()[0][1]["type"] if turns and turns[0].blocks() else None
    if turns and turns[0].role == "assistant" and opens != "compaction":
        if first_user_text is None:
            raise ProviderRuleError(
                "anthropic",
                "messages[0]",
                "first_not_user",
                "first message must use the 'user' role, and the conversation would start "
                "with an assistant turn (first_user_text=None)",
            )
        if blank(first_user_text):
            raise ConfigError("first_user_text must contain non-whitespace text")
        turns.insert(0, _Turn("user", others=[(-1, {"type": "text", "text": first_user_text})]))

    placed = system + [pair for t in turns for pair in t.blocks()]
    _place_marks(placed, marks, max_breakpoints, notes)

    request: dict[str, Any] = {}
    if system:
        request["system"] = [b for _, b in system]
    request["messages"] = [{"role": t.role, "content": [b for _, b in t.blocks()]} for t in turns]
    if validate:
        validate_anthropic(request)
    return request
