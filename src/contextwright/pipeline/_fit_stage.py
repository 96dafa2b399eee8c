"""The fit stage: one budget shared by the protected zone, the sections and the window.

The protected zone (system prompt, pinned items, P0 blocks, the current message or
agent step) is paid first and never cut; static blocks get the system section's
target share, computed without looking at the history so the cached prefix does
not move as it grows; the other sections share what is left by their target
shares, and a second pass hands what the first left unused to the sections that
were cut. The result is a `Layout` for the assemble stage and the receipt.

The sources are fetched before the window is decided, yet recall must know
where it will start (older turns are recall's, newer ones the window's).
`window_hint` walks the window once before the fetch, over what the protected
zone certainly leaves, and estimates its start from the least the recent
section can be granted; the fit stage then narrows that same walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import BudgetError, InvalidMessageError
from ..budget._budget import Budget, share_out
from ..budget._fit import Candidate, Decision, fit_blocks, render_cost, truncate_block
from ..history._shorten import opener_placeholder, shorten_message, turn_opener
from ..history._window import (
    WindowMemo,
    WindowResult,
    narrow_window,
    select_window,
)
from ..model._blocks import Block, Priority, render_block
from ..model._messages import Message
from ..model._units import iter_units_backwards
from ..sources._base import Source
from ..sources._state import Turn
from ..sources._templates import turn_context
from ..tokens._frame import count_message, message_frame
from ._fetch import Fetched
from ._receipt import BlockReport, ContextReport, Status
from ._thinning import ThinnedHistory, thin_history

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = [
    "Layout",
    "NextStep",
    "WindowHint",
    "candidates",
    "fill_sections",
    "fit_stage",
    "goal_message",
    "hint_start",
    "probe_window",
    "split_next_step",
    "window_hint",
]


@dataclass
class NextStep:
    """A build with no new message: the newest tool unit stands in for it (protected).

    ``lead`` is the placeholder of the turn's opening user message, put before the
    unit when the window keeps nothing before it (a request opens with a user turn).
    """

    messages: list[Message]
    cost: int
    lead: Message
    lead_cost: int
    goal: bool  # the turn's opening user message is known: restate it as the goal


@dataclass(frozen=True, slots=True)
class WindowHint:
    """The window walked before the fetch (``probe``, over ``allowance`` tokens), and
    the least the recent section can be granted (``least``, see `hint_start`)."""

    probe: WindowResult
    allowance: int
    least: int


@dataclass
class Layout:
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
    # a provider's compaction standing in for the summary (`_stand_in`), when it fits
    summary_message: tuple[Message, ...] | None = None
    goal: Message | None = None
    goal_cost: int = 0
    goal_in: bool = False
    protected: int = 0
    grant: dict[str, int] = field(default_factory=dict)
    protected_by: dict[str, int] = field(default_factory=dict)  # protected tokens per section
    breakpoints: list[int] = field(default_factory=list)
    head: int = 0  # messages before the window (system, summary), set when assembled
    namespace: str = ""  # the conversation's (the cache namespace)
    warnings: list[str] = field(default_factory=list)
    step: NextStep | None = None
    thinned: ThinnedHistory | None = None  # the history walked without older thinking


def candidates(
    engine: ContextEngine,
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
            text, cost = render_cost(b, engine.counter)
            cands.append(Candidate(b, f.source, text, cost, f.cached, f.ms, order))
    return cands


def fit_stage(
    engine: ContextEngine,
    turn: Turn,
    history: Sequence[Message],
    summary: str | tuple[Message, ...] | None,
    cands: list[Candidate],
    limit: int,
    bud: Budget,
    t: dict[str, str],
    step: NextStep | None = None,
    hint: WindowHint | None = None,
) -> Layout:
    counter, ov = engine.counter, engine.overhead
    weights = bud.weights()
    pinned = [Candidate(b, "pinned", *render_cost(b, counter)) for b in engine.pinned]
    lay = Layout(
        static_p0=[c for c in cands if c.block.static and c.block.priority <= 0] + pinned,
        tail_p0=[c for c in cands if not c.block.static and c.block.priority <= 0],
        namespace=turn.namespace,
    )
    static_rest = [c for c in cands if c.block.static and c.block.priority > 0]
    tail_rest = [c for c in cands if not c.block.static and c.block.priority > 0]

    # The protected zone is paid first and never cut.
    has_sys = bool(engine.system_prompt or lay.static_p0)
    sys_cost = (
        (engine._msg_cost(engine.system_prompt) + sum(c.tokens for c in lay.static_p0))
        if has_sys
        else 0
    )
    lay.step = step
    cur_cost = step.cost + step.lead_cost if step else count_message(counter, turn.message, ov)
    tail_frame = engine._msg_cost(turn_context(t, (), engine.retrieved_placement)) + 1
    tail_cost = tail_frame + sum(c.tokens for c in lay.tail_p0) if lay.tail_p0 else 0
    lay.protected = ov.reply_priming + sys_cost + cur_cost + tail_cost
    lay.protected_by = {
        "system": sys_cost,
        "retrieved": tail_cost,
        "input": cur_cost + ov.reply_priming,
    }
    if lay.protected > limit:
        items = [
            ("system_prompt", engine._msg_cost(engine.system_prompt) if engine.system_prompt else 0)
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
    restate = engine.restate_goal and (step is None or step.goal)
    lay.goal = goal_message(engine, turn, t, lay.warnings) if restate else None
    lay.goal_cost = count_message(counter, lay.goal, ov) if lay.goal else 0
    if isinstance(summary, tuple):  # a provider's compaction: sent whole or not at all
        lay.summary_full = sum(count_message(counter, m, ov) for m in summary)
    else:
        lay.summary_full = engine._msg_cost(f"{t['summary.header']}\n{summary}") if summary else 0
    frame = 0 if lay.tail_p0 or not tail_rest else tail_frame
    if hint is not None and rest == hint.allowance:  # the walk before the fetch
        probe = hint.probe
    elif hint is not None and rest < hint.allowance:
        probe = narrow_window(
            hint.probe, rest, history, engine.counter, overhead=engine.overhead,
            max_message_tokens=engine.max_message_tokens, cache=engine._shortened,
        )  # fmt: skip
    else:
        probe = probe_window(engine, history, rest, turn.namespace)
    demands = {
        "summary": lay.summary_full,
        "retrieved": sum(c.tokens for c in tail_rest) + frame,
        "recent": probe.tokens + (1 if probe.stopped == "budget" else 0),
        "input": lay.goal_cost,
    }
    grant = share_out(rest, demands, weights)
    # The window would be cut: older thinking goes before any turn does.
    cut = probe.stopped == "budget" or grant["recent"] < demands["recent"]
    lay.thinned = thin_history(engine, history, probe, step is not None) if cut else None
    if lay.thinned is not None:
        history = lay.thinned
        probe = probe_window(engine, history, rest, turn.namespace + "\x00thinned")
        demands["recent"] = probe.tokens + (1 if probe.stopped == "budget" else 0)
        grant = share_out(rest, demands, weights)
    used_by = fill_sections(engine, lay, grant, history, summary, tail_rest, frame, probe, t)
    # A second pass hands what the first left unused to the sections that were cut.
    leftover = rest - sum(used_by.values())
    unmet = {k: demands[k] - used_by[k] for k in demands if demands[k] > used_by[k]}
    if leftover > 0 and unmet:
        extra = share_out(leftover, unmet, weights)
        grant = {k: used_by[k] + extra.get(k, 0) for k in demands}
        fill_sections(engine, lay, grant, history, summary, tail_rest, frame, probe, t)
    lay.grant = grant
    return lay


def probe_window(
    engine: ContextEngine, history: Sequence[Message], allowance: int, namespace: str
) -> WindowResult:
    with engine._memo_lock:
        memo = engine._memos.get(namespace)
        if memo is None:
            memo = engine._memos[namespace] = WindowMemo()
            if len(engine._memos) > 256:
                engine._memos.popitem(last=False)
        else:
            engine._memos.move_to_end(namespace)
    return select_window(
        history, allowance, engine.counter, overhead=engine.overhead,
        max_message_tokens=engine.max_message_tokens, cache=engine._shortened, memo=memo,
    )  # fmt: skip


def window_hint(
    engine: ContextEngine,
    current: Message,
    history: Sequence[Message],
    summary: str | tuple[Message, ...] | None,
    limit: int,
    bud: Budget,
    step: NextStep | None,
    namespace: str,
) -> WindowHint | None:
    """Walk the window before the fetch, and estimate where it will start.

    The walk covers what the known part of the protected zone leaves (system
    prompt, pinned blocks, the current message or step): no more than the fit
    stage can give the window, so it narrows this walk instead of walking again.
    The start is that of the window the recent section gets at the least: its
    share of what the static blocks may leave, with every other section that can
    claim a share claiming it. The final window starts there or earlier (it
    gets what the others leave); a recalled turn it holds is dropped when the
    context is assembled.
    """
    counter, ov = engine.counter, engine.overhead
    pinned = sum(render_cost(b, counter)[1] for b in engine.pinned)
    has_sys = bool(engine.system_prompt or engine.pinned)
    sys_cost = engine._msg_cost(engine.system_prompt) + pinned if has_sys else 0
    cur = step.cost + step.lead_cost if step else count_message(counter, current, ov)
    allowance = limit - ov.reply_priming - sys_cost - cur
    if allowance <= 0 or not history:
        return None
    probe = probe_window(engine, history, allowance, namespace)
    weights = bud.weights()
    opener = 0 if has_sys else message_frame(counter, "system", ov)
    static = max(0, int(weights["system"] * limit) - sys_cost - opener) + opener
    restate = engine.restate_goal and (step is None or step.goal)
    claims = weights["recent"] + weights["retrieved"]
    claims += (weights["summary"] if summary else 0.0) + (weights["input"] if restate else 0.0)
    least = int(max(0, allowance - static) * weights["recent"] / claims) if claims > 0 else 0
    return WindowHint(probe, allowance, least)


def hint_start(hint: WindowHint, history: Sequence[Message]) -> int | None:
    """The sequence number the window starts at at the least, or None.

    The newest units of the walk that fit in ``hint.least`` tokens, less one (the
    window may have to give one up for its opening user message), counted off
    the walk without building that window; past the newest message if none.
    """
    taken, keep, left = hint.probe.taken, 0, hint.least
    while keep < len(taken) and taken[keep].cost <= left:
        left -= taken[keep].cost
        keep += 1
    if keep < len(taken) or hint.probe.stopped == "budget":
        keep -= 1  # the window is cut: it may give up a unit to open with a user message
    start = taken[keep - 1].unit.start if keep > 0 else len(history)
    for i in range(start, len(history)):
        if history[i].seq is not None:
            return history[i].seq
    last = history[-1].seq if history and start >= len(history) else None
    return None if last is None else last + 1


def fill_sections(
    engine: ContextEngine,
    lay: Layout,
    grant: dict[str, int],
    history: Sequence[Message],
    summary: str | tuple[Message, ...] | None,
    tail_rest: list[Candidate],
    frame: int,
    probe: WindowResult,
    t: dict[str, str],
) -> dict[str, int]:
    """Fill each section within its grant; returns what each used."""
    used = dict.fromkeys(grant, 0)
    lay.summary_text = lay.summary_message = None
    if isinstance(summary, tuple):
        if lay.summary_full <= grant["summary"]:
            lay.summary_message = summary
            used["summary"] = lay.summary_full
    elif summary:
        if lay.summary_full <= grant["summary"]:
            lay.summary_text = f"{t['summary.header']}\n{summary}"
        elif grant["summary"] >= 32:  # below that a summary says nothing useful
            block = Block("summary", summary, Priority.P1)
            cut = truncate_block(
                block,
                grant["summary"] - message_frame(engine.counter, "system", engine.overhead),
                engine.counter,
            )
            if cut is not None:
                lay.summary_text = f"{t['summary.header']}\n{cut[0]}"
        if lay.summary_text:
            used["summary"] = engine._msg_cost(lay.summary_text)
    lay.tail_fit, used_r = fit_blocks(tail_rest, max(0, grant["retrieved"] - frame), engine.counter)
    used["retrieved"] = used_r + frame if used_r else 0
    lay.window = narrow_window(
        probe, grant["recent"], history, engine.counter, overhead=engine.overhead,
        max_message_tokens=engine.max_message_tokens, cache=engine._shortened,
    )  # fmt: skip
    used["recent"] = lay.window.tokens
    lay.goal_in = lay.goal is not None and lay.goal_cost <= grant["input"]
    used["input"] = lay.goal_cost if lay.goal_in else 0
    return used


def goal_message(
    engine: ContextEngine, turn: Turn, t: dict[str, str], warnings: list[str]
) -> Message:
    """The instruction-pinning message: the goal, restated at the end (design-notes)."""
    text = " ".join(turn.query.split())
    if len(text) > engine.goal_chars:
        text = text[: engine.goal_chars] + "…"
    body = t["goal.text"].format(goal=text)
    if engine.task_status is not None:
        # the active task's status rides with the goal (design-notes, Instruction pinning)
        try:
            status = engine.task_status(turn)
        except Exception as exc:  # a broken hook must not break the build
            status = ""
            warnings.append(f"task_status failed: {type(exc).__name__}: {exc}")
        if status:
            body = f"{body}\n\n{status}"
    goal = Block("current_goal", body, Priority.P1)
    return Message.system(render_block(goal))


def split_next_step(
    engine: ContextEngine, message: Message | None, history: Sequence[Message]
) -> tuple[Sequence[Message], NextStep, Message]:
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
    counter, ov, limit = engine.counter, engine.overhead, engine.max_message_tokens
    msgs: list[Message] = []
    for m in history[unit.start :]:
        if limit is not None and count_message(counter, m, ov) > limit:
            m = shorten_message(m, limit, counter, ov, engine._shortened)
        msgs.append(m)
    cost = sum(count_message(counter, m, ov) for m in msgs)
    u = turn_opener(history, unit.start)
    opener = history[u] if u is not None else None
    lead = opener_placeholder(opener, counter, ov, engine._shortened)
    step = NextStep(msgs, cost, lead, count_message(counter, lead, ov), opener is not None)
    seq = history if isinstance(history, (list, tuple)) else list(history)
    before = seq[: unit.start]
    return before, step, opener if opener is not None else history[-1]
