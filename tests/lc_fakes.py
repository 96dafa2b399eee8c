"""A fake LangChain chat model for agent loops: calls a tool when asked to check, and records its input."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field

from contextwright import TokenCounter, count_messages, group_units
from contextwright.integrations.langchain import from_langchain_messages


class ToolCallingFake(GenericFakeChatModel):
    """`GenericFakeChatModel` that an agent can bind tools to, answering from what it received.

    If its input holds a tool result it has not answered yet, it answers with that
    result; otherwise, if the newest user text asks it to "check" something, it
    calls ``lookup`` with that text; otherwise it answers "Noted.". ``received`` holds
    every input, as given.
    """

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    received: list[list[BaseMessage]] = Field(default_factory=list)
    answered: set[str] = Field(default_factory=set)

    def bind_tools(self, tools: Sequence[Any], **kw: Any) -> ToolCallingFake:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        open_results = [
            m
            for m in messages
            if isinstance(m, ToolMessage) and m.tool_call_id not in self.answered
        ]
        if open_results:
            self.answered.update(m.tool_call_id for m in open_results)
            reply = AIMessage(f"The lookup says: {open_results[-1].text[:60]}")
        else:
            said = [
                m.text
                for m in messages
                if isinstance(m, HumanMessage) and not m.text.startswith("<")
            ]
            if said and "check" in said[-1]:
                call = {
                    "name": "lookup",
                    "args": {"query": said[-1]},
                    "id": f"call-{len(self.received)}",
                }
                reply = AIMessage("", tool_calls=[call])
            else:
                reply = AIMessage("Noted.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"Result for {query!r}: " + "rows of figures, " * 25


def check_received(
    received: Sequence[Sequence[BaseMessage]], counter: TokenCounter, budget: int
) -> int:
    """Assert every input fits ``budget`` by ``counter`` and holds no orphan; the largest count."""
    largest = 0
    for i, msgs in enumerate(received):
        converted = from_langchain_messages(msgs)
        n = count_messages(counter, converted)
        assert n <= budget, f"model call {i} received {n} tokens > {budget}"
        bad = [u.kind for u in group_units(converted) if u.kind not in ("message", "tool_call")]
        assert not bad, f"model call {i} received {bad}"
        largest = max(largest, n)
    return largest
