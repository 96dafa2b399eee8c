"""What a source may read about the turn being built: `Turn` and `ConversationState`.

`Turn` is the request as the sources see it — who (tenant, user, conversation),
the new message, the history, the time, the turn number, where the history
window is expected to start — plus the caller's
structured `ConversationState` (collected fields, assessment, stage, device,
recent agent calls, as the consultation preset uses them). All of it is read-only for sources.
`ConversationState.from_dict` reads the JSON form the CLI accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .._errors import InvalidMessageError
from ..model._messages import Message
from ..stores._cache import cache_namespace

__all__ = ["AgentCall", "Assessment", "ConversationState", "DeviceInfo", "StageVisit", "Turn"]


@dataclass(frozen=True, slots=True)
class Assessment:
    """An assessment result."""

    recommended: tuple[str, ...] = ()
    score: float | None = None
    highlights: tuple[str, ...] = ()
    concerns: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """Where and on what the user is."""

    device_type: str = ""
    timezone: str = ""
    region: str = ""
    locale: str = ""
    utc_offset_minutes: int | None = None


@dataclass(frozen=True, slots=True)
class AgentCall:
    """One recent call of an agent or tool."""

    name: str
    invoked_at: float
    input_summary: str = ""
    output_summary: str = ""
    duration_ms: float | None = None
    ok: bool = True


@dataclass(frozen=True, slots=True)
class StageVisit:
    stage: str
    turns: int


@dataclass(frozen=True, slots=True)
class ConversationState:
    """Structured state the caller keeps about the conversation."""

    collected_info: Mapping[str, Any] = field(default_factory=dict)
    assessment: Assessment | None = None
    stage: str | None = None
    stage_turns: int = 0
    stage_history: tuple[StageVisit, ...] = ()
    device: DeviceInfo | None = None
    agent_calls: tuple[AgentCall, ...] = ()
    started_at: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "state") -> ConversationState:
        """Read the JSON form; errors name the offending key under ``where``."""
        if not isinstance(data, Mapping):
            raise InvalidMessageError(where, "must be an object")
        known = {
            "collected_info", "assessment", "stage", "stage_turns", "stage_history",
            "device", "agent_calls", "started_at",
        }  # fmt: skip
        for key in data:
            if key not in known:
                raise InvalidMessageError(
                    f"{where}.{key}", f"unknown key; expected one of {sorted(known)}"
                )
        try:
            info = data.get("collected_info", {})
            if not isinstance(info, Mapping):
                raise InvalidMessageError(f"{where}.collected_info", "must be an object")
            a = data.get("assessment")
            assessment = None
            if a is not None:
                if not isinstance(a, Mapping):
                    raise InvalidMessageError(f"{where}.assessment", "must be an object")
                assessment = Assessment(
                    tuple(a.get("recommended", ())),
                    a.get("score"),
                    tuple(a.get("highlights", ())),
                    tuple(a.get("concerns", ())),
                    a.get("note", ""),
                )
            d = data.get("device")
            device = DeviceInfo(**d) if isinstance(d, Mapping) else None
            calls = tuple(
                AgentCall(**c) for c in _list(data.get("agent_calls", []), f"{where}.agent_calls")
            )
            history = tuple(
                StageVisit(**s)
                for s in _list(data.get("stage_history", []), f"{where}.stage_history")
            )
        except TypeError as exc:
            raise InvalidMessageError(where, f"malformed state: {exc}") from None
        return cls(
            collected_info=dict(info),
            assessment=assessment,
            stage=data.get("stage"),
            stage_turns=int(data.get("stage_turns", 0)),
            stage_history=history,
            device=device,
            agent_calls=calls,
            started_at=data.get("started_at"),
        )


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidMessageError(where, "must be a list")
    return value


@dataclass(frozen=True)
class Turn:
    """One build request as the sources see it."""

    message: Message
    history: Sequence[Message] = ()
    tenant: str = "default"
    user: str = "anonymous"
    conversation: str = "default"
    state: ConversationState = field(default_factory=ConversationState)
    now: float = 0.0
    locale: str = "en"
    user_turns: int | None = None  # user messages before this one, when the caller knows
    # the engine's estimate of `window_start`, made when first asked
    window_estimate: Callable[[], int | None] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def query(self) -> str:
        """The text of the new message: what retrieval searches for."""
        return self.message.text

    @cached_property
    def window_start(self) -> int | None:
        """The sequence number the history window is expected to start at, or None.

        Estimated by the engine before the sources are fetched (the window is
        decided after): the window keeps at least the messages from here on, so
        older ones are not in the prompt verbatim and recall searches below it.
        None when unknown (no estimate, or a history without sequence numbers).
        """
        return self.window_estimate() if self.window_estimate is not None else None

    @cached_property
    def turn_number(self) -> int:
        """1 for the first user message of the conversation, 2 for the second…

        Counted on first use only (it reads the whole history), so sources and
        triggers that never ask for it cost nothing.
        """
        if self.user_turns is not None:
            return self.user_turns + 1
        return 1 + sum(1 for m in self.history if m.role == "user")

    @cached_property
    def namespace(self) -> str:
        """Cache namespace: one per tenant, user and conversation (`cache_namespace`).

        The user is part of it because two users may share a conversation id (the
        default is "default"): a cached block of one must never be served to the
        other, whatever the source's own cache key says. The ids are escaped, not
        just joined, so that no two (tenant, user, conversation) share one.
        """
        return cache_namespace(self.tenant, self.user, self.conversation)
