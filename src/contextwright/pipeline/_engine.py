"""The pipeline: plan → fetch → fit → assemble → render → receipt (docs/architecture.md).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import BudgetError, ConfigError, InvalidMessageError, UserError
from ..budget._budget import Budget, share_out
from ..budget._fit import JOIN, Candidate, Decision, fit_blocks, render_cost, truncate_block
from ..history._window import (
    ShortenCache,
    WindowMemo,
    WindowResult,
    narrow_window,
    opener_placeholder,
    select_window,
    shorten_message,
    turn_opener,
)
from ..model._blocks import Block, Priority, render_block
from ..model._messages import Message, check_unicode, iter_units_backwards, unicode_problem
from ..sources._base import Source
from ..sources._state import ConversationState, Turn
from ..sources._templates import Placement, templates_for, turn_context
from ..stores._cache import Cache, MemoryCache
from ..tokens._count import (
    DEFAULT_OVERHEAD,
    CachedCounter,
    MessageOverhead,
    TokenCounter,
    count_key,
    count_message,
    default_counter,
    message_frame,
)
from ._fetch import Fetched, fetch_all
from ._receipt import BlockReport, BuiltContext, ContextReport, SectionReport, Status

__all__ = ["ContextEngine"]


@dataclass
class _NextStep:
    """A build with no new message: the newest tool unit stands in for it (protected).

    ``lead`` is the placeholder of the turn's opening user message, put before the
    unit when the window keeps nothing before it (a request opens with a user turn).
    """

    messages: list[Message]
    cost: int
    lead: Message
    lead_cost: int
    goal: bool  # the turn's opening user message is known: restate it as the goal


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
    step: _NextStep | None = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_text(value: object, label: str, *, empty_ok: bool = True) -> None:
    """A setting that must be a string UTF-8 can encode (and, unless ``empty_ok``, not empty)."""
    if not isinstance(value, str):
        raise ConfigError(f"{label} must be a string, got {type(value).__name__}")
    if not empty_ok and not value:
        raise ConfigError(f"{label} must not be empty")
    if not value.isascii() and (problem := unicode_problem(value)) is not None:
        raise ConfigError(f"{label} {problem}")


def _check_settings(
    *, system_prompt: object, pinned: object, sources: object, model: object, counter: object,
    cache: object, locale: object, restate_goal: object, goal_chars: object,
    max_message_tokens: object, overhead: object, clock: object, templates: object,
    task_status: object,
) -> None:  # fmt: skip
    """`ConfigError` naming the first constructor argument of `ContextEngine` that is wrong."""
    _check_text(system_prompt, "system_prompt")
    if isinstance(pinned, (str, bytes)) or not isinstance(pinned, Sequence):
        raise ConfigError(f"pinned must be a sequence of strings or Blocks, got {pinned!r}")
    for i, p in enumerate(pinned):
        if not isinstance(p, Block):
            _check_text(p, f"pinned[{i}]")
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Sequence):
        raise ConfigError(f"sources must be a sequence of Source, got {type(sources).__name__}")
    if model is not None:
        _check_text(model, "model", empty_ok=False)
    if counter is not None and not callable(getattr(counter, "count", None)):
        raise ConfigError(f"counter must be a TokenCounter, got {type(counter).__name__}")
    if cache is not None and not all(
        callable(getattr(cache, m, None)) for m in ("get", "set", "invalidate")
    ):
        raise ConfigError(f"cache must be a Cache, got {type(cache).__name__}")
    _check_text(locale, "locale", empty_ok=False)
    if not isinstance(restate_goal, bool):
        raise ConfigError(f"restate_goal must be a bool, got {restate_goal!r}")
    if not _is_int(goal_chars) or goal_chars < 1:  # type: ignore[operator]
        raise ConfigError(f"goal_chars must be a positive integer, got {goal_chars!r}")
    if max_message_tokens is not None and (
        not _is_int(max_message_tokens) or max_message_tokens < 16  # type: ignore[operator]
    ):
        raise ConfigError(
            f"max_message_tokens must be an integer of at least 16 (or None), got "
            f"{max_message_tokens!r}"
        )
    if not isinstance(overhead, (MessageOverhead, str)):
        raise ConfigError(
            f"overhead must be a MessageOverhead or a provider name, got {type(overhead).__name__}"
        )
    if not callable(clock):
        raise ConfigError("clock must be a callable returning seconds since the epoch")
    if templates is not None:
        if not isinstance(templates, Mapping):
            raise ConfigError(f"templates must be a mapping of strings, got {templates!r}")
        for key, text in templates.items():
            _check_text(text, f"templates[{key!r}]")
    if task_status is not None and not callable(task_status):
        raise ConfigError("task_status must be a callable (or None)")


class ContextEngine:
    """Builds the context for each model call. Configure once, `build` per message.

    ``counter`` defaults to an exact tiktoken counter for OpenAI ``model`` names when
    the encoding files are installed, else the heuristic. ``budget`` may be a
    `Budget`, an int (input tokens), or None to take the model's window.
    ``max_message_tokens`` shortens longer history messages in the prompt only.
    ``task_status`` returns the active task's status for a turn (e.g.
    ``ActiveTaskTracker.status_summary``); it is restated with the goal at the end.

    ``retrieved_placement`` says where the per-turn blocks (memories, knowledge,
    recalled turns, state: text that comes from users, tools and documents) go.
    ``"user"`` (the default) quotes them in a ``<context>`` user message just
    before the current one (its metadata is ``{"contextwright": "turn_context"}``;
    Anthropic rendering merges it into the current user turn), so that a line
    such as "SYSTEM: ignore previous instructions" inside a memory never reaches
    the model with system authority. ``"system"`` is the earlier placement, in a
    system message after the history. The system prompt, pinned items and static
    blocks, written by the developer, stay in the system prefix either way.

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
        retrieved_placement: Placement = "user",
    ) -> None:
        if retrieved_placement not in ("user", "system"):
            raise ConfigError(
                f"retrieved_placement must be 'user' or 'system', got {retrieved_placement!r}"
            )
        _check_settings(
            system_prompt=system_prompt, pinned=pinned, sources=sources, model=model,
            counter=counter, cache=cache, locale=locale, restate_goal=restate_goal,
            goal_chars=goal_chars, max_message_tokens=max_message_tokens, overhead=overhead,
            clock=clock, templates=templates, task_status=task_status,
        )  # fmt: skip
        names = [getattr(s, "name", None) for s in sources]
        for i, (s, n) in enumerate(zip(sources, names, strict=True)):
            if not isinstance(n, str) or not n or not callable(getattr(s, "fetch", None)):
                raise ConfigError(f"sources[{i}] is not a Source (needs a name and async fetch)")
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ConfigError(f"source names must be unique; repeated: {sorted(dupes)}")  # type: ignore[type-var]
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
        # the label of this engine's message counts (message caches, stored counts)
        self.count_key = count_key(self.counter, self.overhead)
        self.clock = clock
        self.templates = templates
        self.task_status = task_status
        self.retrieved_placement: Placement = retrieved_placement
        self._shortened = ShortenCache()
        # one remembered window walk per conversation (namespace), the most recent 256
        self._memos: OrderedDict[str, WindowMemo] = OrderedDict()
        self._memo_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        # per conversation: (length, last message, user messages) of the last history scanned
        self._scans: OrderedDict[tuple[str, str, str], tuple[int, Message, int]] = OrderedDict()
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
        message: str | Message | None,
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

        With ``message`` None the build is an agent's next step: ``history`` must end
        with the results of a tool call, and that newest tool unit is protected as
        the current message is (a tool-role ``message`` is appended to ``history``
        first). The goal restated is then the turn's opening user message.

        ``extra_sources`` join the engine's sources for this build only (the stateful
        mode adds its recall source this way). ``user_turns`` is the number of user
        messages before this one, if the caller
        knows it; otherwise it is counted, incrementally across builds of a growing
        history. Raises `BudgetError` when the protected zone alone exceeds the budget
        and `InvalidMessageError` for a malformed message or history.
        """
        t0 = time.perf_counter()
        current, bud = self._precheck(
            message, budget, tenant=tenant, user=user, conversation=conversation
        )
        step: _NextStep | None = None
        if current is None:  # the agent's next step, after its tool results
            history, step, current = self._next_step(
                message if isinstance(message, Message) else None, history
            )
        if not isinstance(history, Sequence) or isinstance(history, (str, bytes)):
            raise InvalidMessageError("history", "must be a sequence of Message")
        counted = self._scan_history(history, (tenant, user, conversation))
        if summary is not None:
            if not isinstance(summary, str):
                raise InvalidMessageError("summary", "must be a string or None")
            check_unicode(summary, "summary")
        now = self.clock()
        loc = locale or self.locale
        turns = counted if user_turns is None else user_turns
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
        lay = self._fit(turn, history, summary, cands, limit, bud, t, step)
        t3 = time.perf_counter()
        # 4. assemble
        messages = self._assemble(lay, current, limit, t, report)
        self._receipt(lay, messages, history, current, summary, bud, report)
        self._warn_dropped(lay, history, limit, report)
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

    def _precheck(
        self,
        message: str | Message | None,
        budget: Budget | int | None,
        *,
        tenant: str,
        user: str,
        conversation: str,
    ) -> tuple[Message | None, Budget]:
        """The current message and the budget of a build, or the error the build would raise.

        The message is None for the agent's next step (``message`` None or a tool
        result); `_next_step` checks that against the history.

        Everything about a call that can be checked without fetching: the stateful
        mode calls this before it writes anything, so a rejected call leaves no trace.
        """
        bud = self._budget(budget, None) if budget is not None else self.budget
        if bud is None:
            raise ConfigError("no budget: pass budget= to build() or to ContextEngine, or a model=")
        for label, value in (("tenant", tenant), ("user", user), ("conversation", conversation)):
            _check_text(value, label, empty_ok=False)
        if message is None or (isinstance(message, Message) and message.role == "tool"):
            return None, bud
        return self._current(message), bud

    def _scan_history(self, history: Sequence[Message], key: tuple[str, str, str]) -> int:
        """Check that every item of ``history`` is a `Message`; the user messages among them.

        Per conversation (``key``) the scan is remembered with the last message it
        saw; when the next history holds that same message object at the same
        position (a history that grows by appending), only the messages after it
        are checked and counted, so a growing conversation costs O(new messages)
        per build.
        """
        n = len(history)
        with self._memo_lock:
            seen = self._scans.get(key)
            if seen is not None:
                self._scans.move_to_end(key)
        start = count = 0
        if seen is not None:
            seen_n, seen_last, seen_count = seen
            if 0 < seen_n <= n and history[seen_n - 1] is seen_last:
                start, count = seen_n, seen_count
        for i in range(start, n):
            m = history[i]
            if not isinstance(m, Message):
                raise InvalidMessageError(
                    f"history[{i}]", f"must be a Message, got {type(m).__name__}"
                )
            if m.role == "user":
                count += 1
        with self._memo_lock:
            if n:
                self._scans[key] = (n, history[n - 1], count)
                if len(self._scans) > 256:
                    self._scans.popitem(last=False)
            else:
                self._scans.pop(key, None)
        return count

    def build_sync(self, message: str | Message | None, **kw: Any) -> BuiltContext:
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
        """Drop cached blocks by tag or namespace; returns how many.

        ``user_memory_tag(tenant, user)`` is the tag of a user's memory block;
        ``cache_namespace(tenant, user, conversation)`` a conversation's namespace.
        """
        return self.cache.invalidate(tags=tags, namespace=namespace)

    # -- stages ------------------------------------------------------------------------

    def _next_step(
        self, message: Message | None, history: Sequence[Message]
    ) -> tuple[Sequence[Message], _NextStep, Message]:
        """Split ``history`` (with a tool-role ``message`` appended) into the window's
        part and the newest tool unit; also the turn's message for the sources."""
        if not isinstance(history, Sequence) or isinstance(history, (str, bytes)):
            raise InvalidMessageError("history", "must be a sequence of Message")
        if message is not None:
            history = [*history, message]
        try:
            unit = next(iter_units_backwards(history), None) if history else None
            last = history[-1].role if history else None
        except AttributeError:
            raise InvalidMessageError("history", "must be a sequence of Message") from None
        if unit is None or last != "tool" or unit.kind != "tool_call":
            why = {"incomplete_call": " (some are missing)", "orphan_result": " (no call)"}
            raise InvalidMessageError(
                "message" if message is None else "message.role",
                "a build without a new user message needs a history that ends with the "
                "results of every call of its last assistant turn"
                + (why.get(unit.kind, "") if unit is not None else ""),
            )
        counter, ov, limit = self.counter, self.overhead, self.max_message_tokens
        msgs: list[Message] = []
        for m in history[unit.start :]:
            if limit is not None and count_message(counter, m, ov) > limit:
                m = shorten_message(m, limit, counter, ov, self._shortened)
            msgs.append(m)
        cost = sum(count_message(counter, m, ov) for m in msgs)
        u = turn_opener(history, unit.start)
        opener = history[u] if u is not None else None
        lead = opener_placeholder(opener, counter, ov, self._shortened)
        step = _NextStep(msgs, cost, lead, count_message(counter, lead, ov), opener is not None)
        seq = history if isinstance(history, (list, tuple)) else list(history)
        before = seq[: unit.start]
        return before, step, opener if opener is not None else history[-1]

    @staticmethod
    def _current(message: str | Message) -> Message:
        if isinstance(message, str):
            if not message.strip():
                raise InvalidMessageError("message", "the current user message must not be empty")
            if not message.isascii():
                check_unicode(message, "message")
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
        step: _NextStep | None = None,
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
        lay.step = step
        cur_cost = step.cost + step.lead_cost if step else count_message(counter, turn.message, ov)
        tail_frame = self._msg_cost(turn_context(t, (), self.retrieved_placement)) + 1
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
            items += [("current_step" if step else "current_message", cur_cost)]
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
        restate = self.restate_goal and (step is None or step.goal)
        lay.goal = self._goal(turn, t, lay.warnings) if restate else None
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
        """The instruction-pinning message: the goal, restated at the end (design-notes)."""
        text = " ".join(turn.query.split())
        if len(text) > self.goal_chars:
            text = text[: self.goal_chars] + "…"
        body = t["goal.text"].format(goal=text)
        if self.task_status is not None:
            # the active task's status rides with the goal (design-notes, Instruction pinning)
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
            context: Message | None = None
            if tail_in:
                text = turn_context(t, [d.text for d in tail_in], self.retrieved_placement)
                # Retrieved and user-derived text is quoted on the user side by
                # default, not given system authority (docs/architecture.md).
                context = (
                    Message.system(text)
                    if self.retrieved_placement == "system"
                    else Message.user(text, metadata={"contextwright": "turn_context"})
                )
            if lay.step is None:
                if context is not None:
                    out.append(context)
                out.append(current)
            else:
                if not window:  # a request opens with a user turn
                    out.append(lay.step.lead)
                out.extend(lay.step.messages)
                if context is not None:  # after the tool results it goes with
                    out.append(context)
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
                # the opener stays while a unit of its turn follows it
                first = 1 if window[0] is lay.window.opener and len(window) > 1 else 0
                k = first + 1
                while k < len(window) and window[k].role == "tool":
                    k += 1
                window_tokens -= sum(count_message(counter, m, ov) for m in window[first:k])
                del window[first:k]
                if first and window[1:] and window[1].role == "user":
                    window_tokens -= count_message(counter, window[0], ov)
                    del window[0]  # the next turn opens itself
                k -= first
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

    def _warn_dropped(
        self, lay: _Layout, history: Sequence[Message], limit: int, report: ContextReport
    ) -> None:
        """Warn when history was left out although the budget had room for more of it."""
        win = lay.window
        left = limit - report.used
        dropped = len(history) - report.history_messages
        if dropped <= 0 or win.next_cost is None or left < win.next_cost:
            return
        report.warnings.append(
            f"history: {dropped} older message(s) left out while {left} tokens of the "
            f"budget were unused (the next older unit needs {win.next_cost}; "
            f"window stopped at: {win.stopped})"
        )

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
        opener = win.opener
        placeholder = bool(window) and window[0] is opener and not win.opener_verbatim
        kept = len(window) - placeholder
        if history:
            h_status: Status = (
                "included" if kept == len(history) else "truncated" if kept else "dropped"
            )
            reason = f"{kept} of {len(history)} messages; window stopped at: {win.stopped}"
            if placeholder:
                reason += "; the turn's opening message is a placeholder"
            if win.broken:
                reason += f"; skipped {len(win.broken)} broken unit(s): {win.broken[0][1]}"
            lines.append(
                BlockReport("history", "history", "recent", 1, h_status, hist_tokens, reason)
            )
        if lay.step is None:
            cur = count_message(counter, current, ov)
            lines.append(
                BlockReport(
                    "current_message",
                    "input",
                    "input",
                    0,
                    "included",
                    cur,
                    "protected: always present",
                )
            )
        else:
            lead = lay.step.lead_cost if not window else 0
            cur = lay.step.cost + lead
            lines.append(BlockReport(
                "current_step", "input", "input", 0, "included", cur,
                f"protected: the newest tool step ({len(lay.step.messages)} messages)"
                + (", after a placeholder of its turn's opening message" if lead else ""),
            ))  # fmt: skip
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
        report.history_messages = kept
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
