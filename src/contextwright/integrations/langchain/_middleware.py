"""The agent middleware for LangChain v1 (`create_agent`) and the LangGraph hooks (`create_react_agent`).

`ContextwrightMiddleware` wraps every model call of the agent
(``wrap_model_call`` / ``awrap_model_call``): it stores the messages the
conversation does not hold yet, builds the model's input with contextwright under
the budget and hands the model that instead of the whole state, then stores the
model's answer. It replaces `trim_messages` and `SummarizationMiddleware`: the
state keeps every message, the store keeps them too, and the model sees the
budgeted context (recent turns with tool calls whole, the summary, old turns
recalled for the current message). The receipt of each call is in the run's
state under ``contextwright_receipt`` (`ContextReport.to_dict`), in
``last_receipt``, and passed to ``on_receipt``.

`ContextwrightHook` is the same for LangGraph's prebuilt agent:
``create_react_agent(model, tools, pre_model_hook=hook.pre_model_hook,
post_model_hook=hook.post_model_hook)``; the pre hook returns
``llm_input_messages``, so the state is left as it is. The post hook stores the
model's answer at once (without it, an answer is stored with the next model call
of the thread, and the final one never without a checkpointer).

The conversation is ``conversation_id`` (a string, or a function of the run's
config), by default the run's ``thread_id``.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    OmitFromInput,
)
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.types import Command
from typing_extensions import NotRequired

from ...budget._budget import Budget
from ...pipeline._receipt import ContextReport
from ...service._conversations import Conversations
from ._bridge import Bridge, LateSystem, Prepared, conversation_of

__all__ = [
    "RECEIPT_KEY",
    "ContextwrightHook",
    "ContextwrightMiddleware",
    "ContextwrightState",
    "receipt_dict",
]

RECEIPT_KEY = "contextwright_receipt"
ConversationId = str | Callable[[dict[str, Any]], str] | None


class ContextwrightState(AgentState[Any]):
    """The agent state with the receipt of the latest model call."""

    contextwright_receipt: NotRequired[Annotated[dict[str, Any], OmitFromInput]]


def receipt_dict(report: ContextReport) -> dict[str, Any]:
    """`ContextReport.to_dict`, made without `dataclasses.asdict`'s deep copies.

    The state gets one every model call, and ``asdict`` copied the receipt value by
    value (most of the middleware's own cost per call). The values are plain
    numbers and strings; the lists and dicts are new, as ``to_dict``'s are.
    """
    d = dict(report.__dict__)
    blocks = []
    for b in report.blocks:
        bd = dict(b.__dict__)
        if bd["fetch_ms"] is not None:
            bd["fetch_ms"] = round(bd["fetch_ms"], 3)
        blocks.append(bd)
    d["blocks"] = blocks
    d["sections"] = {k: dict(v.__dict__) for k, v in report.sections.items()}
    d["timings_ms"] = {k: round(v, 3) for k, v in report.timings_ms.items()}
    d["warnings"] = list(report.warnings)
    if report.compaction is not None:
        d["compaction"] = copy.deepcopy(report.compaction)
    if report.prefix is not None:
        d["prefix"] = dict(report.prefix.__dict__)
    d["utilisation"] = round(report.utilisation, 4)
    return d


def _run_config(request: ModelRequest[Any]) -> dict[str, Any]:
    """The run's config (its ``thread_id`` from the runtime when the config is out of reach)."""
    try:
        from langgraph.config import get_config

        return dict(get_config())
    except RuntimeError:
        info = getattr(request.runtime, "execution_info", None)
        thread = getattr(info, "thread_id", None)
        return {"configurable": {"thread_id": thread}} if thread is not None else {}


class ContextwrightMiddleware(AgentMiddleware[ContextwrightState, Any, Any]):
    """Give a `create_agent` agent's model contextwright's build instead of the whole state.

    ``conversations`` stores the messages and builds (its engine's system prompt,
    sources and counter apply; for questions about a long past, one over
    `memory_qa_engine`); ``budget`` overrides the engine's (an int keeps its
    shares); ``tenant`` and ``user`` own the conversation. See the module docstring
    and `Bridge` for what the model receives; ``receipt_in_state=False`` keeps the
    receipt out of the state.
    """

    state_schema = ContextwrightState

    def __init__(
        self,
        conversations: Conversations,
        conversation_id: ConversationId = None,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
        late_system: LateSystem = "user",
        count_tools: bool = True,
        receipt_in_state: bool = True,
        on_receipt: Callable[[ContextReport], object] | None = None,
    ) -> None:
        super().__init__()
        self.bridge = Bridge(
            conversations, tenant=tenant, user=user, budget=budget, late_system=late_system,
            count_tools=count_tools, on_receipt=on_receipt,
        )  # fmt: skip
        self.conversation_id = conversation_id
        self.receipt_in_state = receipt_in_state
        self.tools = []

    @property
    def last_receipt(self) -> ContextReport | None:
        """The receipt of the latest model call this middleware built for (any thread)."""
        return self.bridge.last_receipt

    def _request(self, request: ModelRequest[Any], prepared: Prepared) -> ModelRequest[Any]:
        messages = cast("list[AnyMessage]", list(prepared.messages))
        return request.override(messages=messages, system_message=prepared.system)

    def _result(
        self, response: ModelResponse[Any], prepared: Prepared
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        if not self.receipt_in_state:
            return response
        update = {RECEIPT_KEY: receipt_dict(prepared.report)}
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        conv = conversation_of(self.conversation_id, _run_config(request))
        run = self.bridge.conversations.run_sync
        prepared = run(self.bridge.prepare(
            conv, request.messages, system=request.system_message, tools=request.tools
        ))  # fmt: skip
        response = handler(self._request(request, prepared))
        run(self.bridge.record(conv, response.result))
        return self._result(response, prepared)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        conv = conversation_of(self.conversation_id, _run_config(request))
        prepared = await self.bridge.prepare(
            conv, request.messages, system=request.system_message, tools=request.tools
        )
        response = await handler(self._request(request, prepared))
        await self.bridge.record(conv, response.result)
        return self._result(response, prepared)


class ContextwrightHook:
    """``pre_model_hook`` and ``post_model_hook`` for LangGraph's `create_react_agent`.

    Arguments as for `ContextwrightMiddleware`; ``tools`` (the agent's tools) are
    counted against the budget when given, as the hook does not see them. Give the
    system prompt to the engine, not as ``prompt=``: the prompt is added after the
    hook and would not be counted.
    """

    def __init__(
        self,
        conversations: Conversations,
        conversation_id: ConversationId = None,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
        late_system: LateSystem = "user",
        tools: Sequence[Any] = (),
        on_receipt: Callable[[ContextReport], object] | None = None,
    ) -> None:
        self.bridge = Bridge(
            conversations, tenant=tenant, user=user, budget=budget, late_system=late_system,
            on_receipt=on_receipt,
        )  # fmt: skip
        self.conversation_id = conversation_id
        self.tools = list(tools)
        self.pre_model_hook: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._pre, afunc=self._apre, name="contextwright_pre_model_hook"
        )
        self.post_model_hook: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            self._post, afunc=self._apost, name="contextwright_post_model_hook"
        )

    @property
    def last_receipt(self) -> ContextReport | None:
        """The receipt of the latest model call this hook built for (any thread)."""
        return self.bridge.last_receipt

    @staticmethod
    def _messages(state: Any) -> list[BaseMessage]:
        messages = (
            state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
        )
        return list(messages or [])

    def _input(self, prepared: Prepared) -> dict[str, Any]:
        lead = [prepared.system] if prepared.system is not None else []
        return {"llm_input_messages": [*lead, *prepared.messages]}

    def _pre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        conv = conversation_of(self.conversation_id, dict(config))
        coro = self.bridge.prepare(conv, self._messages(state), tools=self.tools)
        return self._input(self.bridge.conversations.run_sync(coro))

    async def _apre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        conv = conversation_of(self.conversation_id, dict(config))
        return self._input(await self.bridge.prepare(conv, self._messages(state), tools=self.tools))

    def _post(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        conv = conversation_of(self.conversation_id, dict(config))
        self.bridge.conversations.run_sync(self.bridge.record(conv, self._messages(state)[-1:]))
        return {}

    async def _apost(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        conv = conversation_of(self.conversation_id, dict(config))
        await self.bridge.record(conv, self._messages(state)[-1:])
        return {}
