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
import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ConfigError, InvalidMessageError, UserError
from .._trace import Tracer
from .._trace import current as current_tracer
from ..budget._budget import Budget
from ..history._shorten import ShortenCache
from ..history._window import WindowMemo
from ..model._blocks import Block, Priority
from ..model._checks import check_unicode
from ..model._messages import Message
from ..sources._base import Source
from ..sources._state import ConversationState, Turn
from ..sources._templates import Placement, templates_for
from ..stores._cache import Cache, cache_namespace, open_cache
from ..tokens._correction import Correction, UsageFeedback
from ..tokens._count import CachedCounter, TokenCounter
from ..tokens._exact import default_counter
from ..tokens._frame import DEFAULT_OVERHEAD, MessageOverhead, count_key, message_frame
from ._assemble import assemble, warn_dropped, write_receipt
from ._fetch import fetch_all
from ._fit_stage import NextStep, candidates, fit_stage, hint_start, split_next_step, window_hint
from ._prefix import PrefixMemo
from ._receipt import BlockReport, BuiltContext, ContextReport
from ._scan import scan_history
from ._settings import check_settings, check_text
from ._stand_in import stand_in
from ._tracing import traced_build
from ._usage import corrected_budget, correction_for, learn_usage, rebuild_for, write_usage

__all__ = ["ContextEngine"]


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

    ``cache`` is the block cache: a `Cache` (a `MemoryCache` by default) or a
    ``redis://`` URL for the shared `RedisCache` (the ``redis`` extra). While its
    server is away builds go on uncached and the receipt says so
    (``cache_unavailable``).

    ``overhead`` is the request format's framing counted around each message: by
    default the most any supported provider adds, so a build fits its budget
    whichever provider it is rendered for; ``"openai"``, ``"responses"`` or
    ``"anthropic"`` (or a `MessageOverhead`) fits one provider's format exactly.

    ``usage`` (a `UsageFeedback`) holds what `record_usage` learnt from providers'
    reported usage, in process; builds fit their budget by the corrected count
    (`Conversations` keeps the samples in its store instead, shared by workers).

    ``tracer`` (an attribute, None by default) gives this engine's builds a tracer
    of their own (`contextwright._trace.Tracer`, e.g. an OpenTelemetry one from
    `contextwright.integrations.otel`) instead of the process-wide one.
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
        cache: Cache | str | None = None,
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
        check_settings(
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
        self.cache: Cache = open_cache(cache)
        self._owns_cache = isinstance(cache, str)
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
        self._prefixes = PrefixMemo()  # the previous requests (the receipt's ``prefix``)
        self._loop: asyncio.AbstractEventLoop | None = None
        # per conversation: (length, last message, user messages) of the last history scanned
        self._scans: OrderedDict[tuple[str, str, str], tuple[int, Message, int, int]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        # spans and metrics of this engine's builds (None: the process-wide tracer,
        # `contextwright.integrations.otel.instrument`)
        self.tracer: Tracer | None = None
        self.usage = UsageFeedback()

    def drop_caches(self) -> None:
        """Forget the per-conversation accelerators (window walks, history scans, shortened
        copies, previous requests); the next build recomputes them and builds the same context.

        The block cache (``cache``) is left alone: what it holds is governed by its
        TTLs and `invalidate`, not an accelerator.
        """
        with self._memo_lock:
            self._memos.clear()
            self._scans.clear()
        self._prefixes.clear()
        self._shortened = ShortenCache(self._shortened.maxsize)

    def forget(self, *, tenant: str, user: str, conversation: str) -> None:
        """Forget what is held of one conversation (it was deleted): its window walk and
        history scan, and the blocks cached in its namespace (`invalidate`)."""
        namespace = cache_namespace(tenant, user, conversation)
        with self._memo_lock:
            self._memos.pop(namespace, None)
            self._scans.pop((tenant, user, conversation), None)
        self._prefixes.forget(namespace)
        self.invalidate(namespace=namespace)

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
        correction: Correction | float | None = None,
        retry_after_overflow: object = None,
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

        ``correction`` is the factor (or `Correction`) the count is corrected by
        (default: what `record_usage` learnt); ``retry_after_overflow`` a provider's
        context-length error for this same request: the build is made again with the
        budget cut to what the error says (`pipeline._usage`; others are re-raised).
        """
        if retry_after_overflow is not None:
            again = functools.partial(
                self.build, message, history=history, summary=summary, tenant=tenant, user=user,
                conversation=conversation, state=state, locale=locale, provider=provider,
                user_turns=user_turns, extra_sources=extra_sources,
            )  # fmt: skip
            return await rebuild_for(self, retry_after_overflow, again, budget, correction)
        tracer = self.tracer if self.tracer is not None else current_tracer()
        run = functools.partial(
            self._build, tracer, message, history, budget, summary, tenant, user, conversation,
            state, locale, provider, user_turns, extra_sources, correction,
        )  # fmt: skip
        return await traced_build(
            self, tracer, run, conversation=conversation, tenant=tenant, provider=provider
        )

    async def _build(
        self, tracer: Tracer, message: str | Message | None, history: Sequence[Message],
        budget: Budget | int | None, summary: str | None, tenant: str, user: str,
        conversation: str, state: ConversationState | None, locale: str | None,
        provider: str | None, user_turns: int | None, extra_sources: Sequence[Source],
        correction: Correction | float | None,
    ) -> BuiltContext:  # fmt: skip
        """`build`'s stages, each in a span of ``tracer`` (children of its build span)."""
        t0 = time.perf_counter()
        with tracer.span("contextwright.build.plan") as span:
            current, bud = self._precheck(
                message, budget, tenant=tenant, user=user, conversation=conversation
            )
            corr = correction_for(self, correction)
            provider_budget, bud = bud.input_tokens, corrected_budget(bud, corr)
            step: NextStep | None = None
            if current is None:  # the agent's next step, after its tool results
                history, step, current = self._next_step(
                    message if isinstance(message, Message) else None, history
                )
            if not isinstance(history, Sequence) or isinstance(history, (str, bytes)):
                raise InvalidMessageError("history", "must be a sequence of Message")
            counted, comp = self._scan_history(history, (tenant, user, conversation))
            if summary is not None:
                if not isinstance(summary, str):
                    raise InvalidMessageError("summary", "must be a string or None")
                check_unicode(summary, "summary")
            now = self.clock()
            loc = locale or self.locale
            turns = counted if user_turns is None else user_turns
            limit = bud.input_tokens
            # The window is walked before the fetch, so that recall knows where it starts.
            namespace = cache_namespace(tenant, user, conversation)
            history, stand, stood = stand_in(history, summary, provider, comp)
            hint = window_hint(self, current, history, stand, limit, bud, step, namespace)
            turn = Turn(
                current, history, tenant, user, conversation, state or ConversationState(), now,
                loc, turns, None if hint is None else lambda: hint_start(hint, history),
            )  # fmt: skip
            t = templates_for(loc, self.templates)
            weights = bud.weights()
            report = ContextReport(
                budget=limit,
                used=0,
                counter=self.counter.name,
                exact=bool(getattr(self.counter, "exact", False)),
                blocks=stood,
            )

            # 1. plan: which sources apply
            applicable: list[tuple[Source, str]] = []
            for s in [*self.sources, *extra_sources]:
                trigger = getattr(s, "trigger", None)
                why = trigger(turn) if trigger is not None else "always"
                if why:
                    applicable.append((s, why))
                else:
                    report.blocks.append(
                        BlockReport(s.name, s.name, "-", int(getattr(s, "priority", 1)),
                                    "skipped", reason="trigger did not fire")
                    )  # fmt: skip
            if span.recording:
                span.update({"contextwright.sources.applicable": len(applicable)})
        t1 = time.perf_counter()

        # 2. fetch
        allowance = max(1, int(weights["retrieved"] * limit))
        with tracer.span("contextwright.build.fetch") as span:
            fetched = await fetch_all(
                [s for s, _ in applicable], turn, allowance, self.cache, tracer
            )
            if span.recording:
                hits = [f.source for f in fetched if f.cached]
                span.set("contextwright.sources.fetched", len(fetched) - len(hits))
                if hits:
                    span.set("contextwright.sources.cached", hits)
        if applicable and (down := getattr(self.cache, "unavailable", None)):
            report.cache_unavailable = str(down)
            report.warnings.append(f"shared cache unavailable, blocks fetched afresh: {down}")
        t2 = time.perf_counter()

        # 3. fit
        with tracer.span("contextwright.build.fit"):
            cands = candidates(self, fetched, applicable, report)
            lay = fit_stage(self, turn, history, stand, cands, limit, bud, t, step, hint)
        t3 = time.perf_counter()
        # 4. assemble
        with tracer.span("contextwright.build.assemble") as span:
            messages = assemble(self, lay, current, limit, t, report)
            write_receipt(self, lay, messages, history, current, stand, bud, report)
            warn_dropped(self, lay, history, limit, report)
            write_usage(report, corr, provider_budget)
            span.set("contextwright.messages", len(messages))
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
            with tracer.span("contextwright.build.render", {"contextwright.provider": provider}):
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
            check_text(value, label, empty_ok=False)
        if message is None or (isinstance(message, Message) and message.role == "tool"):
            return None, bud
        return self._current(message), bud

    def _scan_history(
        self, history: Sequence[Message], key: tuple[str, str, str]
    ) -> tuple[int, int]:
        """The user messages of ``history`` and its newest compaction (`_scan.scan_history`)."""
        return scan_history(self, history, key)

    def record_usage(self, built: BuiltContext | ContextReport | int, usage: Any) -> Correction:
        """Learn from a provider's reported ``usage`` (its usage object, a dict, or the
        response) for the request of ``built`` (or the engine's count of it), in
        process; returns the correction the next builds are fitted with."""
        return learn_usage(self, built, usage)

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
        if self._owns_cache:  # opened from a URL here: its connections are ours to close
            getattr(self.cache, "close", lambda: None)()

    def invalidate(self, *tags: str, namespace: str | None = None) -> int:
        """Drop cached blocks by tag or namespace; returns how many.

        ``user_memory_tag(tenant, user)`` is the tag of a user's memory block;
        ``cache_namespace(tenant, user, conversation)`` a conversation's namespace.
        """
        return self.cache.invalidate(tags=tags, namespace=namespace)

    # -- stages ------------------------------------------------------------------------

    def _next_step(
        self, message: Message | None, history: Sequence[Message]
    ) -> tuple[Sequence[Message], NextStep, Message]:
        """Split ``history`` (with a tool-role ``message`` appended) into the window's
        part and the newest tool unit; also the turn's message (`split_next_step`)."""
        return split_next_step(self, message, history)

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
