"""The fit stage: one budget shared by the protected zone, the sections and the window.

The protected zone (system prompt, pinned items, P0 blocks, the current message or
agent step) is paid first and never cut; static blocks get the system section's
target share, computed without looking at the history so the cached prefix does
not move as it grows; the other sections share what is left by their target
shares, and a second pass hands what the first left unused to the sections that
were cut. The result is a `Layout` for the assemble stage and the receipt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import BudgetError
from ..budget._budget import Budget, share_out
from ..budget._fit import Candidate, Decision, fit_blocks, render_cost, truncate_block
from ..history._window import (
    WindowMemo,
    WindowResult,
    narrow_window,
    select_window,
)
from ..model._blocks import Block, Priority, render_block
from ..model._messages import Message
from ..sources._base import Source
from ..sources._state import Turn
from ..sources._templates import turn_context
from ..tokens._frame import count_message, message_frame
from ._fetch import Fetched
from ._receipt import BlockReport, ContextReport, Status

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = [
    "Layout",
    "NextStep",
    "candidates",
    "fill_sections",
    "fit_stage",
    "goal_message",
    "probe_window",
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
    goal: Message | None = None
    goal_cost: int = 0
    goal_in: bool = False
    protected: int = 0
    grant: dict[str, int] = field(default_factory=dict)
    protected_by: dict[str, int] = field(default_factory=dict)  # protected tokens per section
    breakpoints: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    step: NextStep | None = None


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
    summary: str | None,
    cands: list[Candidate],
    limit: int,
    bud: Budget,
    t: dict[str, str],
    step: NextStep | None = None,
) -> Layout:
    counter, ov = engine.counter, engine.overhead
    weights = bud.weights()
    pinned = [Candidate(b, "pinned", *render_cost(b, counter)) for b in engine.pinned]
    lay = Layout(
        static_p0=[c for c in cands if c.block.static and c.block.priority <= 0] + pinned,
        tail_p0=[c for c in cands if not c.block.static and c.block.priority <= 0],
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
    lay.summary_full = engine._msg_cost(f"{t['summary.header']}\n{summary}") if summary else 0
    frame = 0 if lay.tail_p0 or not tail_rest else tail_frame
    probe = probe_window(engine, history, rest, turn.namespace)
    demands = {
        "summary": lay.summary_full,
        "retrieved": sum(c.tokens for c in tail_rest) + frame,
        "recent": probe.tokens + (1 if probe.stopped == "budget" else 0),
        "input": lay.goal_cost,
    }
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


def fill_sections(
    engine: ContextEngine,
    lay: Layout,
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
