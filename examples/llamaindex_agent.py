"""A LlamaIndex FunctionAgent whose memory is contextwright: offline, with a scripted model.

    pip install 'contextwright[llamaindex]'
    python examples/llamaindex_agent.py

The agent runs 24 turns under a 1,200-token budget. Its model (LlamaIndex's
``MockFunctionCallingLLM`` with a script standing in for a real LLM) calls a tool to
save each note, and at the end is asked for a fact the user gave in the first turn,
long out of the window: contextwright's recall brings that turn back. The last line
is a JSON summary (the test suite runs this file and reads it).
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from rich.console import Console

from contextwright import ContextEngine, Conversations, count_messages
from contextwright.integrations.llamaindex import ContextwrightMemory, from_llamaindex

BUDGET = 1200
sent: list[int] = []  # the tokens of every request the model received


def save_note(text: str) -> str:
    """Save a note for the user."""
    return f"saved ({len(text)} characters)"


def scripted_model(engine: ContextEngine) -> Any:
    """What a function-calling LLM would do here; it also measures what it was sent."""

    def respond(messages: Sequence[ChatMessage], **kw: Any) -> ChatMessage:
        sent.append(count_messages(engine.counter, from_llamaindex(messages), engine.overhead))
        spoken = [m for m in messages if m.role != MessageRole.SYSTEM]
        if spoken[-1].role == MessageRole.TOOL:
            return ChatMessage(role="assistant", content="Saved.")
        asked = next(
            m.content or ""
            for m in reversed(messages)
            if m.role == MessageRole.USER and not (m.content or "").startswith("<context>")
        )
        if asked.startswith("Note"):
            call = ToolCallBlock(
                tool_call_id=f"call-{len(sent)}", tool_name="save_note", tool_kwargs={"text": asked}
            )
            return ChatMessage(role="assistant", blocks=[call])
        found = re.findall(r"locker code is (\d+)", " ".join(m.content or "" for m in messages))
        return ChatMessage(
            role="assistant",
            content=f"Your locker code is {found[0]}." if found else "I don't know.",
        )

    return respond


async def main(folder: Path) -> None:
    engine = ContextEngine(system_prompt="You keep the user's notes.", budget=BUDGET)
    llm = MockFunctionCallingLLM(response_generator=scripted_model(engine))
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(save_note)], llm=llm)
    with Conversations(engine, folder / "chat.db") as convs:
        # reserve: room for the tool call and result of the run in progress, which the
        # agent adds to what the memory returns
        memory = ContextwrightMemory(
            conversations=convs, session_id="notes", user="ana", reserve=200
        )
        await agent.run("My locker code is 4417.", memory=memory)
        for i in range(22):
            await agent.run(
                f"Note {i}: call the caterer about the cake and the chairs.", memory=memory
            )
        answer = await agent.run("What is my locker code?", memory=memory)
        print(answer)
        assert memory.report is not None
        Console().print(memory.report.to_table())  # the receipt of the last build
        stored = [m async for m in convs.messages("notes", user="ana")]
    print(json.dumps({
        "answer": str(answer), "budget": BUDGET, "max_tokens_sent": max(sent),
        "model_calls": len(sent), "messages_stored": len(stored),
    }))  # fmt: skip


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
