"""What the agent middleware and the LangGraph hooks share: one model call's input, built.

`Bridge.prepare` takes the messages a LangChain agent would send the model (its
state), stores the ones the conversation does not hold yet, builds with
`Conversations.build` under the budget, and returns the built context as
LangChain messages; `Bridge.record` stores what the model answered. A new user
message is stored with that answer, in one transaction (one write per turn, not
two): a model call that fails stores neither. Should no answer be recorded (the
call failed, or a LangGraph agent runs without the post hook), the question is
stored with the next call of the thread whose input holds it.

New messages are found by id: the bridge remembers, per conversation, the ids it
stored (a bounded set), and the messages after the newest one it knows are new.
A process that knows none of them (a restart over a checkpointed thread) appends
them all: the store returns a message already stored under its id as it is, so
nothing is stored twice. A model call with nothing new (a retry of the same
request) gets the context built for it before.

The model sees, in this order: one system message (the agent's own system
prompt, if any, then the engine's system prompt and summary), then the built
history, per-turn context and current message. The engine's later system
messages (the goal restatement, and retrieved blocks with
``retrieved_placement="system"``) go as user messages with ``late_system="user"``
(the default: LangChain's Anthropic and Google models refuse system messages after
the first one) or stay system messages with ``late_system="system"``. The agent's
system prompt and, with ``count_tools``, the tools' JSON schemas are counted first
and the build gets what they leave of the budget, so what the model receives stays
within it.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from threading import Lock
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from ..._errors import BudgetError, ConfigError, InvalidMessageError
from ...budget._budget import Budget
from ...model._messages import Message
from ...pipeline._receipt import BuiltContext, ContextReport
from ...service._conversations import Conversations
from ...tokens._frame import count_message
from ._convert import CW, from_langchain, to_langchain

__all__ = ["Bridge", "Prepared", "conversation_of"]

LateSystem = Literal["user", "system"]
_KNOWN_IDS = 512  # ids remembered per conversation (only the newest matter)
_CONVERTED = 8192  # messages kept converted for the model (`Bridge._for_model`)


@dataclass(frozen=True)
class Prepared:
    """The model's input: its system message, its other messages, and the receipt."""

    system: SystemMessage | None
    messages: list[BaseMessage]
    built: BuiltContext

    @property
    def report(self) -> ContextReport:
        return self.built.report


class _Record:
    """What the bridge remembers of one conversation."""

    __slots__ = ("known", "last", "pending")

    def __init__(self) -> None:
        self.known: OrderedDict[str, None] = OrderedDict()
        self.last: tuple[str, Prepared] | None = None  # (id of the newest input, its context)
        self.pending: Message | None = None  # the user message built for, stored with the answer

    def remember(self, ids: Sequence[str]) -> None:
        for i in ids:
            self.known[i] = None
            self.known.move_to_end(i)
        while len(self.known) > _KNOWN_IDS:
            self.known.popitem(last=False)


def conversation_of(
    fixed: str | Callable[[dict[str, Any]], str] | None, config: dict[str, Any] | None
) -> str:
    """The conversation id: ``fixed``, or ``fixed(config)``, or the run's ``thread_id``."""
    if isinstance(fixed, str):
        return fixed
    if fixed is not None:
        value = fixed(config or {})
        if not isinstance(value, str) or not value:
            raise ConfigError(
                f"conversation_id(config) must return a non-empty string, got {value!r}"
            )
        return value
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None:
        raise ConfigError(
            "no conversation: pass conversation_id= or run the agent with "
            "config={'configurable': {'thread_id': ...}}"
        )
    return str(thread)


class Bridge:
    """Stores an agent's messages in ``conversations`` and builds each model call's input."""

    def __init__(
        self,
        conversations: Conversations,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: Budget | int | None = None,
        late_system: LateSystem = "user",
        count_tools: bool = True,
        on_receipt: Callable[[ContextReport], object] | None = None,
        max_conversations: int = 1024,
    ) -> None:
        if not isinstance(conversations, Conversations):
            raise ConfigError(
                f"conversations must be a contextwright Conversations, got {type(conversations).__name__}"
            )
        if late_system not in ("user", "system"):
            raise ConfigError(f"late_system must be 'user' or 'system', got {late_system!r}")
        own = conversations.engine.budget
        if isinstance(budget, int) and not isinstance(budget, bool):
            budget = Budget(budget, shares=own.shares) if own is not None else Budget(budget)
        if budget is not None and not isinstance(budget, Budget):
            raise ConfigError(f"budget must be a Budget or an int, got {type(budget).__name__}")
        if budget is None and own is None:
            raise ConfigError("no budget: pass budget= here or to the ContextEngine")
        self.conversations = conversations
        self.tenant, self.user = tenant, user
        self.budget = budget
        self.late_system = late_system
        self.count_tools = count_tools
        self.on_receipt = on_receipt
        self.last_receipt: ContextReport | None = None
        self._records: OrderedDict[tuple[str, str], _Record] = OrderedDict()
        self._max = max_conversations
        self._lock = Lock()
        self._tool_costs: dict[tuple[str, ...], int] = {}
        self._converted: dict[int, tuple[Message, list[BaseMessage]]] = {}

    def _record(self, conversation: str) -> _Record:
        key = (self.tenant, conversation)
        with self._lock:
            rec = self._records.get(key)
            if rec is None:
                rec = self._records[key] = _Record()
                self._evict()
            self._records.move_to_end(key)
            return rec

    def _evict(self) -> None:
        """Forget the least recently used conversations over the bound, but one awaiting
        its answer (its question is stored with it) unless twice the bound are held."""
        records = self._records
        while len(records) > self._max:
            crowded = len(records) > 2 * self._max
            gone = next((k for k, r in records.items() if crowded or r.pending is None), None)
            if gone is None:
                return
            del records[gone]

    # -- budget -------------------------------------------------------------------------

    def _tools_cost(self, tools: Sequence[Any]) -> int:
        if not self.count_tools or not tools:
            return 0
        key = tuple(
            str(getattr(t, "name", None) or json.dumps(t, sort_keys=True, default=str))
            for t in tools
        )
        cost = self._tool_costs.get(key)
        if cost is None:
            counter = self.conversations.engine.counter
            schemas = [t if isinstance(t, dict) else convert_to_openai_tool(t) for t in tools]
            cost = sum(counter.count(json.dumps(s, ensure_ascii=False)) for s in schemas)
            if len(self._tool_costs) > 64:
                self._tool_costs.clear()
            self._tool_costs[key] = cost
        return cost

    def _budget(self, system: Message | None, tools: Sequence[Any]) -> Budget:
        engine = self.conversations.engine
        base = self.budget if self.budget is not None else engine.budget
        assert base is not None  # checked in __init__
        items: list[tuple[str, int]] = []
        if system is not None:
            items.append(
                ("agent_system_prompt", count_message(engine.counter, system, engine.overhead))
            )
        tools_cost = self._tools_cost(tools)
        if tools_cost:
            items.append(("tool_schemas", tools_cost))
        if not items:
            return base
        spent = sum(n for _, n in items)
        left = base.input_tokens - spent
        if left <= 0:
            raise BudgetError(spent, base.input_tokens, items)
        return Budget(left, shares=base.shares)

    # -- building -------------------------------------------------------------------------

    def _new(self, messages: Sequence[BaseMessage], rec: _Record) -> list[BaseMessage]:
        """The messages after the newest one the conversation is known to hold."""
        i = len(messages)
        while i > 0:
            mid = messages[i - 1].id
            if mid is not None and mid in rec.known:
                break
            i -= 1
        return list(messages[i:])

    async def prepare(
        self,
        conversation: str,
        messages: Sequence[BaseMessage],
        *,
        system: SystemMessage | None = None,
        tools: Sequence[Any] = (),
    ) -> Prepared:
        """Store what is new in ``messages`` and build the model's input from the conversation."""
        if not messages:
            raise InvalidMessageError("messages", "the model's input holds no message")
        rec = self._record(conversation)
        new = self._new(messages, rec)  # a message without an id is new: it gets one
        for m in new:
            if not m.id:
                m.id = f"lc-{uuid.uuid4().hex}"
        last = messages[-1].id
        assert last is not None
        if not new and rec.last is not None and rec.last[0] == last:
            return rec.last[1]  # the same request again (a retry): the same context
        cw = [
            from_langchain(m, where=f"messages[{len(messages) - len(new) + k}]")
            for k, m in enumerate(new)
        ]
        sys_cw = from_langchain(system, where="system_message") if system is not None else None
        budget = self._budget(sys_cw, tools)
        pending, rec.pending = rec.pending, None
        before = len(messages) - len(new) - 1
        if pending is not None and before >= 0 and messages[before].id == pending.id:
            cw.insert(0, pending)  # built for before, no answer recorded: history now
        convs, tenant, user = self.conversations, self.tenant, self.user
        if cw and cw[-1].role == "user":
            if len(cw) > 1:
                await convs.append(conversation, cw[:-1], tenant=tenant, user=user)
            built = await convs.build(
                conversation, cw[-1], budget=budget, store_message=False, tenant=tenant, user=user
            )
            rec.pending = cw[-1]  # stored with the answer (`record`)
        elif not cw and messages[-1].type == "human":  # stored, not known here: build for it again
            current = from_langchain(messages[-1], where=f"messages[{len(messages) - 1}]")
            built = await convs.build(
                conversation, current, budget=budget, store_message=False, tenant=tenant, user=user
            )
        else:
            if messages[-1].type != "tool":  # refused before anything is stored
                raise InvalidMessageError(
                    f"messages[{len(messages) - 1}]",
                    "the model's input must end with a user message or tool results, "
                    f"not a {messages[-1].type!r} message",
                )
            if cw:
                await convs.append(conversation, cw, tenant=tenant, user=user)
            built = await convs.build(conversation, None, budget=budget, tenant=tenant, user=user)
        rec.remember([m.id for m in new if m.id is not None])
        prepared = self._shape(built, system)
        rec.last = (last, prepared)
        self.last_receipt = built.report
        if self.on_receipt is not None:
            self.on_receipt(built.report)
        return prepared

    def _shape(self, built: BuiltContext, system: SystemMessage | None) -> Prepared:
        """The built messages as the model's input: one system message, then the rest."""
        msgs = built.messages
        lead = 0
        while lead < len(msgs) and msgs[lead].role in ("system", "developer"):
            lead += 1
        texts = [m.text for m in msgs[:lead] if m.text]
        merged: SystemMessage | None = system
        if texts:
            joined = "\n\n".join(texts)
            if system is None:
                merged = SystemMessage(joined, id=msgs[0].id)
            elif isinstance(system.content, str):
                merged = system.model_copy(update={"content": f"{system.content}\n\n{joined}"})
            else:
                blocks = [*system.content, {"type": "text", "text": joined}]
                merged = system.model_copy(update={"content": blocks})
        rest = [lm for m in msgs[lead:] for lm in self._for_model(m)]
        if self.late_system == "user":
            rest = [
                HumanMessage(m.content, id=m.id, response_metadata={CW: {"late_system": True}})
                if isinstance(m, SystemMessage)
                else m
                for m in rest
            ]
        return Prepared(merged, rest, built)

    def _for_model(self, message: Message) -> list[BaseMessage]:
        """``message`` as the model gets it, converted once per message object.

        The history a build returns holds the same `Message` objects turn after
        turn (the conversation's tail), and building a LangChain message is most of
        the cost of handing them over; the converted ones are kept with the object
        they came from (so an id is never reused for another), bounded in number.
        Nothing downstream of a chat model call changes its input messages.
        """
        hit = self._converted.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        out = to_langchain(message, for_model=True)
        if len(self._converted) >= _CONVERTED:
            self._converted.clear()
        self._converted[id(message)] = (message, out)
        return out

    async def record(self, conversation: str, produced: Sequence[BaseMessage]) -> None:
        """Store what the model produced, after the user message it answers if that is
        not stored yet, in one append (an id is given to a message without one)."""
        rec = self._record(conversation)
        for m in produced:
            if not m.id:
                m.id = f"lc-{uuid.uuid4().hex}"
        cw = [from_langchain(m, where=f"response[{k}]") for k, m in enumerate(produced)]
        pending, rec.pending = rec.pending, None
        if pending is not None:
            cw.insert(0, pending)
        if not cw:
            return
        await self.conversations.append(conversation, cw, tenant=self.tenant, user=self.user)
        rec.remember([m.id for m in cw if m.id is not None])
