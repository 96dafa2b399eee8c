"""Compaction: when a stored conversation has grown too big for its prompt, and what to do.

The settings are `CompactionConfig` with its three presets, plus the summary
triggers (every 10 messages or 3,000 tokens); docs/design-notes.md, Compaction and
Summaries, gives the reasons. `check` measures the
conversation's *live* size — the summary plus every message after it, at their
prompt cost — and says how urgent compaction is: ``none``, ``soft`` (schedule it in
the background), ``hard`` (do it before the build returns) or ``emergency`` (above
95 % of the context budget).

`plan_compaction` is the pure part of the strategy list (docs/design-notes.md,
Compaction), applied in order
and stopping as soon as the live size is under the soft threshold:

1. *compress tool results* — large results are stored with the token cost of their
   compressed view (`ToolResultCompressor`), their originals offloaded to working
   memory, so this step is already done at append time; the plan reports it;
2. *summarise early turns, keeping the recent N* — the boundary moves forward to
   just before the last ``keep_recent_messages`` messages, never inside a tool-call
   unit;
3. *shorten very long messages* — in the prompt only (the window's
   ``max_message_tokens``), reported with the tokens it saves;
4. *drop P2 blocks* and 5. *compress P1 blocks* — these belong to the fit stage of
   every build (`fit_blocks`); in an emergency the plan says so and the next build
   runs with P2 blocks off.

Nothing here deletes a stored message: a summary replaces messages in the prompt,
and every summary version stays in the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from .._errors import ConfigError
from ..model._messages import Message

__all__ = [
    "PRESETS",
    "CompactionCheck",
    "CompactionConfig",
    "CompactionPlan",
    "CompactionResult",
    "Urgency",
    "check",
    "compaction_report",
    "plan_compaction",
    "summary_boundary",
]

Urgency = Literal["none", "soft", "hard", "emergency"]
EMERGENCY_SHARE = 0.95  # above 95 % of the budget, force everything (design-notes, Compaction)
# clear_at_least_tokens=None: a clearing frees at least half of what the live history
# may grow to (docs/design-notes.md, Prompt cache)
AUTO_CLEAR_DIVISOR = 2


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    """The compaction settings and the summary triggers (docs/design-notes.md, Compaction)."""

    soft_threshold_tokens: int = 15_000
    hard_threshold_tokens: int = 20_000
    reserve_tokens: int = 4_000
    memory_flush_enabled: bool = True
    keep_recent_messages: int = 6
    summary_max_tokens: int = 800
    use_llm: bool = False
    llm_fallback_to_rules: bool = True
    # a new incremental summary every 10 messages or 3,000 tokens (design-notes, Summaries)
    summary_message_threshold: int = 10
    summary_token_threshold: int = 3_000
    long_message_tokens: int = 2_000  # strategy 3 (design-notes, History window)
    # cache-aware clearing (design-notes, Prompt cache): a summary that moves the
    # prompt's start frees at least this many tokens, or waits; None: half of the
    # history window or the soft threshold; 0: off (the window slides, summaries follow)
    clear_at_least_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.soft_threshold_tokens <= 0 or self.hard_threshold_tokens <= 0:
            raise ConfigError("compaction thresholds must be positive")
        if self.hard_threshold_tokens < self.soft_threshold_tokens:
            raise ConfigError(
                f"hard_threshold_tokens ({self.hard_threshold_tokens}) must be >= "
                f"soft_threshold_tokens ({self.soft_threshold_tokens})"
            )
        for name in ("reserve_tokens", "keep_recent_messages", "summary_max_tokens"):
            if getattr(self, name) < 0:
                raise ConfigError(f"CompactionConfig.{name} must be >= 0")
        if self.summary_max_tokens < 32:
            raise ConfigError("summary_max_tokens must be at least 32")
        if self.summary_message_threshold < 1 or self.summary_token_threshold < 1:
            raise ConfigError("summary thresholds must be at least 1")
        if self.long_message_tokens < 16:
            raise ConfigError("long_message_tokens must be at least 16")
        at_least = self.clear_at_least_tokens
        if at_least is not None and (
            isinstance(at_least, bool) or not isinstance(at_least, int) or at_least < 0
        ):
            raise ConfigError(
                f"CompactionConfig.clear_at_least_tokens must be None or an integer >= 0, "
                f"got {at_least!r}"
            )

    def clear_at_least(self, window: int) -> int:
        """The tokens a clearing frees at least, for a history window of ``window`` tokens
        (0: cache-aware clearing is off). By default half of what the live history
        may grow to: the window, or the soft threshold if that is lower."""
        if self.clear_at_least_tokens is None:
            return max(0, min(window, self.soft_threshold_tokens)) // AUTO_CLEAR_DIVISOR
        return self.clear_at_least_tokens

    @classmethod
    def preset(cls, name: str) -> CompactionConfig:
        try:
            return PRESETS[name]
        except KeyError:
            raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}") from None

    def with_(self, **changes: object) -> CompactionConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


# The three configurations (docs/design-notes.md, Compaction).
PRESETS: dict[str, CompactionConfig] = {
    "development": CompactionConfig(5_000, 8_000, 2_000, True, 4, 400, False, True),
    "production": CompactionConfig(15_000, 20_000, 4_000, True, 6, 800, False, True),
    "large_context": CompactionConfig(25_000, 30_000, 6_000, True, 10, 1_200, True, True),
}


@dataclass(frozen=True, slots=True)
class CompactionCheck:
    """The check: should we compact, how big is it, against what, how urgently."""

    should_compact: bool
    current_tokens: int
    threshold: int
    urgency: Urgency
    summary_due: bool = False  # the message/token trigger for a new summary


def check(
    config: CompactionConfig,
    *,
    live_tokens: int,
    unsummarized_messages: int,
    unsummarized_tokens: int,
    budget: int | None = None,
) -> CompactionCheck:
    """How urgent compaction is for a conversation whose live size is ``live_tokens``."""
    if budget is not None and live_tokens >= EMERGENCY_SHARE * budget:
        urgency: Urgency = "emergency"
    elif live_tokens >= config.hard_threshold_tokens:
        urgency = "hard"
    elif live_tokens >= config.soft_threshold_tokens:
        urgency = "soft"
    else:
        urgency = "none"
    threshold = (
        config.hard_threshold_tokens
        if urgency in ("hard", "emergency")
        else config.soft_threshold_tokens
    )
    due = (
        unsummarized_messages >= config.summary_message_threshold
        or unsummarized_tokens >= config.summary_token_threshold
    )
    return CompactionCheck(urgency != "none", live_tokens, threshold, urgency, due)


class Planned(Protocol):
    """What a compaction plan reads of a message: a `Message` or a stored `MessageOutline`."""

    @property
    def role(self) -> str: ...

    @property
    def tool_calls(self) -> tuple[object, ...]: ...


def summary_boundary(messages: Sequence[Planned], keep_recent: int) -> int:
    """How many of ``messages`` (oldest first) to summarise, keeping ``keep_recent`` whole.

    The cut never falls inside a tool-call unit: it moves back to the start of the
    unit that would be split, so a call and its results are summarised together or
    kept together. Only the extent of that unit matters, and it follows from the
    roles alone (as `iter_units_backwards` draws units): every message but a tool
    result starts a unit, and a run of tool results belongs to the assistant
    message before it if that one calls tools, else forms a unit of its own. So
    only the run of tool results at the cut is read, and outlines do as well as
    messages.
    """
    n = len(messages)
    if n <= keep_recent:
        return 0
    cut = n - keep_recent
    if cut == n or messages[cut].role != "tool":
        return cut
    j = cut - 1
    while j >= 0 and messages[j].role == "tool":
        j -= 1
    if j >= 0 and messages[j].role == "assistant" and messages[j].tool_calls:
        return j
    return j + 1


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What `plan_compaction` decided: where the summary ends, which steps run, and why."""

    summarize_count: int  # how many of the unsummarised messages the new summary covers
    strategies: tuple[str, ...]
    tokens_before: int
    tokens_after_estimate: int
    notes: tuple[str, ...] = ()


def plan_compaction(
    config: CompactionConfig,
    messages: Sequence[Planned],
    costs: Sequence[int],
    *,
    summary_tokens: int,
    compressed_tool_results: int = 0,
    shortened_savings: int = 0,
    urgency: Urgency = "soft",
    force_summary: bool = False,
    clear_at_least: int = 0,
) -> CompactionPlan:
    """Decide the steps for the unsummarised ``messages`` (with their prompt ``costs``).

    A soft compaction that would free fewer than ``clear_at_least`` tokens is not
    made (every summary rewrites the provider's cached prompt; docs/design-notes.md,
    Prompt cache): a hard one, an emergency or a forced one always is.
    """
    if len(messages) != len(costs):
        raise ConfigError("plan_compaction: messages and costs differ in length")
    before = summary_tokens + sum(costs)
    tokens = before
    steps: list[str] = []
    notes: list[str] = []
    if compressed_tool_results:
        steps.append("compress_tool_results")
        notes.append(
            f"{compressed_tool_results} tool result(s) shown compressed, originals offloaded"
        )
    cut = 0
    if tokens >= config.soft_threshold_tokens or force_summary or urgency in ("hard", "emergency"):
        cut = summary_boundary(messages, config.keep_recent_messages)
        freed = sum(costs[:cut])
        if not cut:
            notes.append(f"only {len(messages)} message(s) after the summary; nothing to summarise")
        elif freed < clear_at_least and urgency == "soft" and not force_summary:
            notes.append(
                f"summarising {cut} message(s) would free {freed} tokens, fewer than "
                f"clear_at_least ({clear_at_least}): left for a later compaction"
            )
            cut = 0
        else:
            steps.append("summarize_early_turns")
            tokens = min(tokens, config.summary_max_tokens + sum(costs[cut:]))
            notes.append(f"summarise {cut} message(s), keep the last {len(messages) - cut}")
    if tokens >= config.soft_threshold_tokens and shortened_savings:
        steps.append("shorten_long_messages")
        tokens -= shortened_savings
        notes.append(f"long messages shortened in the prompt save {shortened_savings} tokens")
    if urgency == "emergency" or tokens >= config.hard_threshold_tokens:
        steps += ["drop_p2_blocks", "compress_p1_blocks"]
        notes.append("the next builds drop P2 blocks and cut P1 blocks to their share")
    return CompactionPlan(cut, tuple(steps), before, max(0, tokens), tuple(notes))


@dataclass(frozen=True)
class CompactionResult:
    """What compaction did, with what makes it auditable.

    ``compacted_messages`` is the prompt view after compaction (the summary as a
    system message, then the retained messages); the stored messages are untouched.
    """

    compacted_messages: list[Message]
    summary: str
    original_count: int
    retained_count: int
    flushed_memories: int
    tokens_before_compaction: int
    tokens_after_compaction: int
    urgency: Urgency = "none"
    strategies: tuple[str, ...] = ()
    applied: bool = True
    summary_version: int | None = None
    upto_seq: int | None = None
    method: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def compaction_report(
    urgency: CompactionCheck, compacted: CompactionResult | None
) -> dict[str, Any]:
    """The build report's ``compaction``: the check, and what a compaction before it did."""
    out: dict[str, Any] = {"urgency": urgency.urgency, "live_tokens": urgency.current_tokens}
    if compacted is not None:
        out.update(
            performed=compacted.applied, strategies=list(compacted.strategies),
            tokens_before=compacted.tokens_before_compaction,
            tokens_after=compacted.tokens_after_compaction, summary_version=compacted.summary_version,
        )  # fmt: skip
    return out
