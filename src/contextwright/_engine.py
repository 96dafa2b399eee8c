"""The pipeline: plan → fetch → fit → assemble → render → receipt (DESIGN.md).

`ContextEngine` holds what is stable across turns (system prompt, pinned items,
sources, counter, cache, budget) and `build` runs the pipeline for one new message:

1. **plan** — each source's trigger says whether it applies, and why;
2. **fetch** — applicable sources run concurrently, each under its deadline; fresh
   cached blocks are served from the cache; a failure or a timeout is recorded
   and the build goes on;
3. **fit** — the protected zone (system prompt, pinned items, P0 blocks, the current
   message) is paid first; the rest is shared among the sections by their target
   shares, with unused share flowing on (`share_out`); blocks are fitted by priority
   (`fit_blocks`), history by the sliding window (`select_window`);
4. **assemble** — static prefix → summary → history → dynamic tail → current
   message → goal restatement, so the prefix stays byte-identical while only the
   history grows, and the current message is always there;
5. **render** — optionally, to a provider's format, validated by its rules.

The final count is taken on the assembled messages themselves; if token merges at
the seams push it over the budget (BPE counts are not strictly additive), the
oldest history unit or the least important block goes until it fits, so the
budget holds by the configured counter without exception.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._blocks import Block, Priority, Section, render_block
from ._budget import Budget, share_out
from ._cache import Cache, MemoryCache
from ._errors import BudgetError, ConfigError, InvalidMessageError, UserError
from ._fit import JOIN, Candidate, Decision, fit_blocks, render_cost, truncate_block
from ._messages import Message
from ._receipt import BlockReport, BuiltContext, ContextReport, SectionReport
from ._tokens import (
    DEFAULT_OVERHEAD,
    CachedCounter,
    MessageOverhead,
    TokenCounter,
    count_message,
    default_counter,
)
from ._window import ShortenCache, WindowResult, select_window
from .sources._base import Source
from .sources._state import ConversationState, Turn
from .sources._templates import templates_for

__all__ = ["ContextEngine"]


@dataclass
class _Fetched:
    source: str
    status: str  # ok | empty | failed | timed_out
    blocks: list[Block]
    reason: str
    cached: bool
    ms: float


def _as_blocks(result: Any, source: Source) -> list[Block]:
    if result is None:
        return []
    items = [result] if isinstance(result, Block) else list(result)
    for b in items:
        if not isinstance(b, Block):
            raise TypeError(f"source {source.name!r} returned {type(b).__name__}, not Block")
    if getattr(source, "static", False):
        items = [b if b.static else b.with_content(b.content, static=True) for b in items]
    return [b for b in items if not b.empty]


class ContextEngine:
    """Builds the context for each model call. Configure once, `build` per message.

    ``counter`` defaults to an exact tiktoken counter for OpenAI ``model`` names when
    the encoding files are installed, else the heuristic. ``budget`` may be a
    `Budget`, an int (input tokens), or None to take the model's window.
    ``max_message_tokens`` shortens longer history messages in the prompt only.
    """

    def __init__(
        self,
        *,
        system_prompt: str = "",
        pinned: Sequence[str | Block] = (),
        sources: Sequence[Source] = (),
        model: str | None = None,
        budget: Budget | int | None = None,
        counter: TokenCounter | None = None,
        cache: Cache | None = None,
        locale: str = "en",
        restate_goal: bool = True,
        goal_chars: int = 200,
        max_message_tokens: int | None = 2000,
        overhead: MessageOverhead = DEFAULT_OVERHEAD,
        clock: Callable[[], float] = time.time,
        templates: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(system_prompt, str):
            raise ConfigError("system_prompt must be a string")
        names = [getattr(s, "name", None) for s in sources]
        for i, (s, n) in enumerate(zip(sources, names, strict=True)):
            if not isinstance(n, str) or not n or not callable(getattr(s, "fetch", None)):
                raise ConfigError(f"sources[{i}] is not a Source (needs a name and async fetch)")
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ConfigError(f"source names must be unique; repeated: {sorted(dupes)}")  # type: ignore[type-var]
        if max_message_tokens is not None and max_message_tokens < 16:
            raise ConfigError("max_message_tokens must be at least 16 (or None)")
        self.system_prompt = system_prompt
        self.pinned = [
            p if isinstance(p, Block) else Block("pinned_instruction", p, Priority.P0, static=True)
            for p in pinned
        ]
        self.sources = list(sources)
        self.model = model
        self.budget = self._budget(budget, model)
        inner = counter or default_counter(model)
        self.counter: TokenCounter = inner if isinstance(inner, CachedCounter) else CachedCounter(inner)
        self.cache: Cache = cache if cache is not None else MemoryCache()
        self.locale = locale
        self.restate_goal = restate_goal
        self.goal_chars = goal_chars
        self.max_message_tokens = max_message_tokens
        self.overhead = overhead
        self.clock = clock
        self.templates = templates
        self._shortened = ShortenCache()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _budget(budget: Budget | int | None, model: str | None) -> Budget | None:
        if budget is None:
            return Budget.for_model(model) if model else None
        if isinstance(budget, Budget):
            return budget
        if isinstance(budget, int) and not isinstance(budget, bool):
            return Budget(total=budget)
        raise ConfigError(f"budget must be a Budget, an int or None, got {type(budget).__name__}")

    # -- public API ----------------------------------------------------------------------

    async def build(
        self,
        message: str | Message,
        *,
        history: Sequence[Message] = (),
        budget: Budget | int | None = None,
        summary: str | None = None,
        tenant: str = "default",
        user: str = "anonymous",
        conversation: str = "default",
        state: ConversationState | None = None,
        locale: str | None = None,
        provider: str | None = None,
    ) -> BuiltContext:
        """Build the context for ``message`` after ``history`` (oldest first).

        Raises `BudgetError` when the protected zone alone exceeds the budget and
        `InvalidMessageError` for a malformed message or history.
        """
        t0 = time.perf_counter()
        bud = self._budget(budget, None) if budget is not None else self.budget
        if bud is None:
            raise ConfigError("no budget: pass budget= to build() or to ContextEngine, or a model=")
        current = self._current(message)
        if not isinstance(history, Sequence) or isinstance(history, (str, bytes)):
            raise InvalidMessageError("history", "must be a sequence of Message")
        for i in (0, len(history) - 1) if history else ():
            if not isinstance(history[i], Message):
                raise InvalidMessageError(f"history[{i}]", f"must be a Message, got {type(history[i]).__name__}")
        now = self.clock()
        loc = locale or self.locale
        turn = Turn(current, history, tenant, user, conversation, state or ConversationState(), now, loc)
        t = templates_for(loc, self.templates)
        limit = bud.input_tokens
        weights = bud.weights()
        report = ContextReport(budget=limit, used=0, counter=self.counter.name, exact=bool(getattr(self.counter, "exact", False)))

        # 1. plan
        applicable: list[tuple[Source, str]] = []
        for s in self.sources:
            trigger = getattr(s, "trigger", None)
            why = trigger(turn) if trigger is not None else "always"
            if why:
                applicable.append((s, why))
            else:
                report.blocks.append(BlockReport(s.name, s.name, "-", int(getattr(s, "priority", 1)), "skipped", reason="trigger did not fire"))
        t1 = time.perf_counter()

        # 2. fetch
        allowance = max(1, int(weights["retrieved"] * limit))
        fetched = await asyncio.gather(*(self._fetch(s, turn, allowance) for s, _ in applicable))
        t2 = time.perf_counter()

        # 3. fit
        built = self._fit_and_assemble(turn, current, history, summary, fetched, applicable, limit, bud, t, report)
        t3 = time.perf_counter()
        report.timings_ms.update(plan=(t1 - t0) * 1e3, fetch=(t2 - t1) * 1e3, fit_assemble=(t3 - t2) * 1e3)
        if provider is not None:
            built.rendered = built.render(provider)
            report.timings_ms["render"] = (time.perf_counter() - t3) * 1e3
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1e3
        return built

    def build_sync(self, message: str | Message, **kw: Any) -> BuiltContext:
        """`build` for code without an event loop (one private loop per engine)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError("build_sync() was called inside a running event loop; use 'await engine.build(...)'")
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(self.build(message, **kw))

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()

    def invalidate(self, *tags: str, namespace: str | None = None) -> int:
        """Drop cached blocks by tag (e.g. ``user_memory:tenant/user``) or namespace."""
        return self.cache.invalidate(tags=tags, namespace=namespace)

    # -- stages ------------------------------------------------------------------------

    @staticmethod
    def _current(message: str | Message) -> Message:
        if isinstance(message, str):
            if not message.strip():
                raise InvalidMessageError("message", "the current user message must not be empty")
            return Message.user(message, created_at=time.time())
        if not isinstance(message, Message):
            raise InvalidMessageError("message", f"must be a string or a Message, got {type(message).__name__}")
        if message.role != "user":
            raise InvalidMessageError("message.role", f"the current message must be a user message, got {message.role!r}")
        return message

    async def _fetch(self, source: Source, turn: Turn, allowance: int) -> _Fetched:
        start = time.perf_counter()
        ttl = float(getattr(source, "ttl", 0.0) or 0.0)
        key = ""
        if ttl > 0:
            key_fn = getattr(source, "cache_key", None)
            key = f"{source.name}:{key_fn(turn) if key_fn else ''}"
            hit = self.cache.get(turn.namespace, key)
            if hit is not None:
                return _Fetched(source.name, "ok" if hit else "empty", list(hit), "served from cache", True, (time.perf_counter() - start) * 1e3)
        deadline = getattr(source, "deadline", 0.5)
        try:
            result = await asyncio.wait_for(source.fetch(turn, allowance), deadline)
            blocks = _as_blocks(result, source)
        except asyncio.TimeoutError:
            return _Fetched(source.name, "timed_out", [], f"no answer within {deadline * 1e3:.0f} ms", False, (time.perf_counter() - start) * 1e3)
        except Exception as exc:  # a source must never break the build
            return _Fetched(source.name, "failed", [], f"{type(exc).__name__}: {exc}", False, (time.perf_counter() - start) * 1e3)
        if ttl > 0:
            tags_fn = getattr(source, "cache_tags", None)
            tags = tags_fn(turn) if tags_fn else getattr(source, "tags", ())
            self.cache.set(turn.namespace, key, tuple(blocks), ttl=ttl, tags=tags)
        status = "ok" if blocks else "empty"
        return _Fetched(source.name, status, blocks, "" if blocks else "nothing to add", False, (time.perf_counter() - start) * 1e3)

    def _msg_cost(self, text: str) -> int:
        return self.overhead.per_message + self.counter.count(text)

    def _fit_and_assemble(
        self,
        turn: Turn,
        current: Message,
        history: Sequence[Message],
        summary: str | None,
        fetched: Sequence[_Fetched],
        applicable: Sequence[tuple[Source, str]],
        limit: int,
        bud: Budget,
        t: dict[str, str],
        report: ContextReport,
    ) -> BuiltContext:
        counter, ov = self.counter, self.overhead
        weights = bud.weights()
        # candidates
        cands: list[Candidate] = []
        for order, (f, (_src, why)) in enumerate(zip(fetched, applicable, strict=True)):
            if f.status != "ok":
                prio = int(getattr(_src, "priority", 1))
                report.blocks.append(BlockReport(f.source, f.source, "-", prio, f.status if f.status != "ok" else "empty", reason=f.reason or why, cached=f.cached, fetch_ms=f.ms))  # type: ignore[arg-type]
                if f.cached:
                    report.cache_hits += 1
                continue
            for b in f.blocks:
                text, cost = render_cost(b, counter)
                cands.append(Candidate(b, f.source, text, cost, f.cached, f.ms, order))
            if getattr(_src, "ttl", 0):
                if f.cached:
                    report.cache_hits += 1
                else:
                    report.cache_misses += 1
        static = [c for c in cands if c.block.static]
        dynamic = [c for c in cands if not c.block.static]
        p0_static = [c for c in static if c.block.priority <= 0] + [
            Candidate(b, "pinned", *render_cost(b, counter)) for b in self.pinned
        ]
        p0_dynamic = [c for c in dynamic if c.block.priority <= 0]

        # protected zone
        sys_head = self.system_prompt
        sys_protected = self._msg_cost(sys_head) + sum(c.tokens for c in p0_static) if (sys_head or p0_static) else 0
        cur_cost = count_message(counter, current, ov)
        tail_frame = self._msg_cost(t["tail.header"]) + 1
        tail_protected = tail_frame + sum(c.tokens for c in p0_dynamic) if p0_dynamic else 0
        protected = ov.reply_priming + sys_protected + cur_cost + tail_protected
        report.protected_tokens = protected
        if protected > limit:
            items = [("system_prompt", self._msg_cost(sys_head) if sys_head else 0), ("current_message", cur_cost)]
            items += [(c.block.name, c.tokens) for c in p0_static + p0_dynamic]
            raise BudgetError(protected, limit, items)
        rest = limit - protected

        # static, non-P0 blocks: their own target share, independent of history so
        # that the cached prefix does not change while the conversation grows
        static_rest = [c for c in static if c.block.priority > 0]
        static_target = max(0, int(weights["system"] * limit) - sys_protected)
        if static_rest and not (sys_head or p0_static):
            static_target -= ov.per_message  # the system message is opened by them
        static_dec, static_used = fit_blocks(static_rest, min(rest, max(0, static_target)), counter)
        if static_used and not (sys_head or p0_static):
            static_used += ov.per_message
        rest -= static_used

        # sections sharing the rest
        dyn_rest = [c for c in dynamic if c.block.priority > 0]
        goal_msg = self._goal(turn, t) if self.restate_goal else None
        goal_cost = count_message(counter, goal_msg, ov) if goal_msg else 0
        summary_msg = Message.system(f"{t['summary.header']}\n{summary}") if summary else None
        summary_cost = count_message(counter, summary_msg, ov) if summary_msg else 0
        retrieved_demand = sum(c.tokens for c in dyn_rest) + (0 if p0_dynamic or not dyn_rest else tail_frame)
        probe = select_window(history, rest, counter, overhead=ov, max_message_tokens=self.max_message_tokens, cache=self._shortened)
        recent_demand = probe.tokens + (1 if probe.stopped == "budget" else 0)
        demands = {"summary": summary_cost, "retrieved": retrieved_demand, "recent": recent_demand, "input": goal_cost}
        grant = share_out(rest, demands, weights)

        def fill(grant: dict[str, int]) -> tuple[dict[str, int], list[Decision], WindowResult, bool, bool, str | None]:
            used = dict.fromkeys(demands, 0)
            summary_text: str | None = None
            if summary_msg is not None:
                if summary_cost <= grant["summary"]:
                    summary_text, used["summary"] = summary_msg.text, summary_cost
                elif grant["summary"] >= 32:
                    cut = truncate_block(Block("summary", summary or "", Priority.P1), grant["summary"] - ov.per_message, counter)
                    if cut is not None:
                        summary_text = f"{t['summary.header']}\n{cut[0]}"
                        used["summary"] = self._msg_cost(summary_text)
            frame = 0 if p0_dynamic or not dyn_rest else tail_frame
            dec, used_r = fit_blocks(dyn_rest, max(0, grant["retrieved"] - frame), counter)
            if used_r:
                used["retrieved"] = used_r + frame
            win = probe if grant["recent"] >= probe.tokens and probe.stopped != "budget" else select_window(
                history, grant["recent"], counter, overhead=ov, max_message_tokens=self.max_message_tokens, cache=self._shortened
            )
            used["recent"] = win.tokens
            goal_ok = goal_msg is not None and goal_cost <= grant["input"]
            used["input"] = goal_cost if goal_ok else 0
            return used, dec, win, goal_ok, summary_text is not None, summary_text

        used, dec, win, goal_ok, _, summary_text = fill(grant)
        leftover = rest - sum(used.values())
        unmet = {k: demands[k] - used[k] for k in demands if demands[k] > used[k]}
        if leftover > 0 and unmet:
            extra = share_out(leftover, unmet, weights)
            grant2 = {k: used[k] + extra.get(k, 0) for k in demands}
            used, dec, win, goal_ok, _, summary_text = fill(grant2)
            grant = grant2

        # 4. assemble
        return self._assemble(
            turn, current, history, limit, bud, t, report, static_dec, p0_static, p0_dynamic,
            dec, win, summary_text, goal_msg if goal_ok else None, goal_cost, grant, used, summary_msg is not None, summary_cost,
        )

    def _goal(self, turn: Turn, t: dict[str, str]) -> Message:
        text = " ".join(turn.query.split())
        if len(text) > self.goal_chars:
            text = text[: self.goal_chars] + "…"
        goal = Block("current_goal", t["goal.text"].format(goal=text), Priority.P1)
        return Message.system(render_block(goal))

    def _assemble(
        self,
        turn: Turn,
        current: Message,
        history: Sequence[Message],
        limit: int,
        bud: Budget,
        t: dict[str, str],
        report: ContextReport,
        static_dec: list[Decision],
        p0_static: list[Candidate],
        p0_dynamic: list[Candidate],
        dec: list[Decision],
        win: WindowResult,
        summary_text: str | None,
        goal_msg: Message | None,
        goal_cost: int,
        grant: dict[str, int],
        used: dict[str, int],
        summary_given: bool,
        summary_full: int,
    ) -> BuiltContext:
        counter, ov = self.counter, self.overhead
        static_in = [d for d in static_dec if d.status != "dropped"]
        dyn_in = [Decision(c, "included", c.text, c.tokens, "P0: always included") for c in p0_dynamic]
        dyn_in += [d for d in dec if d.status != "dropped" and d.candidate.block.priority > 0]
        window = list(win.messages)
        trimmed: list[str] = []

        def compose() -> list[Message]:
            out: list[Message] = []
            sys_parts = [self.system_prompt] if self.system_prompt else []
            sys_parts += [c.text for c in p0_static] + [d.text for d in static_in]
            if sys_parts:
                out.append(Message.system(JOIN.join(sys_parts)))
            if summary_text:
                out.append(Message.system(summary_text))
            out.extend(window)
            if dyn_in:
                out.append(Message.system(JOIN.join([t["tail.header"], *(d.text for d in dyn_in)])))
            out.append(current)
            if goal_msg is not None:
                out.append(goal_msg)
            return out

        messages = compose()
        total = ov.reply_priming + sum(count_message(counter, m, ov) for m in messages)
        # Seams can merge or split tokens; repair until the exact total fits.
        while total > limit:
            droppable = [d for d in dyn_in if d.candidate.block.priority > 0]
            if window:
                k = 1
                while k < len(window) and window[k].role == "tool":
                    k += 1
                trimmed.append(f"dropped {k} oldest history message(s) after the final count")
                del window[:k]
            elif droppable:
                worst = max(droppable, key=lambda d: (d.candidate.block.priority, d.candidate.order))
                dyn_in.remove(worst)
                worst.status, worst.reason = "dropped", "removed after the final count exceeded the budget"
                trimmed.append(f"dropped block {worst.candidate.block.name} after the final count")
            elif goal_msg is not None:
                goal_msg = None
                trimmed.append("dropped the goal restatement after the final count")
            elif summary_text:
                summary_text = None
                trimmed.append("dropped the summary after the final count")
            else:
                raise BudgetError(total, limit, [("assembled", total)])
            messages = compose()
            total = ov.reply_priming + sum(count_message(counter, m, ov) for m in messages)
        report.warnings.extend(trimmed)

        # receipt
        if self.system_prompt:
            report.blocks.insert(0, BlockReport("system_prompt", "engine", "system", 0, "included", self._msg_cost(self.system_prompt), "protected"))
        for c in p0_static:
            report.blocks.append(BlockReport(c.block.name, c.source, "system", c.block.priority, "included", c.tokens, "protected (P0, static)", c.cached, None, c.fetch_ms))
        for d in static_dec + [Decision(c, "included", c.text, c.tokens, "protected (P0)") for c in p0_dynamic] + dec:
            c = d.candidate
            if c.block.priority <= 0 and not c.block.static and d.reason == "P0: always included":
                continue  # reported from the p0_dynamic list
            status = d.status
            report.blocks.append(BlockReport(
                c.block.name, c.source, "system" if c.block.static else "retrieved", c.block.priority,
                status, d.tokens, d.reason, c.cached, c.tokens if status == "truncated" else None, c.fetch_ms,
            ))
        if summary_given:
            s_tokens = self._msg_cost(summary_text) if summary_text else 0
            s_status = "dropped" if not summary_text else ("included" if s_tokens >= summary_full else "truncated")
            s_reason = "no room left" if not summary_text else ("fits" if s_status == "included" else f"cut from {summary_full} tokens")
            report.blocks.append(BlockReport("summary", "summary", "summary", 1, s_status, s_tokens, s_reason, original_tokens=summary_full if s_status == "truncated" else None))  # type: ignore[arg-type]
        report.history_messages = len(window)
        report.history_units = win.units
        report.history_total = len(history)
        report.history_considered = len(history) - win.considered_end
        report.history_shortened = win.shortened
        report.history_stopped = win.stopped
        hist_tokens = sum(count_message(counter, m, ov) for m in window)
        status = "included" if len(window) == len(history) else ("dropped" if not window and history else "truncated")
        reason = f"{len(window)} of {len(history)} messages; window stopped at: {win.stopped}"
        if win.broken:
            reason += f"; skipped {len(win.broken)} broken unit(s): {win.broken[0][1]}"
        if history:
            report.blocks.append(BlockReport("history", "history", "recent", 1, status, hist_tokens, reason))
        report.blocks.append(BlockReport("current_message", "input", "input", 0, "included", count_message(counter, current, ov), "protected: always present"))
        if self.restate_goal:
            report.blocks.append(BlockReport("current_goal", "engine", "input", 1, "included" if goal_msg else "dropped", goal_cost if goal_msg else 0, "instruction pinning" if goal_msg else "no room left"))
        sections: dict[Section, int] = {"system": 0, "summary": 0, "retrieved": 0, "recent": 0, "input": 0}
        weights = bud.weights()
        sys_msgs = messages[0] if messages and messages[0].role == "system" and (self.system_prompt or p0_static or static_in) else None
        sections["system"] = count_message(counter, sys_msgs, ov) if sys_msgs else 0
        sections["summary"] = self._msg_cost(summary_text) if summary_text else 0
        sections["recent"] = hist_tokens
        tail = [m for m in messages[len(messages) - (2 if goal_msg else 1) - (1 if dyn_in else 0):] if m.role == "system" and m is not goal_msg]
        sections["retrieved"] = sum(count_message(counter, m, ov) for m in tail)
        sections["input"] = count_message(counter, current, ov) + (count_message(counter, goal_msg, ov) if goal_msg else 0) + ov.reply_priming
        for name, tokens in sections.items():
            report.sections[name] = SectionReport(round(weights[name], 4), grant.get(name, 0) if name in grant else tokens, tokens)
        report.used = total
        breakpoints = []
        i = 0
        if sys_msgs is not None:
            breakpoints.append(0)
            i = 1
        if summary_text:
            breakpoints.append(i)
            i += 1
        if window:
            breakpoints.append(i + len(window) - 1)
        return BuiltContext(messages, report, tuple(breakpoints))
