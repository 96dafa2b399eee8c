"""What the provider reported, fed back into builds: the count correction and overflow recovery.

A build is fitted to the budget by the engine's count corrected by what providers
reported for earlier requests (`Correction`, learnt in `tokens._correction`):
`corrected_budget` gives the budget in the engine's own count (what corrects to it),
and `write_usage` puts the correction into the receipt (``report.usage``: the
factor, the raw and corrected totals, the provider's budget). The receipt's
``budget`` and ``used`` stay in the engine's count, so ``used <= budget`` holds as
always; ``usage.corrected <= usage.budget`` is the promise about the provider's count.

`rebuild_after_overflow` recovers from a provider's context-length error
(`llm.read_overflow`): it rebuilds the same request once at the current budget to
learn what the engine counted for it, then again with the budget cut to what the
error reports — the engine's count times ``input limit / reported tokens``, less a
3 % margin (`retry_plan`; without numbers, a fifth less) — and says so in the receipt
(``report.overflow``, ``report.usage``, a warning). The error's numbers are a sample
like a usage (the caller's ``learn``). An error that is not a context-length error
is raised again unchanged.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, InvalidMessageError
from ..budget._budget import Budget
from ..llm._overflow import ContextOverflow, read_overflow
from ..llm._usage import ProviderUsage, read_usage
from ..tokens._correction import MARGIN, Correction, UsageSample
from ._receipt import BuiltContext, ContextReport

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = [
    "RETRY_MARGIN",
    "corrected_budget",
    "correction_for",
    "learn_usage",
    "overflow_or_raise",
    "provider_budget",
    "rebuild_after_overflow",
    "rebuild_for",
    "sample_of",
    "usage_key",
    "write_usage",
]

# what a rebuild after an overflow leaves below the provider's limit
RETRY_MARGIN = 0.03
# with no limit in the error (OpenAI Responses), the share of its count a rebuild gets
NO_NUMBERS_CUT = 0.8


def usage_key(engine: ContextEngine) -> str:
    """What a correction is learnt per: the engine's model and its counts' label."""
    return f"{engine.model or '*'}|{engine.count_key}"


def correction_for(engine: ContextEngine, correction: Correction | float | None) -> Correction:
    """A build's correction: the one given (a factor is taken as is), else the engine's own."""
    exact = bool(getattr(engine.counter, "exact", False))
    key = usage_key(engine)
    if correction is None:
        return engine.usage.correction(key, exact=exact)
    if isinstance(correction, Correction):
        return correction
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        raise ConfigError(f"correction must be a Correction or a number, got {correction!r}")
    if not 0.1 <= correction <= 10:
        raise ConfigError(f"correction factor must be within 0.1-10, got {correction!r}")
    return Correction(float(correction), 0, key, exact, why="given")


def provider_budget(bud: Budget, correction: Correction) -> int:
    """The input tokens the provider may get: the budget, within a limit it reported."""
    limit = correction.limit
    return min(bud.input_tokens, limit) if limit else bud.input_tokens


def corrected_budget(bud: Budget, correction: Correction) -> Budget:
    """``bud`` in the engine's own count: what, corrected, stays within ``bud`` (and the
    provider's reported limit)."""
    fitted = correction.fit(provider_budget(bud, correction))
    if fitted == bud.input_tokens:
        return bud
    return Budget(total=fitted, shares=bud.shares)


def write_usage(report: ContextReport, correction: Correction, budget: int) -> None:
    """The receipt's ``usage``: the factor, raw and corrected totals, the provider's budget."""
    if correction.samples == 0 and correction.factor == 1.0 and correction.offset == 0.0:
        return
    if correction.limit:
        budget = min(budget, correction.limit)
    report.usage = {
        **correction.to_dict(),
        "raw": report.used,
        "corrected": correction.apply(report.used),
        "budget": budget,
        "source": correction.why,
    }


def sample_of(built: BuiltContext | ContextReport | int, usage: Any) -> UsageSample:
    """The sample of a build (its receipt, or the engine's count) and the provider's usage."""
    report = built.report if isinstance(built, BuiltContext) else built
    if isinstance(report, ContextReport):
        estimated = int(report.usage["raw"]) if report.usage else report.used
    elif isinstance(report, int) and not isinstance(report, bool):
        estimated = report
    else:
        raise InvalidMessageError(
            "built",
            f"must be a BuiltContext, a ContextReport or a count, got {type(built).__name__}",
        )
    reported: ProviderUsage = read_usage(usage)
    if estimated < 1 or reported.input_tokens < 1:
        raise InvalidMessageError("usage", "a request of no tokens teaches nothing")
    return UsageSample(estimated, reported.input_tokens)


def overflow_or_raise(error: object) -> ContextOverflow:
    """The context-length error in ``error``; anything else is raised again unchanged."""
    found = read_overflow(error)
    if found is not None:
        return found
    if isinstance(error, BaseException):
        raise error
    raise InvalidMessageError(
        "retry_after_overflow", f"not a context-length error: {str(error)[:200]!r}"
    )


def retry_plan(
    overflow: ContextOverflow, first: BuiltContext, correction: Correction, budget: int
) -> tuple[int, Correction, UsageSample]:
    """(the budget in the engine's count, the correction, the sample) of the rebuild.

    ``first`` is the request rebuilt at the budget that overflowed; ``budget`` the
    provider's budget it was fitted to. An error without the provider's count still
    teaches a sample: at least the limit plus one, and 5 % more than the corrected
    count; with no limit either, a quarter more than the corrected count (so that
    errors in a row cut deeper and deeper).
    """
    used = max(1, first.report.used)
    limit = overflow.input_limit
    reported = overflow.reported
    if reported is None:
        guess = correction.apply(used)
        reported = max(limit + 1, math.ceil(guess * 1.05)) if limit else math.ceil(guess * 1.25)
    sample = UsageSample(used, max(1, reported), "overflow", limit=limit)
    ratio = sample.ratio
    room = min(budget, limit) if limit else math.floor(sample.reported * NO_NUMBERS_CUT)
    room = min(room, correction.limit) if correction.limit else room
    target = math.floor(room / ratio * (1 - RETRY_MARGIN))
    if correction.exact:  # never more than the room by its own count
        target = min(target, room)
    target = max(1, min(target, first.report.budget, used - 1 if used > 1 else 1))
    said = f"{overflow.reported if overflow.reported else '?'} of {limit or '?'}"
    new = Correction(
        ratio * (1 + MARGIN), correction.samples + 1, correction.key,
        correction.exact, ratio, f"overflow: the provider counted {said}",
        limit=min(limit, correction.limit or limit) if limit else correction.limit,
    )  # fmt: skip
    return target, new, sample


async def rebuild_after_overflow(
    error: object,
    build: Callable[..., Awaitable[BuiltContext]],
    correction: Correction,
    bud: Budget,
    *,
    learn: Callable[[UsageSample], object] | None = None,
) -> BuiltContext:
    """Rebuild a request the provider refused as too long (see the module docstring).

    ``build(budget=, correction=)`` builds the request; ``bud`` is the provider's
    budget it was built for. ``learn`` is given the sample the error
    teaches (the engine's count and the provider's), when it says how many it counted.
    """
    overflow = overflow_or_raise(error)
    budget = bud.input_tokens
    first = await build(budget=bud, correction=correction)
    target, new, sample = retry_plan(overflow, first, correction, budget)
    if learn is not None:
        learned = learn(sample)
        if inspect.isawaitable(learned):  # the stateful mode keeps it in its store
            await learned
    again = Budget(total=target, shares=bud.shares)
    built = await build(budget=again, correction=Correction(key=new.key))
    report = built.report
    report.overflow = {
        **overflow.to_dict(),
        "previous_used": first.report.used,
        "retry_budget": target,
        "factor": round(new.factor, 4),
    }
    report.usage = {
        **new.to_dict(),
        "raw": report.used,
        "corrected": new.apply(report.used),
        "budget": min(budget, new.limit) if new.limit else budget,
        "source": new.why,
    }
    report.warnings.append(
        f"rebuilt after a context-length error ({overflow.provider}: "
        f"{overflow.reported or '?'} tokens > {overflow.input_limit or '?'}): "
        f"{first.report.used} -> {report.used} tokens by the engine's count"
    )
    return built


def learn_usage(
    engine: ContextEngine, built: BuiltContext | ContextReport | int, usage: Any
) -> Correction:
    """`ContextEngine.record_usage`: one more sample in the engine's own `UsageFeedback`."""
    key = usage_key(engine)
    engine.usage.record(key, sample_of(built, usage))
    return engine.usage.correction(key, exact=bool(getattr(engine.counter, "exact", False)))


async def rebuild_for(
    engine: ContextEngine,
    error: object,
    build: Callable[..., Awaitable[BuiltContext]],
    budget: Budget | int | None,
    correction: Correction | float | None,
) -> BuiltContext:
    """`ContextEngine.build` with ``retry_after_overflow``: the error's sample is learnt
    in process unless the build was given its correction (the caller keeps its own)."""
    overflow_or_raise(error)
    corr = correction_for(engine, correction)
    bud = engine._budget(budget, None) if budget is not None else engine.budget
    if bud is None:
        raise ConfigError("no budget: pass budget= to build() or to ContextEngine, or a model=")
    learn = functools.partial(engine.usage.record, corr.key) if correction is None else None
    return await rebuild_after_overflow(error, build, corr, bud, learn=learn)
