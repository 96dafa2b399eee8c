"""Correcting the engine's token counts by what the provider reported.

After a request the provider says how many input tokens it counted (its usage, or
the numbers of a context-length error); the engine knows what it counted for the
same request. A `UsageSample` is that pair. `learn_factor` turns the newest samples
into a factor, and a `Correction` applies it:

    corrected = max(count, ceil(count × factor))   for an exact counter
    corrected = ceil(count × factor)               for an estimate

The factor is conservative: the upper ``quantile`` (default 0.9; with fewer than ten
samples, the largest) of the newest ``window`` ratios reported / counted, plus a
``margin`` (0.5 %), within ``bounds`` (0.5-4). So a build fitted to
``budget / factor`` of the engine's count lands under the budget by the provider's
count as long as the ratio does not jump. An exact counter's factor never goes
below 1: its count is the provider's tokenizer, and what the provider adds (the
per-message framing) only ever raises it. An estimate's factor may: the heuristic
over-counts OpenAI's tokenizers by 4-28 %, and the provider's own count is the
better guide (docs/usage-feedback.md says why, and what the bench measured).

`UsageFeedback` keeps the newest samples per key in process (`ContextEngine`'s
own); `Conversations` keeps them in the store, shared by every worker.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError

__all__ = ["Correction", "UsageFeedback", "UsageSample", "learn_factor"]

SampleKind = Literal["usage", "overflow"]

WINDOW = 16
QUANTILE = 0.9
MARGIN = 0.005
BOUNDS = (0.5, 4.0)


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One request: what the engine counted (``estimated``), what the provider did.

    ``kind`` is ``"usage"`` (a reported usage) or ``"overflow"`` (the numbers of a
    context-length error).
    """

    estimated: int
    reported: int
    kind: SampleKind = "usage"
    at: float = 0.0

    def __post_init__(self) -> None:
        for label, value in (("estimated", self.estimated), ("reported", self.reported)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"usage sample: {label} must be a positive integer, got {value!r}"
                )

    @property
    def ratio(self) -> float:
        return self.reported / self.estimated

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimated": self.estimated,
            "reported": self.reported,
            "kind": self.kind,
            "at": self.at,
        }

    @classmethod
    def from_dict(cls, data: Any) -> UsageSample | None:
        """The sample a `to_dict` wrote, or None for anything else (skipped, never raised)."""
        try:
            kind = data.get("kind", "usage")
            return cls(
                int(data["estimated"]), int(data["reported"]),
                "overflow" if kind == "overflow" else "usage", float(data.get("at", 0.0)),
            )  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError, ConfigError):
            return None


def learn_factor(
    samples: Sequence[UsageSample],
    *,
    exact: bool,
    window: int = WINDOW,
    quantile: float = QUANTILE,
    margin: float = MARGIN,
    bounds: tuple[float, float] = BOUNDS,
) -> float:
    """The correction factor of ``samples`` (newest first); 1.0 with none."""
    ratios = sorted(s.ratio for s in samples[:window])
    if not ratios:
        return 1.0
    rank = max(1, math.ceil(quantile * len(ratios))) if len(ratios) >= 10 else len(ratios)
    factor = ratios[rank - 1] * (1.0 + margin)
    low, high = bounds
    factor = min(high, max(low, factor))
    return max(1.0, factor) if exact else factor


@dataclass(frozen=True, slots=True)
class Correction:
    """A factor for one key (model and counter), and what it was learnt from."""

    factor: float = 1.0
    samples: int = 0
    key: str = ""
    exact: bool = False
    last_ratio: float | None = None
    why: str = ""

    def apply(self, count: int) -> int:
        """The corrected count of ``count`` (never below it for an exact counter)."""
        corrected = math.ceil(count * self.factor - 1e-9)
        return max(count, corrected) if self.exact else max(0, corrected)

    def fit(self, limit: int) -> int:
        """The most the engine may count so that the corrected count stays within ``limit``."""
        if self.factor == 1.0:
            return limit
        return max(1, math.floor(limit / self.factor + 1e-9))

    @classmethod
    def of(
        cls, samples: Sequence[UsageSample], *, key: str, exact: bool, why: str = ""
    ) -> Correction:
        """The correction ``samples`` (newest first) teach."""
        factor = learn_factor(samples, exact=exact)
        last = samples[0].ratio if samples else None
        return cls(factor, min(len(samples), WINDOW), key, exact, last, why)

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": round(self.factor, 4),
            "samples": self.samples,
            "key": self.key,
            "last_ratio": None if self.last_ratio is None else round(self.last_ratio, 4),
        }


@dataclass
class UsageFeedback:
    """The newest samples per key, in process (what a `ContextEngine` learns on its own)."""

    window: int = WINDOW
    _samples: dict[str, deque[UsageSample]] = field(default_factory=dict)

    def record(self, key: str, sample: UsageSample) -> None:
        found = self._samples.get(key)
        if found is None:
            found = self._samples[key] = deque(maxlen=self.window)
        found.appendleft(sample)

    def samples(self, key: str) -> list[UsageSample]:
        """Newest first."""
        return list(self._samples.get(key, ()))

    def correction(self, key: str, *, exact: bool) -> Correction:
        return Correction.of(self.samples(key), key=key, exact=exact, why="in process")
