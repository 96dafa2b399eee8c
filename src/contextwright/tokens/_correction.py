"""Correcting the engine's token counts by what the provider reported.

After a request the provider says how many input tokens it counted (its usage, or
the numbers of a context-length error); the engine knows what it counted for the
same request. A `UsageSample` is that pair. `learn_line` turns the newest samples
into a line, and a `Correction` applies it:

    corrected = ceil(factor × count + offset)
    corrected = max(count, ceil(factor × count + offset))   for an exact counter

With samples of about one size the line is the largest ratio reported / counted
of the newest six, through zero; with sizes that differ, the least-squares line of
the newest 16 (recent ones weighing more), raised to lie on or above the newest
six, since the framing a provider adds and the one the engine counts differ by a
number of tokens more than by a share. Then a ``margin`` (0.5 %) more, the factor
within ``bounds`` (0.5-4); fewer than three samples never lower the count. So a build fitted
to what corrects to the budget (`Correction.fit`) lands under the budget by the
provider's count as long as the provider's counting does not jump. An exact
counter's corrected count never goes below its count (its tokenizer is the
provider's); an estimate's may: the heuristic over-counts OpenAI's tokenizers by
4-28 %, and the provider's own count is the better guide (docs/usage-feedback.md).

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

__all__ = ["Correction", "UsageFeedback", "UsageSample", "learn_line"]

SampleKind = Literal["usage", "overflow"]

WINDOW = 16
RECENT = 6
DECAY = 0.7
MARGIN = 0.005
BOUNDS = (0.5, 4.0)


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One request: what the engine counted (``estimated``), what the provider did.

    ``kind`` is ``"usage"`` (a reported usage) or ``"overflow"`` (the numbers of a
    context-length error); ``limit`` the input limit such an error reported.
    """

    estimated: int
    reported: int
    kind: SampleKind = "usage"
    at: float = 0.0
    limit: int | None = None

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
            "limit": self.limit,
        }

    @classmethod
    def from_dict(cls, data: Any) -> UsageSample | None:
        """The sample a `to_dict` wrote, or None for anything else (skipped, never raised)."""
        try:
            kind, limit = data.get("kind", "usage"), data.get("limit")
            return cls(
                int(data["estimated"]), int(data["reported"]),
                "overflow" if kind == "overflow" else "usage", float(data.get("at", 0.0)),
                None if limit is None else max(1, int(limit)),
            )  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError, ConfigError):
            return None


def learn_line(
    samples: Sequence[UsageSample],
    *,
    window: int = WINDOW,
    recent: int = RECENT,
    decay: float = DECAY,
    margin: float = MARGIN,
    bounds: tuple[float, float] = BOUNDS,
) -> tuple[float, float]:
    """(slope, offset) of the corrected count ``slope × count + offset`` that ``samples``
    (newest first) teach; (1, 0) with none.

    Requests of about one size: the largest ratio of the newest ``recent``, no offset.
    Requests of sizes that differ by a quarter or more (three at least): the
    least-squares line of reported against counted over the newest ``window``, each
    sample weighing ``decay`` times the next newer one (a provider's framing differs
    from the engine's by about as many tokens whatever the size, so small requests
    have other ratios than large ones), raised until it lies on or above the newest
    ``recent``. Either way ``margin`` more, the slope within ``bounds``; with fewer
    than three samples the slope is at least 1 (too little to count below the
    engine's own count on).
    """
    used = samples[:window]
    if not used:
        return 1.0, 0.0
    low, high = bounds
    xs = [float(s.estimated) for s in used]
    ys = [float(s.reported) for s in used]
    slope = max(y / x for x, y in zip(xs[:recent], ys[:recent], strict=True))
    offset = 0.0
    if len(used) >= 3 and max(xs) >= 1.25 * min(xs):
        ws = [decay**i for i in range(len(xs))]
        sw = sum(ws)
        mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
        my = sum(w * y for w, y in zip(ws, ys, strict=True)) / sw
        sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
        a = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys, strict=True)) / sxx
        if low <= a <= high:
            slope = a
            offset = max(y - a * x for x, y in zip(xs[:recent], ys[:recent], strict=True))
    if len(used) < 3:
        slope, offset = max(1.0, slope), 0.0
    return min(high, max(low, slope)) * (1.0 + margin), offset


@dataclass(frozen=True, slots=True)
class Correction:
    """The corrected count ``factor × count + offset`` for one key (model and counter).

    ``factor`` is the slope and ``offset`` a number of tokens (0 unless the samples
    span several sizes); an exact counter's corrected count is never below its count.
    ``limit`` is the smallest input limit a context-length error among the samples
    reported: builds keep under it whatever their budget says.
    """

    factor: float = 1.0
    samples: int = 0
    key: str = ""
    exact: bool = False
    last_ratio: float | None = None
    why: str = ""
    offset: float = 0.0
    limit: int | None = None

    def apply(self, count: int) -> int:
        """The corrected count of ``count`` (never below it for an exact counter)."""
        if self.factor == 1.0 and self.offset == 0.0:
            return count
        corrected = max(1, math.ceil(count * self.factor + self.offset - 1e-9))
        return max(count, corrected) if self.exact else corrected

    def fit(self, limit: int) -> int:
        """The most the engine may count so that the corrected count stays within ``limit``."""
        if self.factor == 1.0 and self.offset == 0.0:
            return limit
        fitted = max(1, math.floor((limit - self.offset) / self.factor + 1e-9))
        return min(limit, fitted) if self.exact else fitted

    def ratio(self, count: int) -> float:
        """Corrected / counted at ``count`` tokens."""
        return self.apply(count) / count if count > 0 else self.factor

    @classmethod
    def of(
        cls, samples: Sequence[UsageSample], *, key: str, exact: bool, why: str = ""
    ) -> Correction:
        """The correction ``samples`` (newest first) teach: the line from the newest
        `WINDOW`, the limit from all of them."""
        slope, offset = learn_line(samples)
        last = samples[0].ratio if samples else None
        limit = min((s.limit for s in samples if s.limit), default=None)
        return cls(slope, min(len(samples), WINDOW), key, exact, last, why, offset, limit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": round(self.factor, 4),
            "offset": round(self.offset, 1),
            "samples": self.samples,
            "key": self.key,
            "last_ratio": None if self.last_ratio is None else round(self.last_ratio, 4),
            "limit": self.limit,
        }


@dataclass
class UsageFeedback:
    """The newest samples per key, in process (what a `ContextEngine` learns on its own)."""

    window: int = 2 * WINDOW
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
