"""Stateful usage feedback: providers' reported usage kept in the store, shared by workers.

`UsageKeeper` is `Conversations`' part of the loop that `pipeline._usage` closes for
one build:

* **samples in the store** — each `record_usage` (and each context-length error)
  is a `UsageSample` (the engine's count of the request, the provider's) kept in
  the backend's `Receipts` role under the name ``~usage/<model>|<counter>`` in the
  tenant: newest first, the newest 32 kept, not a write to any conversation (no
  version moves). Every worker on the same store learns from every worker's
  requests. A backend without receipts keeps them in the engine (in process).
* **the correction of a build** — learnt from the newest samples
  (`Correction.of`), read from the store at most every ``refresh`` seconds per
  tenant (2 s; a local `record_usage` refreshes at once), so a build costs no
  extra query in the common case.
* **pairing** — a provider's usage belongs to the last build of the conversation:
  its raw count is remembered per conversation in process (the newest 4,096
  conversations); ``built=`` pairs it explicitly (another process built it).
* **overflow** — `rebuild` re-builds the request a provider refused as too long
  (`pipeline._usage.rebuild_after_overflow`), teaches the store the error's
  sample, and does not store the user message a second time: a message that is
  already the conversation's last is rebuilt in place.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, InvalidMessageError
from ..budget._budget import Budget
from ..model._messages import Message
from ..pipeline._receipt import BuiltContext, ContextReport
from ..pipeline._usage import (
    corrected_budget,
    correction_for,
    overflow_or_raise,
    rebuild_after_overflow,
    sample_of,
    usage_key,
)
from ..tokens._correction import WINDOW, Correction, UsageSample

if TYPE_CHECKING:
    from ._conversations import Conversations

__all__ = ["USAGE_PREFIX", "UsageKeeper"]

# the receipts "conversation" under which a tenant's usage samples are kept
USAGE_PREFIX = "~usage/"
_KEEP = 2 * WINDOW
_LAST_BUILDS = 4096


class UsageKeeper:
    """The usage samples of one `Conversations`, its builds' corrections, overflow rebuilds."""

    def __init__(self, conversations: Conversations, *, refresh: float = 2.0) -> None:
        self.c = conversations
        self.refresh = refresh
        self._cache: dict[str, tuple[Correction, float]] = {}
        self._last: OrderedDict[tuple[str, str], int] = OrderedDict()

    @property
    def key(self) -> str:
        return usage_key(self.c.engine)

    @property
    def _exact(self) -> bool:
        return bool(getattr(self.c.engine.counter, "exact", False))

    async def correction(self, tenant: str) -> Correction:
        """The correction of ``tenant``'s next build (read again after ``refresh`` seconds)."""
        receipts = self.c.backend.receipts
        if receipts is None:
            return self.c.engine.usage.correction(self.key, exact=self._exact)
        now = time.monotonic()
        held = self._cache.get(tenant)
        if held is not None and now - held[1] < self.refresh and held[0].key == self.key:
            return held[0]
        rows = await receipts.receipts(USAGE_PREFIX + self.key, tenant=tenant, limit=_KEEP)
        samples = [s for r in rows if (s := UsageSample.from_dict(r.receipt)) is not None]
        found = Correction.of(samples, key=self.key, exact=self._exact, why="store")
        if len(self._cache) >= 1024:
            self._cache.clear()
        self._cache[tenant] = (found, now)
        return found

    async def learn(self, tenant: str, sample: UsageSample) -> Correction:
        """Keep ``sample`` (in the store, else in the engine); the correction it leads to."""
        receipts = self.c.backend.receipts
        if receipts is None:
            self.c.engine.usage.record(self.key, sample)
        else:
            stamped = dataclasses.replace(sample, at=time.time())
            await receipts.record_receipt(
                USAGE_PREFIX + self.key, stamped.to_dict(), tenant=tenant, keep=_KEEP
            )
            self._cache.pop(tenant, None)
        return await self.correction(tenant)

    async def fitted(
        self, tenant: str, budget: Budget | int | None, correction: Correction | float | None
    ) -> tuple[Correction, Budget | int | None]:
        """A build's correction and its budget in the engine's count (for the compactor)."""
        engine = self.c.engine
        corr = (
            correction_for(engine, correction)
            if correction is not None
            else await self.correction(tenant)
        )
        bud = engine._budget(budget, None) if budget is not None else engine.budget
        return corr, (corrected_budget(bud, corr) if bud is not None else budget)

    def remember(self, tenant: str, conversation: str, built: BuiltContext) -> None:
        """The raw count of ``conversation``'s last build, for the usage that comes back."""
        usage = built.report.usage
        key = (tenant, conversation)
        self._last[key] = int(usage["raw"]) if usage else built.report.used
        self._last.move_to_end(key)
        if len(self._last) > _LAST_BUILDS:
            self._last.popitem(last=False)

    async def record_usage(
        self,
        conversation: str,
        usage: Any,
        *,
        tenant: str,
        user: str,
        built: BuiltContext | ContextReport | None = None,
    ) -> Correction:
        """`Conversations.record_usage`."""
        await self.c._tail(conversation, tenant, user)  # the owner's only
        if built is None:
            estimated = self._last.get((tenant, conversation))
            if estimated is None:
                raise InvalidMessageError(
                    "built",
                    f"no build of conversation {conversation!r} in this process to pair the "
                    "usage with: pass built= (the BuiltContext the request was made from)",
                )
            sample = sample_of(estimated, usage)
        else:
            sample = sample_of(built, usage)
        return await self.learn(tenant, sample)

    async def rebuild(
        self,
        conversation: str,
        message: str | Message | None,
        error: object,
        tenant: str,
        user: str,
        budget: Budget | int | None,
        store_message: bool,
        kw: dict[str, Any],
    ) -> BuiltContext:
        """`Conversations.build` with ``retry_after_overflow``: the same request, rebuilt to fit."""
        overflow_or_raise(error)
        if "correction" in kw:
            raise ConfigError("retry_after_overflow takes the stored correction; drop correction=")
        engine = self.c.engine
        bud = engine._budget(budget, None) if budget is not None else engine.budget
        if bud is None:
            raise ConfigError("no budget: pass budget= to build() or to ContextEngine, or a model=")
        history = (await self.c._tail(conversation, tenant, user)).snapshot()[0]
        last = history[-1] if history else None
        again = last is not None and last.role == "user" and _same(message, last)
        current = last if again else message
        if isinstance(message, Message) and last is not None and message.id == last.id:
            current = None if message.role == "tool" else current  # stored: the next step
        calls = 0

        async def build(*, budget: Budget, correction: Correction) -> BuiltContext:
            nonlocal calls
            calls += 1
            keep = calls > 1 and store_message and not again  # the rebuild stores it, once
            return await self.c.build(
                conversation, current, tenant=tenant, user=user, budget=budget,
                store_message=keep, correction=correction, _replace_last=again, **kw,
            )  # fmt: skip

        async def learn(sample: UsageSample) -> None:
            await self.learn(tenant, sample)

        corr = await self.correction(tenant)
        return await rebuild_after_overflow(error, build, corr, bud, learn=learn)


def _same(message: str | Message | None, last: Message) -> bool:
    """Whether ``message`` is the stored ``last`` user message (None: the last one, whatever it is)."""
    if message is None:
        return True
    if isinstance(message, Message):
        return message.id == last.id or (message.role == "user" and message.text == last.text)
    return isinstance(message, str) and message == last.text
