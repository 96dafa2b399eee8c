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
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._blocks import Block, Priority, render_block
from ._budget import Budget, share_out
from ._cache import Cache, MemoryCache
from ._errors import BudgetError, ConfigError, InvalidMessageError, UserError
from ._fetch import Fetched, fetch_all
from ._fit import JOIN, Candidate, Decision, fit_blocks, render_cost, truncate_block
from ._messages import Message
from ._receipt import BlockReport, BuiltContext, ContextReport, SectionReport, Status
from ._tokens import (
    DEFAULT_OVERHEAD,
    CachedCounter,
    MessageOverhead,
    TokenCounter,
    count_key,
    count_message,
    default_counter,
    message_frame,
)
from ._window import ShortenCache, WindowMemo, WindowResult, narrow_window, select_window
from .sources._base import Source
from .sources._state import ConversationState, Turn
from .sources._templates import templates_for

__all__ = ["ContextEngine"]


@dataclass
class _Layout:
    """What the fit stage decided, for the assemble stage and the receipt."""

    static_p0: list[Candidate] = field(default_factory=list)  # pinned + P0 static blocks
    tail_p0: list[Candidate] = field(default_factory=list)  # P0 per-turn blocks
    static_fit: list[Decision] = field(default_factory=list)
    tail_fit: list[Decision] = field(default_factory=list)
    window: WindowResult = field(default_factory=WindowResult)
    window_messages: list[Message] = field(default_factory=list)
    window_tokens: int = 0
    summary_text: str | None = None
    summary_full: int = 0
    goal: Message | None = None
    goal_cost: int = 0
    goal_in: bool = False
    protected: int = 0
    grant: dict[str, int] = field(default_factory=dict)
    protected_by: dict[str, int] = field(default_factory=dict)  # protected tokens per section
    breakpoints: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class ContextEngine:
    """Builds the context for each model call. Configure once, `build` per message.

    ``counter`` defaults to an exact tiktoken counter for OpenAI ``model`` names when
    the encoding files are installed, else the heuristic. ``budget`` may be a
    `Budget`, an int (input tokens), or None to take the model's window.
    ``max_message_tokens`` shortens longer history messages in the prompt only.
    ``task_status`` returns the active task's status for a turn (e.g.
    ``ActiveTaskTracker.status_summary``); it is restated with the goal at the end.
    ``overhead`` is the request format's framing counted around each message: by
    default the most any supported provider adds, so a build fits its budget
    whichever provider it is rendered for; ``"openai"``, ``"responses"`` or
    ``"anthropic"`` (or a `MessageOverhead`) fits one provider's format exactly.
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
        overhead: MessageOverhead | str = DEFAULT_OVERHEAD,
        clock: Callable[[], float] = time.time,
        templates: dict[str, str] | None = None,
        task_status: Callable[[Turn], str] | None = None,
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
        self.counter: TokenCounter = (
            inner if isinstance(inner, CachedCounter) else CachedCounter(inner)
        )
        self.cache: Cache = cache if cache is not None else MemoryCache()
        self.locale = locale
        self.restate_goal = restate_goal
        self.goal_chars = goal_chars
        self.max_message_tokens = max_message_tokens
        self.overhead = (
            MessageOverhead.for_provider(overhead) if isinstance(overhead, str) else overhead
        )
        if not isinstance(self.overhead, MessageOverhead):
            raise ConfigError(
                "overhead must be a MessageOverhead or a provider name, "
                f"got {type(overhead).__name__}"
            )
        # the label of this engine's message counts (message caches, stored counts)
        self.count_key = count_key(self.counter, self.overhead)
        self.clock = clock
        self.templates = templates
        self.task_status = task_status
        self._shortened = ShortenCache()
        # one remembered window walk per conversation (namespace), the most recent 256
        self._memos: OrderedDict[str, WindowMemo] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._turn_count: tuple[int, Message, int] | None = None
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
        user_turns: int | None = None,
        extra_sources: Sequence[Source] = (),
    ) -> BuiltContext:
        """Build the context for ``message`` after ``history`` (oldest first).

        ``extra_sources`` join the engine's sources for this build only (the stateful
        mode adds its recall source this way). ``user_turns`` is the number of user
        messages before this one, if the caller
        knows it; otherwise it is counted, incrementally across builds of a growing
        history. Raises `BudgetError` when the protected zone alone exceeds the budget
        and `InvalidMessageError` for a malformed message or history.
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
                raise InvalidMessageError(
                    f"history[{i}]", f"must be a Message, got {type(history[i]).__name__}"
                )
        now = self.clock()
        loc = locale or self.locale
        turns = self._user_turns(history) if user_turns is None else user_turns
        turn = Turn(
            current,
            history,
            tenant,
            user,
            conversation,
            state or ConversationState(),
            now,
            loc,
            turns,
        )
        t = templates_for(loc, self.templates)
        limit = bud.input_tokens
        weights = bud.weights()
        report = ContextReport(
            budget=limit,
            used=0,
            counter=self.counter.name,
            exact=bool(getattr(self.counter, "exact", False)),
        )

        # 1. plan
        applicable: list[tuple[Source, str]] = []
        for s in [*self.sources, *extra_sources]:
            trigger = getattr(s, "trigger", None)
            why = trigger(turn) if trigger is not None else "always"
            if why:
                applicable.append((s, why))
            else:
                report.blocks.append(
                    BlockReport(
                        s.name,
                        s.name,
                        "-",
                        int(getattr(s, "priority", 1)),
                        "skipped",
                        reason="trigger did not fire",
                    )
                )
        t1 = time.perf_counter()

        # 2. fetch
        allowance = max(1, int(weights["retrieved"] * limit))
        fetched = await fetch_all([s for s, _ in applicable], turn, allowance, self.cache)
        t2 = time.perf_counter()

        # 3. fit
        cands = self._candidates(fetched, applicable, report)
        lay = self._fit(turn, history, summary, cands, limit, bud, t)
        t3 = time.perf_counter()
        # 4. assemble
        messages = self._assemble(lay, current, limit, t, report)
        self._receipt(lay, messages, history, current, summary, bud, report)
        built = BuiltContext(messages, report, tuple(lay.breakpoints))
        t4 = time.perf_counter()
        ms = report.timings_ms
        ms.update(
            plan=(t1 - t0) * 1e3,
            fetch=(t2 - t1) * 1e3,
            fit=(t3 - t2) * 1e3,
            assemble=(t4 - t3) * 1e3,
        )
        if provider is not None:
            built.rendered = built.render(provider)
            ms["render"] = (time.perf_counter() - t4) * 1e3
            if not self.overhead.covers(provider):
                report.warnings.append(
                    f"the message overhead counted is another provider's: {provider!r} may "
                    "receive more tokens than 'used' (keep the default overhead, or pass "
                    f"overhead={provider!r})"
                )
        report.timings_ms["total"] = (time.perf_counter() - t0) * 1e3
        return built

    def _user_turns(self, history: Sequence[Message]) -> int:
        """User messages in ``history``, counting only what is new since the last build.

        The count is kept with the last message it saw; when the next history holds
        that same message object at the same position, only the messages after it
        are counted, so a growing conversation costs O(new messages) per build.
        """
        n = len(history)
        seen = self._turn_count
        if seen is not None:
            seen_n, seen_last, count = seen
            if 0 < seen_n <= n and history[seen_n - 1] is seen_last:
                count += sum(1 for i in range(seen_n, n) if history[i].role == "user")
                self._turn_count = (n, history[n - 1], count)
                return count
        count = sum(1 for m in history if m.role == "user")
        self._turn_count = (n, history[n - 1], count) if n else None
        return count

    def build_sync(self, message: str | Message, **kw: Any) -> BuiltContext:
        """`build` for code without an event loop (one private loop per engine)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError(
                "build_sync() was called inside a running event loop; use 'await engine.build(...)'"
            )
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
            raise InvalidMessageError(
                "message", f"must be a string or a Message, got {type(message).__name__}"
            )
        if message.role != "user":
            raise InvalidMessageError(
                "message.role", f"the current message must be a user message, got {message.role!r}"
            )
        return message

    def _msg_cost(self, text: str) -> int:
        """A system message of ``text``: the text and its framing."""
        return message_frame(self.counter, "system", self.overhead) + self.counter.count(text)

    def _candidates(
        self,
        fetched: Sequence[Fetched],
        applicable: Sequence[tuple[Source, str]],
        report: ContextReport,
    ) -> list[Candidate]:
        """Render and count every fetched block; report the sources that gave none."""
        cands: list[Candidate] = []
        for order, (f, (src, why)) in enumerate(zip(fetched, applicable, strict=True)):
            if getattr(src, "ttl", 0):
                if f.cached:
                    report.cache_hits += 1
                else:
                    report.cache_misses += 1
            if f.status != "ok":
                prio = int(getattr(src, "priority", 1))
                status: Status = "empty" if f.status == "empty" else f.status  # type: ignore[assignment]
                report.blocks.append(
                    BlockReport(
                        f.source,
                        f.source,
                        "-",
                        prio,
                        status,
                        0,
                        f.reason or why,
                        f.cached,
                        None,
                        f.ms,
                    )
                )
                continue
            for b in f.blocks:
                text, cost = render_cost(b, self.counter)
                cands.append(Candidate(b, f.source, text, cost, f.cached, f.ms, order))
        return cands

    def _fit(
        self,
        turn: Turn,
        history: Sequence[Message],
        summary: str | None,
        cands: list[Candidate],
        limit: int,
        bud: Budget,
        t: dict[str, str],
    ) -> _Layout:
        counter, ov = self.counter, self.overhead
        weights = bud.weights()
        pinned = [Candidate(b, "pinned", *render_cost(b, counter)) for b in self.pinned]
        lay = _Layout(
            static_p0=[c for c in cands if c.block.static and c.block.priority <= 0] + pinned,
            tail_p0=[c for c in cands if not c.block.static and c.block.priority <= 0],
        )
        static_rest = [c for c in cands if c.block.static and c.block.priority > 0]
        tail_rest = [c for c in cands if not c.block.static and c.block.priority > 0]

        # The protected zone is paid first and never cut.
        has_sys = bool(self.system_prompt or lay.static_p0)
        sys_cost = (
            (self._msg_cost(self.system_prompt) + sum(c.tokens for c in lay.static_p0))
            if has_sys
            else 0
        )
        cur_cost = count_message(counter, turn.message, ov)
        tail_frame = self._msg_cost(t["tail.header"]) + 1
        tail_cost = tail_frame + sum(c.tokens for c in lay.tail_p0) if lay.tail_p0 else 0
        lay.protected = ov.reply_priming + sys_cost + cur_cost + tail_cost
        lay.protected_by = {
            "system": sys_cost,
            "retrieved": tail_cost,
            "input": cur_cost + ov.reply_priming,
        }
        if lay.protected > limit:
            items = [
                ("system_prompt", self._msg_cost(self.system_prompt) if self.system_prompt else 0)
            ]
            items += [("current_message", cur_cost)]
            items += [(c.block.name, c.tokens) for c in lay.static_p0 + lay.tail_p0]
            raise BudgetError(lay.protected, limit, items)
        rest = limit - lay.protected

        # Static blocks get the system section's target share, computed without
        # looking at the history, so the cached prefix cannot change as it grows.
        # they would open the system message
        opener = 0 if has_sys else message_frame(counter, "system", ov)
        target = max(0, int(weights["system"] * limit) - sys_cost - opener)
        lay.static_fit, used = fit_blocks(static_rest, min(rest - opener, target), counter)
        rest -= used + (opener if used else 0)

        # The other sections share what is left by their target shares.
        lay.goal = self._goal(turn, t, lay.warnings) if self.restate_goal else None
        lay.goal_cost = count_message(counter, lay.goal, ov) if lay.goal else 0
        lay.summary_full = self._msg_cost(f"{t['summary.header']}\n{summary}") if summary else 0
        frame = 0 if lay.tail_p0 or not tail_rest else tail_frame
        probe = self._window(history, rest, turn.namespace)
        demands = {
            "summary": lay.summary_full,
            "retrieved": sum(c.tokens for c in tail_rest) + frame,
            "recent": probe.tokens + (1 if probe.stopped == "budget" else 0),
            "input": lay.goal_cost,
        }
        grant = share_out(rest, demands, weights)
        used_by = self._fill(lay, grant, history, summary, tail_rest, frame, probe, t)
        # A second pass hands what the first left unused to the sections that were cut.
        leftover = rest - sum(used_by.values())
        unmet = {k: demands[k] - used_by[k] for k in demands if demands[k] > used_by[k]}
        if leftover > 0 and unmet:
            extra = share_out(leftover, unmet, weights)
            grant = {k: used_by[k] + extra.get(k, 0) for k in demands}
            self._fill(lay, grant, history, summary, tail_rest, frame, probe, t)
        lay.grant = grant
        return lay

    def _window(self, history: Sequence[Message], allowance: int, namespace: str) -> WindowResult:
        with self._memo_lock:
            memo = self._memos.get(namespace)
            if memo is None:
                memo = self._memos[namespace] = WindowMemo()
                if len(self._memos) > 256:
                    self._memos.popitem(last=False)
            else:
                self._memos.move_to_end(namespace)
        return select_window(
            history, allowance, self.counter, overhead=self.overhead,
            max_message_tokens=self.max_message_tokens, cache=self._shortened, memo=memo,
        )  # fmt: skip

    def _fill(
        self,
        lay: _Layout,
        grant: dict[str, int],
        history: Sequence[Message],
        summary: str | None,
        tail_rest: list[Candidate],
        frame: int,
        probe: WindowResult,
        t: dict[str, str],
    ) -> dict[str, int]:
        """Fill each section within its grant; returns what each used."""
        used = dict.fromkeys(grant, 0)
        lay.summary_text = None
        if summary:
            if lay.summary_full <= grant["summary"]:
                lay.summary_text = f"{t['summary.header']}\n{summary}"
            elif grant["summary"] >= 32:  # below that a summary says nothing useful
                block = Block("summary", summary, Priority.P1)
                cut = truncate_block(
                    block,
                    grant["summary"] - message_frame(self.counter, "system", self.overhead),
                    self.counter,
                )
                if cut is not None:
                    lay.summary_text = f"{t['summary.header']}\n{cut[0]}"
            if lay.summary_text:
                used["summary"] = self._msg_cost(lay.summary_text)
        lay.tail_fit, used_r = fit_blocks(
            tail_rest, max(0, grant["retrieved"] - frame), self.counter
        )
        used["retrieved"] = used_r + frame if used_r else 0
        lay.window = narrow_window(
            probe, grant["recent"], history, self.counter, overhead=self.overhead,
            max_message_tokens=self.max_message_tokens, cache=self._shortened,
        )  # fmt: skip
        used["recent"] = lay.window.tokens
        lay.goal_in = lay.goal is not None and lay.goal_cost <= grant["input"]
        used["input"] = lay.goal_cost if lay.goal_in else 0
        return used

    def _goal(self, turn: Turn, t: dict[str, str], warnings: list[str]) -> Message:
        """The instruction-pinning message (seed 001 §6): the goal, restated at the end."""
        text = " ".join(turn.query.split())
        if len(text) > self.goal_chars:
            text = text[: self.goal_chars] + "…"
        body = t["goal.text"].format(goal=text)
        if self.task_status is not None:
            # seed 001 §6 / seed 002 #7: the active task's status rides with the goal
            try:
                status = self.task_status(turn)
            except Exception as exc:  # a broken hook must not break the build
                status = ""
                warnings.append(f"task_status failed: {type(exc).__name__}: {exc}")
            if status:
                body = f"{body}\n\n{status}"
        goal = Block("current_goal", body, Priority.P1)
        return Message.system(render_block(goal))

    def _assemble(
        self, lay: _Layout, current: Message, limit: int, t: dict[str, str], report: ContextReport
    ) -> list[Message]:
        """Put the pieces in cache-stable order; recount exactly and repair if over."""
        counter, ov = self.counter, self.overhead
        static_in = [d for d in lay.static_fit if d.status != "dropped"]
        tail_in = [Decision(c, "included", c.text, c.tokens, "protected (P0)") for c in lay.tail_p0]
        tail_in += [d for d in lay.tail_fit if d.status != "dropped"]
        window = list(lay.window.messages)

        def compose() -> list[Message]:
            out: list[Message] = []
            sys_parts = [self.system_prompt] if self.system_prompt else []
            sys_parts += [c.text for c in lay.static_p0] + [d.text for d in static_in]
            lay.breakpoints = []
            if sys_parts:
                out.append(Message.system(JOIN.join(sys_parts)))
                lay.breakpoints.append(len(out) - 1)
            if lay.summary_text:
                out.append(Message.system(lay.summary_text))
                lay.breakpoints.append(len(out) - 1)
            out.extend(window)
            if window:
                lay.breakpoints.append(len(out) - 1)
            if tail_in:
                out.append(
                    Message.system(JOIN.join([t["tail.header"], *(d.text for d in tail_in)]))
                )
            out.append(current)
            if lay.goal_in and lay.goal is not None:
                out.append(lay.goal)
            return out

        # The window's messages are counted already (and cached); only the few
        # composed messages around them need a count.
        window_tokens = lay.window.tokens
        window_ids = {id(m) for m in window}

        def total_of(messages: list[Message]) -> int:
            others = sum(count_message(counter, m, ov) for m in messages if id(m) not in window_ids)
            return ov.reply_priming + window_tokens + others

        messages = compose()
        total = total_of(messages)
        # Token merges at the seams can differ from the sum of the parts: repair
        # until the exact total fits, least valuable first.
        while total > limit:
            droppable = [d for d in tail_in if d.candidate.block.priority > 0]
            if window:
                k = 1
                while k < len(window) and window[k].role == "tool":
                    k += 1
                window_tokens -= sum(count_message(counter, m, ov) for m in window[:k])
                del window[:k]
                report.warnings.append(
                    f"dropped {k} oldest history message(s) after the final count"
                )
            elif droppable:
                worst = max(
                    droppable, key=lambda d: (d.candidate.block.priority, d.candidate.order)
                )
                tail_in.remove(worst)
                worst.status, worst.text, worst.tokens = "dropped", "", 0
                worst.reason = "removed after the final count exceeded the budget"
                report.warnings.append(
                    f"dropped block {worst.candidate.block.name} after the final count"
                )
            elif lay.goal_in:
                lay.goal_in = False
                report.warnings.append("dropped the goal restatement after the final count")
            elif lay.summary_text:
                lay.summary_text = None
                report.warnings.append("dropped the summary after the final count")
            else:
                raise BudgetError(total, limit, [("assembled", total)])
            messages = compose()
            total = total_of(messages)
        lay.window_messages = window
        lay.window_tokens = window_tokens
        report.used = total
        return messages

    def _receipt(
        self, lay: _Layout, messages: list[Message], history: Sequence[Message], current: Message,
        summary: str | None, bud: Budget, report: ContextReport,
    ) -> None:  # fmt: skip
        counter, ov = self.counter, self.overhead
        lines: list[BlockReport] = []
        if self.system_prompt:
            lines.append(
                BlockReport(
                    "system_prompt",
                    "engine",
                    "system",
                    0,
                    "included",
                    self._msg_cost(self.system_prompt),
                    "protected",
                )
            )
        for c in lay.static_p0:
            lines.append(
                BlockReport(
                    c.block.name,
                    c.source,
                    "system",
                    c.block.priority,
                    "included",
                    c.tokens,
                    "protected (P0, static)",
                    c.cached,
                    None,
                    c.fetch_ms,
                )
            )
        if summary:
            got = self._msg_cost(lay.summary_text) if lay.summary_text else 0
            status: Status = (
                "dropped"
                if not lay.summary_text
                else "included"
                if got >= lay.summary_full
                else "truncated"
            )
            why = {
                "dropped": "no room left",
                "included": "fits",
                "truncated": f"cut from {lay.summary_full} tokens",
            }[status]
            lines.append(
                BlockReport(
                    "summary",
                    "summary",
                    "summary",
                    1,
                    status,
                    got,
                    why,
                    False,
                    lay.summary_full if status == "truncated" else None,
                )
            )
        for d in (
            lay.static_fit
            + [Decision(c, "included", c.text, c.tokens, "protected (P0)") for c in lay.tail_p0]
            + lay.tail_fit
        ):
            c = d.candidate
            lines.append(BlockReport(
                c.block.name, c.source, "system" if c.block.static else "retrieved", c.block.priority,
                d.status, d.tokens, d.reason, c.cached, c.tokens if d.status == "truncated" else None, c.fetch_ms,
            ))  # fmt: skip
        window, win = lay.window_messages, lay.window
        hist_tokens = lay.window_tokens
        if history:
            h_status: Status = (
                "included" if len(window) == len(history) else "truncated" if window else "dropped"
            )
            reason = f"{len(window)} of {len(history)} messages; window stopped at: {win.stopped}"
            if win.broken:
                reason += f"; skipped {len(win.broken)} broken unit(s): {win.broken[0][1]}"
            lines.append(
                BlockReport("history", "history", "recent", 1, h_status, hist_tokens, reason)
            )
        cur = count_message(counter, current, ov)
        lines.append(
            BlockReport(
                "current_message", "input", "input", 0, "included", cur, "protected: always present"
            )
        )
        goal = count_message(counter, lay.goal, ov) if lay.goal is not None and lay.goal_in else 0
        if self.restate_goal:
            lines.append(
                BlockReport(
                    "current_goal",
                    "engine",
                    "input",
                    1,
                    "included" if goal else "dropped",
                    goal,
                    "instruction pinning" if goal else "no room left",
                )
            )
        report.blocks[:0] = lines[:1] if self.system_prompt else []
        report.blocks.extend(lines[1:] if self.system_prompt else lines)
        report.protected_tokens = lay.protected
        report.warnings.extend(lay.warnings)
        report.history_messages = len(window)
        report.history_units = win.units
        report.history_total = len(history)
        report.history_considered = len(history) - win.considered_end
        report.history_shortened = win.shortened
        report.history_stopped = win.stopped
        # per-section tokens, read off the assembled messages
        first_sys = (
            1
            if lay.breakpoints
            and messages[0].role == "system"
            and (self.system_prompt or lay.static_p0 or lay.static_fit)
            else 0
        )
        used = {
            "system": count_message(counter, messages[0], ov) if first_sys else 0,
            "summary": self._msg_cost(lay.summary_text) if lay.summary_text else 0,
            "recent": hist_tokens,
            "input": cur + goal + ov.reply_priming,
        }
        used["retrieved"] = report.used - sum(used.values())
        weights = bud.weights()
        for name in ("system", "summary", "retrieved", "recent", "input"):
            allotted = lay.grant.get(name, 0) + lay.protected_by.get(name, 0)
            report.sections[name] = SectionReport(round(weights[name], 4), allotted, used[name])
