"""A LangChain v1 agent whose model gets contextwright's budgeted context (offline, fake model).

Run: ``python examples/langchain_agent.py`` (needs ``pip install 'contextwright[langchain]'``).

The agent is LangChain's own `create_agent` loop with one tool. Its model is a
fake (`GenericFakeChatModel` taught to call the tool), so the example runs without
a key or a network; swap in any chat model (``init_chat_model("openai:gpt-4.1")``)
and nothing else changes. `ContextwrightMiddleware` stores every message in
SQLite and hands the model, at every call, a context of at most 1,500 tokens:
the recent turns with tool calls whole, a summary of older ones, and old turns
recalled for the current question. The fact told at the first turn comes back
at the last one, 80 turns later, although the window long forgot it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field
from rich.console import Console

from contextwright import ContextEngine, Conversations
from contextwright.integrations.langchain import ContextwrightMiddleware


class FakeModel(GenericFakeChatModel):
    """Calls ``order_status`` when asked to check an order, answers from what it was given."""

    answered: set[str] = Field(default_factory=set)  # tool calls it has answered

    def bind_tools(self, tools: Sequence[Any], **kw: Any) -> FakeModel:
        return self

    def _generate(self, messages: list[BaseMessage], *a: Any, **kw: Any) -> ChatResult:
        results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
        asked = [m.text for m in messages if isinstance(m, HumanMessage) and m.text[:1] != "<"][-1]
        if results and results[-1] not in self.answered:  # the tool answered: report
            self.answered.add(results[-1])
            reply = AIMessage("The order is on its way.")
        elif "check order" in asked:
            call = {"name": "order_status", "args": {"order": asked.split()[-1]}, "id": asked}
            reply = AIMessage("", tool_calls=[call])
        elif "locker" in asked:  # answer from the context it was given
            found = re.search(r"locker code is (\d+)", " ".join(m.text for m in messages))
            reply = AIMessage(f"Your locker code is {found[1] if found else 'not in my context'}.")
        else:
            reply = AIMessage("Noted.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def order_status(order: str) -> str:
    """The shipping status of an order."""
    return f"Order {order}: shipped, in transit, expected in 2 days. " + "Tracking event. " * 30


def main() -> None:
    engine = ContextEngine(system_prompt="You are a helpful shop assistant.", budget=1500)
    with Conversations(engine, ":memory:") as conversations:  # or a file path, or postgresql://…
        middleware = ContextwrightMiddleware(conversations, user="ana")
        agent = create_agent(FakeModel(messages=iter(())), [order_status], middleware=[middleware])
        config = {"configurable": {"thread_id": "ana-support"}}  # the conversation id

        agent.invoke({"messages": [HumanMessage("My locker code is 4817.")]}, config)
        for i in range(1, 80):
            text = (
                f"Please check order A{i:03d}" if i % 3 else f"Thanks for the help with item {i}."
            )
            agent.invoke({"messages": [HumanMessage(text)]}, config)
        result = agent.invoke({"messages": [HumanMessage("What is my locker code?")]}, config)

        print(result["messages"][-1].text)
        receipt = middleware.last_receipt  # also in result["contextwright_receipt"] as a dict
        assert receipt is not None
        Console(width=120).print(receipt.to_table())


if __name__ == "__main__":
    main()
