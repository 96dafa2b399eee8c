"""What the side-by-side benchmarks share: cl100k, and the peers' message types.

`n_tokens` counts with the real cl100k_base encoding (loaded offline);
`VERIFY` is a counter under its own name, so `count_messages` recounts an
assembled request from scratch instead of trusting cached counts. The peers
(LangChain `trim_messages`, LlamaIndex `Memory`) get the same conversations
converted to their own message types, and LangChain's token counter charges the
same per-message accounting as contextwright, so all tools fill the same budget.
"""

# No `from __future__ import annotations` here: trim_messages tells a per-message
# counter from a per-list one by the real annotation object of its parameter.
import json
from collections.abc import Callable, Sequence
from typing import Any

from contextwright import Message
from contextwright.tokens._exact import load_tiktoken_encoding
from contextwright.tokens._frame import DEFAULT_OVERHEAD

__all__ = [
    "ENC",
    "VERIFY",
    "langchain_counters",
    "lc_tokens",
    "li_tokens",
    "n_tokens",
    "to_langchain",
    "to_llamaindex",
]

ENC = load_tiktoken_encoding("cl100k_base")
PER_MESSAGE = DEFAULT_OVERHEAD.per_message
PER_TOOL_CALL = DEFAULT_OVERHEAD.per_tool_call
PER_TOOL_RESULT = DEFAULT_OVERHEAD.per_tool_result
REPLY_PRIMING = DEFAULT_OVERHEAD.reply_priming


def n_tokens(text: str) -> int:
    return len(ENC.encode_ordinary(text))


class _VerifyCounter:
    """cl100k under another name, so `count_messages` recounts instead of reading caches."""

    exact = True
    name = "tiktoken:cl100k_base/verify"

    def count(self, text: str) -> int:
        return n_tokens(text)


VERIFY = _VerifyCounter()


def to_langchain(history: Sequence[Message], query: str, system_prompt: str) -> list[Any]:
    """LangChain messages: the system prompt, the history, then the question."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = [SystemMessage(system_prompt, id="system")]
    for m in history:
        if m.role == "user":
            out.append(HumanMessage(m.text, id=m.id))
        elif m.role == "assistant":
            calls = [
                {"name": p.name, "args": json.loads(p.arguments), "id": p.id, "type": "tool_call"}
                for p in m.tool_calls
            ]
            out.append(AIMessage(m.text, tool_calls=calls, id=m.id))
        elif m.role == "tool":
            r = m.tool_results[0]
            out.append(ToolMessage(r.text, tool_call_id=r.call_id, name=r.name, id=m.id))
    out.append(HumanMessage(query, id="current"))
    return out


def lc_tokens(message: Any, count: Callable[[str], int] = n_tokens) -> int:
    """A LangChain message counted with contextwright's accounting (``count``: cl100k)."""
    from langchain_core.messages import AIMessage, ToolMessage

    content = message.content
    text = (
        content
        if isinstance(content, str)
        else " ".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
    )
    n = PER_MESSAGE + count(text)
    if isinstance(message, AIMessage):
        for tc in message.tool_calls:
            n += PER_TOOL_CALL + count(tc["name"]) + count(json.dumps(tc["args"]))
    elif isinstance(message, ToolMessage):
        n += PER_TOOL_RESULT + count(message.tool_call_id)
    return n


def li_tokens(messages: Sequence[Any], count: Callable[[str], int] = n_tokens) -> int:
    """A LlamaIndex result counted with contextwright's accounting (tool calls included)."""
    from llama_index.core.base.llms.types import TextBlock, ToolCallBlock

    n = REPLY_PRIMING
    for m in messages:
        n += PER_MESSAGE
        for b in m.blocks:
            if isinstance(b, TextBlock):
                n += count(b.text)
            elif isinstance(b, ToolCallBlock):
                n += PER_TOOL_CALL + count(b.tool_name) + count(json.dumps(b.tool_kwargs))
        if "tool_call_id" in m.additional_kwargs:
            n += PER_TOOL_RESULT + count(m.additional_kwargs["tool_call_id"])
    return n


def langchain_counters() -> tuple[Callable[..., int], Callable[..., int], dict[str, int]]:
    """A per-message cl100k counter for `trim_messages`, its memoised twin, and the memo."""
    from langchain_core.messages import BaseMessage

    def count(message: BaseMessage) -> int:
        return lc_tokens(message)

    memo: dict[str, int] = {}

    def count_memo(message: BaseMessage) -> int:
        key = message.id or f"{message.type}\x00{message.content}"
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = count(message)
        return hit

    return count, count_memo, memo


def to_llamaindex(messages: Sequence[Message]) -> list[Any]:
    """LlamaIndex chat messages; tool calls as `ToolCallBlock`s."""
    from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock

    out: list[Any] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            blocks: list[Any] = [TextBlock(text=m.text)] if m.text else []
            blocks += [
                ToolCallBlock(
                    tool_call_id=p.id, tool_name=p.name, tool_kwargs=json.loads(p.arguments)
                )
                for p in m.tool_calls
            ]
            out.append(ChatMessage(role="assistant", blocks=blocks))
        elif m.role == "tool":
            r = m.tool_results[0]
            out.append(
                ChatMessage(
                    role="tool", content=r.text, additional_kwargs={"tool_call_id": r.call_id}
                )
            )
        else:
            out.append(ChatMessage(role=m.role, content=m.text))
    return out
