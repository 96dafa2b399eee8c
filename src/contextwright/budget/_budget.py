"""The token budget: how big the window is, what is reserved, how it is shared.

`Budget` turns a model's context window (from `MODELS` or given explicitly) minus
the output reserve into the number of input tokens a build may use. The *protected
zone* — system prompt, pinned P0 items, the current user message — is paid for
first and never cut; `BudgetError` is raised if it alone does not fit. What is left
is shared among the sections by target shares (system 20 %, summary 10 %,
retrieved 10 %, recent history 55 %, input 5 %; docs/design-notes.md, Budget shares and
deadlines). A section that needs less than its
share gives the rest to the others in proportion to their shares (`share_out`).

`BudgetTracker` records every allocation, granted or refused, so the receipt can say
where each token went.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from ..model._blocks import SECTIONS, Section

__all__ = [
    "DEFAULT_SHARES",
    "MODELS",
    "Allocation",
    "Budget",
    "BudgetTracker",
    "ModelInfo",
    "model_info",
    "share_out",
]

DEFAULT_SHARES: Mapping[Section, float] = {
    "system": 0.20,
    "summary": 0.10,
    "retrieved": 0.10,
    "recent": 0.55,
    "input": 0.05,
}


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model's context window and default output reserve, and how to count for it."""

    name: str
    context_window: int
    max_output: int
    provider: str
    encoding: str | None = None  # tiktoken encoding, for OpenAI models


# Published context windows and output limits (providers' model pages, 2026-11).
# Longest matching prefix wins, so "gpt-4o-mini-2024-07-18" finds "gpt-4o-mini".
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        ModelInfo("gpt-5", 400_000, 128_000, "openai", "o200k_base"),
        ModelInfo("gpt-4.1", 1_047_576, 32_768, "openai", "o200k_base"),
        ModelInfo("gpt-4o", 128_000, 16_384, "openai", "o200k_base"),
        ModelInfo("gpt-4o-mini", 128_000, 16_384, "openai", "o200k_base"),
        ModelInfo("o1", 200_000, 100_000, "openai", "o200k_base"),
        ModelInfo("o3", 200_000, 100_000, "openai", "o200k_base"),
        ModelInfo("o4-mini", 200_000, 100_000, "openai", "o200k_base"),
        ModelInfo("gpt-4-turbo", 128_000, 4_096, "openai", "cl100k_base"),
        ModelInfo("gpt-4", 8_192, 8_192, "openai", "cl100k_base"),
        ModelInfo("gpt-3.5-turbo", 16_385, 4_096, "openai", "cl100k_base"),
        ModelInfo("claude-opus-4", 200_000, 32_000, "anthropic"),
        ModelInfo("claude-sonnet-4", 200_000, 64_000, "anthropic"),
        ModelInfo("claude-haiku-4", 200_000, 64_000, "anthropic"),
        ModelInfo("claude-3-5", 200_000, 8_192, "anthropic"),
        ModelInfo("claude-3-7", 200_000, 64_000, "anthropic"),
    ]
}


def model_info(model: str) -> ModelInfo:
    """The registry entry whose name is the longest prefix of ``model``."""
    best: ModelInfo | None = None
    for name, info in MODELS.items():
        if model.startswith(name) and (best is None or len(name) > len(best.name)):
            best = info
    if best is None:
        known = ", ".join(sorted(MODELS))
        raise ConfigError(
            f"unknown model {model!r}: pass Budget(window=…) explicitly, or one of: {known}"
        )
    return best


@dataclass(frozen=True, slots=True)
class Budget:
    """How many tokens a build may put into the prompt.

    ``Budget(8000)`` is 8,000 input tokens. ``Budget(window=128_000, reserve_output=4096)``
    leaves 123,904. ``Budget.for_model("gpt-4o")`` reads the window from `MODELS` and
    reserves ``min(max_output, 4096)`` unless told otherwise. ``shares`` are the
    sections' target shares of what the protected zone leaves; they are normalised.
    """

    total: int | None = None
    window: int | None = None
    reserve_output: int = 0
    shares: Mapping[Section, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))

    def __post_init__(self) -> None:
        if self.total is None and self.window is None:
            raise ConfigError("Budget needs total= (input tokens) or window= (context window)")
        for label, value in (("total", self.total), ("window", self.window)):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(f"Budget {label} must be a positive integer, got {value!r}")
        if not isinstance(self.reserve_output, int) or self.reserve_output < 0:
            raise ConfigError(f"Budget reserve_output must be >= 0, got {self.reserve_output!r}")
        if self.window is not None and self.reserve_output >= self.window:
            raise ConfigError(
                f"Budget reserve_output ({self.reserve_output}) leaves nothing of the window ({self.window})"
            )
        for name, share in self.shares.items():
            if name not in SECTIONS:
                raise ConfigError(
                    f"unknown section {name!r} in shares; sections: {', '.join(SECTIONS)}"
                )
            if not isinstance(share, (int, float)) or share < 0:
                raise ConfigError(f"share of {name!r} must be a number >= 0, got {share!r}")
        if sum(self.shares.values()) <= 0:
            raise ConfigError("section shares must not all be zero")

    @classmethod
    def for_model(
        cls,
        model: str,
        *,
        reserve_output: int | None = None,
        shares: Mapping[Section, float] | None = None,
    ) -> Budget:
        info = model_info(model)
        reserve = min(info.max_output, 4096) if reserve_output is None else reserve_output
        return cls(
            window=info.context_window,
            reserve_output=reserve,
            shares=dict(shares) if shares is not None else dict(DEFAULT_SHARES),
        )

    @property
    def input_tokens(self) -> int:
        """Tokens available for the prompt."""
        if self.window is not None:
            available = self.window - self.reserve_output
            return min(available, self.total) if self.total is not None else available
        assert self.total is not None
        return self.total

    def weights(self) -> dict[Section, float]:
        total = sum(self.shares.values())
        return {s: self.shares.get(s, 0.0) / total for s in SECTIONS}


def share_out(
    amount: int, demands: Mapping[str, int], weights: Mapping[Any, float]
) -> dict[str, int]:
    """Divide ``amount`` among ``demands`` by ``weights``; unused share flows to the rest.

    Water-filling: every claimant is offered its weighted part of what is left; one
    that needs less takes only its demand and drops out, and the rest is offered
    again. Integer results, never above a demand, summing to at most ``amount``.
    Claimants with weight 0 are served only from what the others leave.
    """
    grant = dict.fromkeys(demands, 0)
    open_ = {k for k, d in demands.items() if d > 0}
    left = max(0, amount)
    while open_ and left > 0:
        wsum = sum(weights.get(k, 0.0) for k in open_)
        if wsum <= 0:  # only zero-weight claimants remain: share equally
            offer = {k: left / len(open_) for k in open_}
        else:
            offer = {k: left * weights.get(k, 0.0) / wsum for k in open_}
        satisfied = [k for k in open_ if demands[k] - grant[k] <= offer[k]]
        if satisfied:
            for k in satisfied:
                need = demands[k] - grant[k]
                grant[k] += need
                left -= need
                open_.discard(k)
            continue
        # nobody can be satisfied: hand out the offers (floored) and stop
        for k in sorted(open_):
            give = int(offer[k])
            grant[k] += give
        left = max(0, amount - sum(grant.values()))
        # leftovers from flooring go to the heaviest claimants first
        for k in sorted(open_, key=lambda k: (-weights.get(k, 0.0), k)):
            if left <= 0:
                break
            if grant[k] < demands[k]:
                grant[k] += 1
                left -= 1
        break
    return grant


@dataclass(frozen=True, slots=True)
class Allocation:
    """One entry of the tracker's ledger."""

    section: str
    item: str
    tokens: int
    granted: bool
    reason: str = ""


class BudgetTracker:
    """Counts tokens spent against a limit and keeps a ledger of every request."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.by_section: dict[str, int] = {}
        self.ledger: list[Allocation] = []

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    def allocate(self, section: str, item: str, tokens: int, *, force: bool = False) -> bool:
        """Spend ``tokens`` if they fit (or ``force``); record the request either way."""
        ok = force or self.used + tokens <= self.limit
        reason = "" if ok else f"needs {tokens}, {self.remaining} left"
        self.ledger.append(Allocation(section, item, tokens, ok, reason))
        if ok:
            self.used += tokens
            self.by_section[section] = self.by_section.get(section, 0) + tokens
        return ok

    def release(self, section: str, item: str, tokens: int) -> None:
        """Give back tokens of an earlier allocation (an item shrunk or removed)."""
        self.used -= tokens
        self.by_section[section] = self.by_section.get(section, 0) - tokens
        self.ledger.append(Allocation(section, item, -tokens, True, "released"))
