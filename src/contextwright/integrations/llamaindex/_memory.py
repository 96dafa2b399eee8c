"""`ContextwrightMemory`, a LlamaIndex ``BaseMemory`` over a stored conversation, and
`ContextwrightMemoryBlock`, contextwright's long-term memory as a ``BaseMemoryBlock``.

An agent of ``llama_index.core.agent.workflow`` (``FunctionAgent``, ``ReActAgent``,
``AgentWorkflow``) puts the user's message into its memory, asks it for the model's
input (``aget``), and puts the run's tool calls, results and answer at the end. With
`ContextwrightMemory` that input is contextwright's build for the message under the
budget — summary, the newest whole turns, recalled old turns, memories, the goal
restated — not the whole history (`StoredSession` holds the mechanics).
"""

from __future__ import annotations

import uuid
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.memory import BaseMemory
from llama_index.core.memory.memory import BaseMemoryBlock

from ..._errors import ConfigError
from ...memory import Memory, MemoryStore, Scope
from ...model._blocks import escape_content
from ...pipeline._engine import ContextEngine
from ...pipeline._receipt import ContextReport
from ...service import Conversations, MemoryWriter
from ...sources._templates import templates_for
from .._session import StoredSession
from ._convert import from_llamaindex, message_from_chat, to_llamaindex

__all__ = ["DEFAULT_BUDGET", "ContextwrightMemory", "ContextwrightMemoryBlock"]

DEFAULT_BUDGET = 30_000  # `from_defaults` without an engine: LlamaIndex Memory's own default


class ContextwrightMemory(BaseMemory):
    """A LlamaIndex memory whose ``get`` is contextwright's context, not the whole history.

    ``conversations`` keeps the messages (``session_id`` names the conversation,
    owned by ``user`` of ``tenant``); its engine builds. ``budget`` (default: the
    engine's) bounds what ``get`` returns, less ``reserve``: keep that for what the
    agent adds around the memory — its ``system_prompt`` (better given to the
    engine), and the tool calls and results of the run in progress, which a
    ``FunctionAgent`` keeps outside memory until the run ends.

    ``put`` holds a user message until the next ``get``, which builds for it and
    stores it (`Conversations.build`); other messages are stored at once. ``get``
    with nothing new returns the same context (an agent asks again after its tool
    ran); with the stored conversation ending in tool results, the agent's next
    step. ``get_all`` reads every stored message; ``reset`` (and ``set``) starts a
    new conversation ``"{session_id}#{n}"``, deleting the old one's messages.
    `report` is the receipt of the last build.

    The async methods are what agents call; the sync ones run on the conversations'
    own loop and, like contextwright's sync API, refuse to run inside an event loop.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    conversations: Conversations = Field(exclude=True, description="Where the messages are kept.")
    session_id: str = Field(description="The conversation's id in the store.")
    tenant: str = Field(default="default")
    user: str = Field(default="anonymous", description="The conversation's owner.")
    budget: int | None = Field(default=None, description="Tokens; None: the engine's budget.")
    reserve: int = Field(default=0, description="Tokens left for what the agent adds.")
    _session: StoredSession = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        # Checked here, not by pydantic: bad settings raise contextwright's typed errors.
        session = StoredSession(
            data.get("conversations"),  # type: ignore[arg-type]
            data.get("session_id"),  # type: ignore[arg-type]
            tenant=data.get("tenant", "default"), user=data.get("user", "anonymous"),
            budget=data.get("budget"), reserve=data.get("reserve", 0),
        )  # fmt: skip
        super().__init__(**data)
        self._session = session

    @classmethod
    def class_name(cls) -> str:
        return "ContextwrightMemory"

    @classmethod
    def from_defaults(
        cls,
        conversations: Conversations | None = None,
        session_id: str | None = None,
        chat_history: list[ChatMessage] | None = None,
        *,
        engine: ContextEngine | None = None,
        **kwargs: Any,
    ) -> ContextwrightMemory:
        """A memory over ``conversations`` (default: in-memory SQLite, with ``engine`` or one
        of `DEFAULT_BUDGET` tokens); ``chat_history`` is stored first (``set``)."""
        if conversations is None:
            budget = kwargs.get("budget") or DEFAULT_BUDGET
            conversations = Conversations(engine or ContextEngine(budget=budget))
        elif engine is not None:
            raise ConfigError("pass engine= or conversations=, not both")
        memory = cls(
            conversations=conversations, session_id=session_id or uuid.uuid4().hex, **kwargs
        )
        if chat_history:
            memory.set(chat_history)
        return memory

    @property
    def session(self) -> StoredSession:
        """The stored conversation behind the memory."""
        return self._session

    @property
    def report(self) -> ContextReport | None:
        """The receipt of the last build (None before the first)."""
        return self._session.report

    # -- async (what agents call) --------------------------------------------------------

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The model's input now, within the budget (the class docstring says which)."""
        query = input if isinstance(input, str) else None
        return to_llamaindex(await self._session.context(query=query))

    async def aget_all(self) -> list[ChatMessage]:
        """Every stored message of the conversation, and a held user message last."""
        messages = await self._session.history()
        if self._session.pending is not None:
            messages.append(self._session.pending)
        return to_llamaindex(messages)

    async def aput(self, message: ChatMessage) -> None:
        await self._session.add([message_from_chat(message)])

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Store ``messages`` in one write (a run's tool calls, results and answer)."""
        await self._session.add(from_llamaindex(messages))

    async def aset(self, messages: list[ChatMessage]) -> None:
        """A new conversation holding ``messages`` (the old one's messages are deleted)."""
        converted = from_llamaindex(messages)  # refused before anything changes
        await self._session.reset()
        await self._session.add(converted)

    async def areset(self) -> None:
        await self._session.reset()

    # -- sync ------------------------------------------------------------------------------

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return self.conversations.run_sync(self.aget(input, **kwargs))

    def get_all(self) -> list[ChatMessage]:
        return self.conversations.run_sync(self.aget_all())

    def put(self, message: ChatMessage) -> None:
        self.conversations.run_sync(self.aput(message))

    def put_messages(self, messages: list[ChatMessage]) -> None:
        self.conversations.run_sync(self.aput_messages(messages))

    def set(self, messages: list[ChatMessage]) -> None:
        self.conversations.run_sync(self.aset(messages))

    def reset(self) -> None:
        self.conversations.run_sync(self.areset())


class ContextwrightMemoryBlock(BaseMemoryBlock[str]):
    """contextwright's long-term memory (a `MemoryStore`) as a LlamaIndex memory block.

    For LlamaIndex's own ``Memory(memory_blocks=[...])``: ``aget`` gives the
    ``scope``'s ``top_n`` most important memories and the ``search_n`` most relevant
    to the latest user message, one per line (escaped, so a memory cannot close the
    block's tag); ``aput`` — the messages LlamaIndex flushes out of its short-term
    queue — goes to ``writer`` for extraction when one is given (a `MemoryWriter`
    over the same store), and is dropped otherwise.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="contextwright_memory", description="The block's name.")
    store: MemoryStore = Field(exclude=True, description="Where the memories are.")
    scope: Scope = Field(description="Whose memories.")
    writer: MemoryWriter | None = Field(default=None, exclude=True)
    top_n: int = Field(default=5, ge=0)
    search_n: int = Field(default=5, ge=0)
    locale: str = Field(default="en", description="The template language of each line.")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        query = ""
        for chat in reversed(messages or []):
            if chat.role.value == "user":
                query = "\n".join(b.text for b in chat.blocks if isinstance(b, TextBlock))
                break
        found: list[Memory] = list(await self.store.top(self.scope, self.top_n))
        if query.strip() and self.search_n:
            found += [h.memory for h in await self.store.search(self.scope, query, self.search_n)]
        seen: set[str] = set()
        line = templates_for(self.locale)["memory.item"]
        lines = []
        for m in found:
            key = m.id or m.content
            if key in seen:
                continue
            seen.add(key)
            lines.append(
                line.format(
                    category=m.category.upper(), content=escape_content(m.content),
                    importance=m.importance,
                )
            )  # fmt: skip
        return "\n".join(lines)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if self.writer is not None and messages:
            self.writer.submit(self.scope, from_llamaindex(messages))
