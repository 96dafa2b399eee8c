"""LlamaIndex integration (extra ``[llamaindex]``): contextwright as an agent's memory.

    from llama_index.core.agent.workflow import FunctionAgent
    from contextwright import Conversations, ContextEngine
    from contextwright.integrations.llamaindex import ContextwrightMemory

    convs = Conversations(ContextEngine(system_prompt="You are helpful.", budget=8000), "chat.db")
    memory = ContextwrightMemory(conversations=convs, session_id="chat-1", user="u1", reserve=1000)
    agent = FunctionAgent(tools=[...], llm=llm)
    await agent.run("What did we decide?", memory=memory)   # the model gets the budgeted build

`ContextwrightMemory` is a ``BaseMemory`` over a stored conversation (`_memory`);
`ContextwrightMemoryBlock` puts contextwright's long-term memory into LlamaIndex's
own ``Memory`` as a block; `from_llamaindex` / `to_llamaindex` convert messages
(`_convert` lists the conventions). Importing this module imports
``llama_index.core``; without it, `MissingDependencyError` names the extra.
"""

from __future__ import annotations

from ..._errors import MissingDependencyError

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingDependencyError(
        "llama-index-core", "llamaindex", "the LlamaIndex integration"
    ) from exc

from ._convert import chat_from_message, from_llamaindex, message_from_chat, to_llamaindex
from ._memory import DEFAULT_BUDGET, ContextwrightMemory, ContextwrightMemoryBlock

__all__ = [
    "DEFAULT_BUDGET",
    "ContextwrightMemory",
    "ContextwrightMemoryBlock",
    "chat_from_message",
    "from_llamaindex",
    "message_from_chat",
    "to_llamaindex",
]
