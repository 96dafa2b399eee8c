"""contextwright for LangChain and LangGraph (extra ``langchain``).

    from contextwright import ContextEngine, Conversations
    from contextwright.integrations.langchain import ContextwrightMiddleware

    convs = Conversations(ContextEngine(system_prompt="You are helpful.", budget=8000), "chat.db")
    agent = create_agent(model, tools, middleware=[ContextwrightMiddleware(convs)])
    agent.invoke({"messages": [("user", "Hi")]}, {"configurable": {"thread_id": "t1"}})

- `ContextwrightMiddleware`: a `create_agent` middleware that hands the model
  contextwright's budgeted build instead of the whole state (the drop-in for
  `trim_messages` and `SummarizationMiddleware`); the receipt is in the state
  (``contextwright_receipt``), in ``last_receipt`` and given to ``on_receipt``.
- `ContextwrightHook`: the same as ``pre_model_hook`` / ``post_model_hook`` of
  LangGraph's `create_react_agent`.
- `ContextwrightChatMessageHistory`: a `BaseChatMessageHistory` over a stored
  conversation.
- `from_langchain_messages` / `to_langchain_messages`: the lossless conversion.

Importing this module without LangChain installed raises `MissingDependencyError`
naming the extra.
"""

from ..._errors import MissingDependencyError

try:
    import langchain.agents  # noqa: F401
    import langchain_core.messages  # noqa: F401
    import langgraph.types  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingDependencyError(
        (exc.name or "langchain").split(".")[0], "langchain", "contextwright.integrations.langchain"
    ) from exc

from ._bridge import Prepared
from ._convert import from_langchain, from_langchain_messages, to_langchain, to_langchain_messages
from ._history import ContextwrightChatMessageHistory
from ._middleware import (
    RECEIPT_KEY,
    ContextwrightHook,
    ContextwrightMiddleware,
    ContextwrightState,
)

__all__ = [
    "RECEIPT_KEY",
    "ContextwrightChatMessageHistory",
    "ContextwrightHook",
    "ContextwrightMiddleware",
    "ContextwrightState",
    "Prepared",
    "from_langchain",
    "from_langchain_messages",
    "to_langchain",
    "to_langchain_messages",
]
