"""One stored conversation seen as a framework's chat memory: the core of the LlamaIndex
memory and the OpenAI Agents SDK session.

Frameworks hand their memory the user's new message first and ask for the model's
input afterwards (LlamaIndex: ``put`` then ``get``; the Agents SDK: ``add_items`` then
the model call), while `Conversations.build` takes the new message and stores it
only once its context is built. `StoredSession` bridges the two:

* ``add`` stores what it is given, except a trailing user message: that one is held
  as the *pending* turn (in this process) until the next ``context``, which builds
  for it (`Conversations.build`, storing it) — or until more messages come, which
  store it first, in order;
* ``context`` is what the model should get now, under the budget: the build for the
  pending turn; else, with the stored conversation ending in a tool call's results,
  the agent's next step (``build(None)``); else the last build again if nothing was
  appended since (an agent asks again after its tool ran); else a view of the
  conversation as it stands (`_view`: system prompt, summary, the newest whole turns);
* ``reset`` starts a new *generation*: the session moves to the conversation
  ``"{session_id}#{n}"``, and the old one's messages are deleted (`Conversations.delete`:
  a cleared session is forgotten, not hidden), leaving its empty row behind so the
  chain of generations stays walkable; every call looks for a newer generation first
  (one primary-key read), so a reset in another process is seen. ``replace_last``
  (the Agents SDK's ``pop_item``) copies all but the newest message into a new
  generation and deletes the old one's the same way.

Generation 0 is the conversation named ``session_id`` itself. Reads through the store
check the owner as `Conversations` does (`not_owner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import ConfigError, InvalidMessageError
from ..history._window import select_window
from ..model._messages import Message
from ..model._units import group_units
from ..pipeline._receipt import BuiltContext, ContextReport
from ..pipeline._settings import check_text
from ..service import Conversations
from ..sources._templates import templates_for
from ..stores import ConversationInfo
from ..stores._records import not_owner
from ..tokens._frame import count_messages

__all__ = ["StoredSession"]

SEP = "#"  # between a session id and its generation number
_NEWEST = 64  # messages read to tell whether the conversation ends with a tool call's results


@dataclass
class _Built:
    """The last context built, and for what: valid while nothing is appended."""

    conversation: str
    last_seq: int
    budget: int
    messages: list[Message]


def ends_with_results(messages: Sequence[Message]) -> bool:
    """Whether ``messages`` end with an assistant's tool calls and all their results."""
    if not messages or messages[-1].role != "tool":
        return False
    return group_units(messages)[-1].kind == "tool_call"


class StoredSession:
    """``session_id``'s conversation in ``conversations``, for ``user`` of ``tenant``.

    ``budget`` (default: the engine's) is what the model may get; ``reserve`` of it is
    left for what the framework adds around the memory's messages (its own system
    prompt, the tool calls and results of a run in progress).
    """

    def __init__(
        self,
        conversations: Conversations,
        session_id: str,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: int | None = None,
        reserve: int = 0,
    ) -> None:
        if not isinstance(conversations, Conversations):
            raise ConfigError(
                f"conversations must be a Conversations, got {type(conversations).__name__}"
            )
        for label, value in (("session_id", session_id), ("tenant", tenant), ("user", user)):
            check_text(value, label, empty_ok=False)
        for label, number in (("budget", budget), ("reserve", reserve)):
            if number is not None and (
                isinstance(number, bool) or not isinstance(number, int) or number < 0
            ):
                raise ConfigError(f"{label} must be a non-negative integer, got {number!r}")
        if budget is None and conversations.engine.budget is None:
            raise ConfigError("no budget: pass budget= or give the engine one")
        self.conversations = conversations
        self.session_id = session_id
        self.tenant = tenant
        self.user = user
        self.budget = budget
        self.reserve = reserve
        self.generation = 0
        self.pending: Message | None = None
        self.built: BuiltContext | None = None  # the last build (its report is the receipt)
        self._last: _Built | None = None

    @property
    def report(self) -> ContextReport | None:
        """The receipt of the last build (None before the first)."""
        return self.built.report if self.built is not None else None

    def conversation_id(self, generation: int | None = None) -> str:
        n = self.generation if generation is None else generation
        return self.session_id if n == 0 else f"{self.session_id}{SEP}{n}"

    def allowance(self, extra: int = 0, *, reserve: bool = True) -> int:
        """The tokens the memory's messages may take: the budget less ``extra`` and
        (``reserve``) the reserve."""
        engine_budget = self.conversations.engine.budget
        total = self.budget
        if total is None:
            assert engine_budget is not None  # checked in __init__
            total = engine_budget.input_tokens
        kept = self.reserve if reserve else 0
        left = total - kept - extra
        if left < 1:
            raise ConfigError(
                f"the budget ({total}) leaves nothing for the conversation after the reserve "
                f"({kept}) and what the framework adds ({extra})"
            )
        return left

    async def current(self) -> tuple[str, ConversationInfo | None]:
        """The current generation's conversation id and its row (None: nothing stored yet)."""
        log = self.conversations.backend.conversations
        n = self.generation
        info = await log.get_conversation(self.conversation_id(n), tenant=self.tenant)
        while True:
            nxt = await log.get_conversation(self.conversation_id(n + 1), tenant=self.tenant)
            if nxt is None or nxt.user != self.user:  # another's: not a generation of ours
                break
            n, info = n + 1, nxt
        if n != self.generation:  # reset elsewhere: what this process remembers is stale
            self.generation, self._last = n, None
        conversation = self.conversation_id(n)
        if info is not None and info.user != self.user:
            raise not_owner(conversation, self.tenant, self.user)
        return conversation, info

    # -- writing ----------------------------------------------------------------------

    async def add(self, messages: Sequence[Message]) -> None:
        """Store ``messages`` (oldest first), holding back a trailing user message."""
        batch = list(messages)
        for i, m in enumerate(batch):
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"messages[{i}]", f"must be a Message, got {type(m).__name__}"
                )
        conversation, _ = await self.current()
        if self.pending is not None:
            batch.insert(0, self.pending)
        pending = batch.pop() if batch and batch[-1].role == "user" else None
        if batch:
            await self.conversations.append(conversation, batch, tenant=self.tenant, user=self.user)
        self.pending = pending

    async def _retire(self, n: int) -> None:
        """Delete generation ``n``'s messages, keeping its empty row (the chain's link)."""
        old = self.conversation_id(n)
        await self.conversations.delete(old, tenant=self.tenant, user=self.user)
        await self.conversations.backend.conversations.ensure_conversation(
            old, tenant=self.tenant, user=self.user
        )

    async def reset(self) -> None:
        """Start an empty generation; the old one's messages are deleted."""
        _, info = await self.current()
        self.pending, self._last = None, None
        if info is None or info.last_seq == 0:
            return  # nothing stored: already empty
        n = self.generation + 1
        await self.conversations.backend.conversations.ensure_conversation(
            self.conversation_id(n), tenant=self.tenant, user=self.user
        )
        self.generation = n
        await self._retire(n - 1)

    async def replace_last(self, replacement: Message | None) -> Message | None:
        """Take the newest message away (putting ``replacement`` in its place); return it.

        The pending message goes at once; a stored one by copying the rest of the
        conversation into a new generation (the old one's messages are then deleted),
        so this costs what the conversation's length costs.
        """
        conversation, info = await self.current()
        if self.pending is not None:
            taken, self.pending = self.pending, None
            if replacement is not None:
                await self.add([replacement])
            return taken
        if info is None or info.last_seq == 0:
            return None
        stored = await self.history(conversation)
        keep = [
            Message(m.role, m.parts, created_at=m.created_at, name=m.name, metadata=m.metadata)
            for m in stored[:-1]
        ]
        if replacement is not None:
            keep.append(replacement)
        n = self.generation + 1
        if keep:
            await self.conversations.import_messages(
                self.conversation_id(n), keep, tenant=self.tenant, user=self.user
            )
        else:
            await self.conversations.backend.conversations.ensure_conversation(
                self.conversation_id(n), tenant=self.tenant, user=self.user
            )
        self.generation, self._last = n, None
        await self._retire(n - 1)
        return stored[-1]

    # -- reading ----------------------------------------------------------------------

    async def history(self, conversation: str | None = None) -> list[Message]:
        """Every stored message of the current generation, oldest first (pending not included)."""
        if conversation is None:
            conversation, _ = await self.current()
        return [
            m
            async for m in self.conversations.messages(
                conversation, tenant=self.tenant, user=self.user
            )
        ]

    async def context(
        self, extra: int = 0, *, query: str | None = None, reserve: bool = True
    ) -> list[Message]:
        """What the model should get now, within `allowance` (see the module docstring).

        ``query``: with no pending turn, no tool results to answer and no build
        still current, build for this user message without storing it (a framework
        that asks before it puts the message); else it is not needed and ignored.
        """
        conversation, info = await self.current()
        budget = self.allowance(extra, reserve=reserve)
        convs = self.conversations
        if self.pending is not None:
            message = self.pending
            built = await convs.build(
                conversation, message, tenant=self.tenant, user=self.user, budget=budget
            )
            self.pending = None  # stored by the build
            info = await convs.backend.conversations.get_conversation(
                conversation, tenant=self.tenant
            )
            return self._remember(conversation, info, budget, built)
        last_seq = info.last_seq if info is not None else 0
        last = self._last
        if last is not None and (last.conversation, last.last_seq, last.budget) == (
            conversation,
            last_seq,
            budget,
        ):
            return list(last.messages)
        if last_seq:
            newest = await convs.backend.conversations.read(
                conversation, tenant=self.tenant, newest_first=True, limit=_NEWEST
            )
            newest.reverse()
            if ends_with_results(newest):
                built = await convs.build(
                    conversation, None, tenant=self.tenant, user=self.user, budget=budget
                )
                return self._remember(conversation, info, budget, built)
        if query is not None and query.strip():
            built = await convs.build(
                conversation, query, tenant=self.tenant, user=self.user, budget=budget,
                store_message=False,
            )  # fmt: skip
            self.built = built
            return list(built.messages)
        return await self._view(conversation, last_seq, budget)

    def _remember(
        self, conversation: str, info: ConversationInfo | None, budget: int, built: BuiltContext
    ) -> list[Message]:
        self.built = built
        last_seq = info.last_seq if info is not None else 0
        self._last = _Built(conversation, last_seq, budget, list(built.messages))
        return list(built.messages)

    async def _view(self, conversation: str, last_seq: int, budget: int) -> list[Message]:
        """The conversation as it stands, with no new turn to build for.

        The system prompt, the latest summary and the newest whole units after it
        that fit (`select_window`, long messages shortened as in a build); within
        ``budget`` by the engine's count.
        """
        engine = self.conversations.engine
        counter, overhead = engine.counter, engine.overhead
        prefix = [Message.system(engine.system_prompt)] if engine.system_prompt else []
        if not last_seq:
            return prefix if count_messages(counter, prefix, overhead) <= budget else []
        backend = self.conversations.backend
        summary = await backend.summaries.latest_summary(conversation, tenant=self.tenant)
        after = 0
        if summary is not None:
            header = templates_for(engine.locale, engine.templates)["summary.header"]
            with_summary = [*prefix, Message.system(f"{header}\n{summary.content}")]
            if count_messages(counter, with_summary, overhead) <= budget:
                prefix, after = with_summary, summary.upto_seq
        allowance = budget - count_messages(counter, prefix, overhead)
        if allowance < 0:
            return []
        tail = await backend.conversations.read_tail(
            conversation,
            tenant=self.tenant,
            max_tokens=allowance,
            after_seq=after,
            counter=engine.count_key,
        )
        window = select_window(
            tail,
            allowance,
            counter,
            overhead=overhead,
            max_message_tokens=engine.max_message_tokens,
        )
        return [*prefix, *window.messages]
