"""OpenAI Agents SDK integration (extra ``[agents]``): a session whose items are
contextwright's budgeted context, not the whole history.

    from agents import Agent, Runner
    from contextwright import Conversations, ContextEngine
    from contextwright.integrations.openai_agents import ContextwrightSession

    convs = Conversations(ContextEngine(budget=8000), "chat.db")
    session = ContextwrightSession("chat-1", convs, user="u1")
    result = await Runner.run(agent, "What did we decide?", session=session,
                              run_config=session.run_config())

`ContextwrightSession` implements the SDK's ``Session`` protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``) over a stored conversation
(`StoredSession` holds the mechanics). The SDK reads a session before it stores the
new input, so ``get_items`` alone can only give the conversation as it stands
(system prompt, summary, the newest whole turns, within the budget less
``reserve``: leave room there for the new message and the run's tool calls). Its
`model_input_filter` — set by `run_config` as the run's ``call_model_input_filter``
— replaces what each model call of the run gets with contextwright's build for the
turn: recalled turns, memories and the goal restated too, the tool calls and
results of the run kept whole, and the agent's ``instructions`` counted in the
budget (its tool schemas are not). `report` is the receipt of the last build.

Items are Responses API input items, read and written with contextwright's
Responses adapter (`from_responses` / `render_responses`): `from_agents` and
`to_agents`. Every item type the API takes is kept as it came — ``reasoning`` with
its encrypted content, hosted tool calls, item references, ids (docs/providers.md);
an item of a type the adapter does not know is left out of the session with a
logged warning. ``is_error`` is not kept. Importing this module imports the SDK;
without it, `MissingDependencyError` names the extra.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from .._errors import MissingDependencyError, UserError

try:
    from agents.memory import SessionSettings
    from agents.run_config import CallModelData, ModelInputData, RunConfig
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingDependencyError(
        "openai-agents", "agents", "the OpenAI Agents SDK integration"
    ) from exc

from ..adapters import from_responses, render_responses, validate_responses
from ..adapters._responses_items import CALL_KINDS, MODEL_KINDS, OUTPUT_KINDS, USER_KINDS
from ..model._messages import Message
from ..model._units import group_units
from ..pipeline._receipt import ContextReport
from ..service import Conversations
from ..tokens._frame import count_message
from ._session import StoredSession

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["SUPPORTED_ITEMS", "ContextwrightSession", "from_agents", "to_agents"]

log = logging.getLogger(__name__)

# Every item type the Responses adapter reads (docs/providers.md).
SUPPORTED_ITEMS = (
    "message",
    *CALL_KINDS,
    *sorted(OUTPUT_KINDS),
    *sorted(MODEL_KINDS),
    *sorted(USER_KINDS),
)


def _plain(item: object) -> Mapping[str, Any]:
    if hasattr(item, "model_dump"):  # an SDK output object rather than its dict
        return cast(Mapping[str, Any], item.model_dump(exclude_none=True))
    return cast(Mapping[str, Any], item)


def from_agents(items: Iterable[Any], *, skip_unsupported: bool = True) -> list[Message]:
    """Agents SDK items (Responses API input items) as contextwright messages.

    Items of a type the Responses adapter does not know are skipped with a warning
    (``skip_unsupported=False``: `InvalidMessageError` from `from_responses`); a
    malformed item raises `InvalidMessageError` naming its position.
    """
    kept: list[Mapping[str, Any]] = []
    skipped: list[str] = []
    for raw in items:
        item = _plain(raw)
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind is None and isinstance(item, Mapping) and "role" in item:
            kind = "message"
        if skip_unsupported and kind not in SUPPORTED_ITEMS and isinstance(item, Mapping):
            skipped.append(str(kind))
            continue
        kept.append(item)
    if skipped:
        log.warning("Agents SDK items left out of the session (unknown types): %s", skipped)
    return from_responses(kept)


def to_agents(messages: Sequence[Message], *, validate: bool = True) -> list[TResponseInputItem]:
    """contextwright messages as Agents SDK items (Responses API input items).

    System messages keep the role ``system``, developer ones ``developer``. With
    ``validate`` the whole list is checked with `validate_responses`
    (`ProviderRuleError` where the API would refuse it: an orphaned call or output…).
    """
    items: list[dict[str, Any]] = []
    for m in messages:
        role: Literal["system", "developer"] = "developer" if m.role == "developer" else "system"
        items += render_responses([m], system_role=role, validate=False)
    if validate:
        validate_responses(items)
    return cast("list[TResponseInputItem]", items)


def _newest_units(messages: list[Message], limit: int) -> list[TResponseInputItem]:
    """The newest whole units of ``messages`` whose items number at most ``limit``."""
    out: list[TResponseInputItem] = []
    for unit in reversed(group_units(messages)):
        items = to_agents(messages[unit.start : unit.end])
        if len(out) + len(items) > limit:
            break
        out[:0] = items
    return out


class ContextwrightSession:
    """An Agents SDK session over ``session_id``'s conversation in ``conversations``.

    ``user`` of ``tenant`` owns the conversation. ``budget`` (default: the engine's)
    bounds what the model gets. ``reserve`` of it is kept out of ``get_items`` for
    what the SDK appends to those items without the filter (the new input, the
    run's tool calls and results); `model_input_filter` builds each call exactly and
    does not need it. See the module docstring.
    """

    def __init__(
        self,
        session_id: str,
        conversations: Conversations,
        *,
        tenant: str = "default",
        user: str = "anonymous",
        budget: int | None = None,
        reserve: int = 0,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self._session = StoredSession(
            conversations, session_id, tenant=tenant, user=user, budget=budget, reserve=reserve
        )
        self.session_id = session_id
        self.session_settings = session_settings
        self.conversations = conversations

    @property
    def session(self) -> StoredSession:
        """The stored conversation behind the session."""
        return self._session

    @property
    def report(self) -> ContextReport | None:
        """The receipt of the last build (None before the first)."""
        return self._session.report

    # -- the Session protocol -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation as the model should see it now, within the budget less ``reserve``.

        With ``limit``, the newest whole turns of it that make at most ``limit``
        items (a tool call is never separated from its results).
        """
        messages = await self._session.context()
        if limit is None:
            return to_agents(messages)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise UserError(f"limit must be None or an integer >= 0, got {limit!r}")
        return _newest_units(messages, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` (a trailing user message waits for the build that uses it)."""
        await self._session.add(from_agents(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item away and return it (None if there is none).

        A message waiting for its build goes at once; a stored item by moving the
        session to a new conversation holding everything else (the old one's
        messages are deleted), which costs what the conversation's length costs.
        """
        session = self._session
        if session.pending is not None:
            last: Message | None = session.pending
        else:
            conversation, info = await session.current()
            if info is None or info.last_seq == 0:
                return None
            log_ = self.conversations.backend.conversations
            newest = await log_.read(
                conversation, tenant=session.tenant, newest_first=True, limit=1
            )
            last = newest[0] if newest else None
        if last is None:
            return None
        items = to_agents([last], validate=False)
        rest = from_responses(cast("list[Mapping[str, Any]]", items[:-1]))
        await session.replace_last(rest[0] if rest else None)
        return items[-1]

    async def clear_session(self) -> None:
        """Start an empty conversation; the old one's messages are deleted."""
        await self._session.reset()

    # -- the model input filter ---------------------------------------------------------

    async def model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """The run's ``call_model_input_filter``: contextwright's build for this model call.

        What the SDK would send (the session's items, the new input, the run's
        items) is replaced by the build over what the session stored: the SDK stores
        the input and each turn's tool calls and results before the next call.
        The agent's ``instructions`` are counted against the budget.
        """
        instructions = data.model_data.instructions
        engine = self.conversations.engine
        extra = (
            count_message(engine.counter, Message.system(instructions), engine.overhead)
            if instructions
            else 0
        )
        messages = await self._session.context(extra, reserve=False)
        items = to_agents(messages)
        _check_caught_up(data.model_data.input, items)
        return ModelInputData(input=items, instructions=instructions)

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` (``kwargs`` are its own) with `model_input_filter` set."""
        if "call_model_input_filter" in kwargs:
            raise UserError("run_config() sets call_model_input_filter itself")
        return RunConfig(call_model_input_filter=self.model_input_filter, **kwargs)


def _check_caught_up(sent: Sequence[Any], built: Sequence[Mapping[str, Any]]) -> None:
    """`UserError` if the newest input the SDK is about to send is not in the build.

    The filter builds from what the session stored; used on a run whose items the
    SDK does not save in this session (another session, or none), it would drop the
    user's message or a tool's result without a word.
    """
    if not sent:
        return
    last = _plain(sent[-1])
    if last.get("type") == "function_call_output":
        call_id = last.get("call_id")
        if not any(i.get("call_id") == call_id for i in built):
            raise UserError(
                f"the tool result for call {call_id!r} is not in the session: use the "
                "filter with Runner.run(..., session=<this session>)"
            )
    elif last.get("role") == "user" and last.get("type", "message") == "message":
        text = from_agents([last])[0].text
        if not any(m.role == "user" and m.text == text for m in from_agents(built)):
            raise UserError(
                "the new input is not in the session: use the filter with "
                "Runner.run(..., session=<this session>)"
            )
