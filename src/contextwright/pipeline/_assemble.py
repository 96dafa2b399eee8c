"""The assemble stage and the receipt: cache-stable order, the exact final count, the report.

Static prefix → summary → history → dynamic tail → current message → goal
restatement. The final count is taken on the assembled messages themselves; if
token merges at the seams push it over the budget, the oldest history unit or the
least important block goes until it fits.

Recall is fetched before the window is decided, on an estimate of where it
starts: a recalled turn that the final window holds is left out of its block
first (`leave_out_recalled`), so that no message is in the prompt twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import BudgetError
from ..budget._budget import Budget
from ..budget._fit import JOIN, Candidate, Decision, render_cost, truncate_block
from ..history._packing import RecalledTurns
from ..model._messages import Message
from ..sources._templates import turn_context
from ..tokens._frame import count_message
from ._fit_stage import Layout
from ._receipt import BlockReport, ContextReport, SectionReport, Status
from ._stand_in import compaction_line
from ._thinning import thinning_line

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = ["assemble", "leave_out_recalled", "warn_dropped", "write_receipt"]


def assemble(
    engine: ContextEngine,
    lay: Layout,
    current: Message,
    limit: int,
    t: dict[str, str],
    report: ContextReport,
) -> list[Message]:
    """Put the pieces in cache-stable order; recount exactly and repair if over."""
    counter, ov = engine.counter, engine.overhead
    leave_out_recalled(engine, lay, current, report)
    static_in = [d for d in lay.static_fit if d.status != "dropped"]
    tail_in = [Decision(c, "included", c.text, c.tokens, "protected (P0)") for c in lay.tail_p0]
    tail_in += [d for d in lay.tail_fit if d.status != "dropped"]
    window = list(lay.window.messages)

    at = [0, 0]  # where compose put the window: out[at[0]:at[1]]

    def compose() -> list[Message]:
        out: list[Message] = []
        sys_parts = [engine.system_prompt] if engine.system_prompt else []
        sys_parts += [c.text for c in lay.static_p0] + [d.text for d in static_in]
        lay.breakpoints = []
        if sys_parts:
            out.append(Message.system(JOIN.join(sys_parts)))
            lay.breakpoints.append(len(out) - 1)
        if lay.summary_text:
            out.append(Message.system(lay.summary_text))
            lay.breakpoints.append(len(out) - 1)
        if lay.summary_message is not None:  # a provider's compaction
            out.extend(lay.summary_message)
            lay.breakpoints.append(len(out) - 1)
        at[0] = lay.head = len(out)
        out.extend(window)
        at[1] = len(out)
        if window:
            lay.breakpoints.append(len(out) - 1)
        context: Message | None = None
        if tail_in:
            text = turn_context(t, [d.text for d in tail_in], engine.retrieved_placement)
            # Retrieved and user-derived text is quoted on the user side by
            # default, not given system authority (docs/architecture.md).
            context = (
                Message.system(text)
                if engine.retrieved_placement == "system"
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
    # Only the messages around the window are looked at (a message of the window
    # met again there, by identity, is not counted twice).
    window_tokens = lay.window.tokens
    window_ids = set(map(id, window))

    def total_of(messages: list[Message]) -> int:
        around = messages[: at[0]] + messages[at[1] :]
        others = sum(count_message(counter, m, ov) for m in around if id(m) not in window_ids)
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
            report.warnings.append(f"dropped {k} oldest history message(s) after the final count")
        elif droppable:
            worst = max(droppable, key=lambda d: (d.candidate.block.priority, d.candidate.order))
            tail_in.remove(worst)
            worst.status, worst.text, worst.tokens = "dropped", "", 0
            worst.reason = "removed after the final count exceeded the budget"
            report.warnings.append(
                f"dropped block {worst.candidate.block.name} after the final count"
            )
        elif lay.goal_in:
            lay.goal_in = False
            report.warnings.append("dropped the goal restatement after the final count")
        elif lay.summary_text or lay.summary_message is not None:
            lay.summary_text = lay.summary_message = None
            report.warnings.append("dropped the summary after the final count")
        else:
            raise BudgetError(total, limit, [("assembled", total)])
        messages = compose()
        total = total_of(messages)
    lay.window_messages = window
    lay.window_tokens = window_tokens
    report.used = total
    return messages


def leave_out_recalled(
    engine: ContextEngine, lay: Layout, current: Message, report: ContextReport
) -> None:
    """Take the turns the prompt holds already out of the recalled blocks.

    A block left empty is dropped; the others are rendered and counted again
    (cut again to what they were cut to, if need be). The receipt says so.
    """
    blocks = [c.block for c in lay.tail_p0] + [d.candidate.block for d in lay.tail_fit]
    if not any(isinstance(b, RecalledTurns) for b in blocks):
        return
    shown = {m.seq for m in lay.window.messages if m.seq is not None}
    if lay.step is not None:
        shown.update(m.seq for m in lay.step.messages if m.seq is not None)
    if current.seq is not None:
        shown.add(current.seq)
    if not shown:
        return
    counter = engine.counter
    p0: list[Candidate] = []
    for c in lay.tail_p0:
        b = c.block
        less = b.without(shown) if isinstance(b, RecalledTurns) else b
        if less is b:
            p0.append(c)
        elif less is not None:  # protected: kept whole, counted again
            p0.append(Candidate(less, c.source, *render_cost(less, counter), c.cached,
                                c.fetch_ms, c.order))  # fmt: skip
        else:
            report.blocks.append(BlockReport(
                b.name, c.source, "retrieved", b.priority, "dropped", 0,
                "every recalled turn is in the history window", c.cached, None, c.fetch_ms,
            ))  # fmt: skip
    lay.tail_p0 = p0
    for d in lay.tail_fit:
        b = d.candidate.block
        if d.status == "dropped" or not isinstance(b, RecalledTurns):
            continue
        less = b.without(shown)
        if less is b:
            continue
        gone = len(b.turns) - (len(less.turns) if less is not None else 0)
        why = f"{gone} recalled turn(s) left out: the history window holds them"
        fitted = None
        if less is not None:
            fitted = render_cost(less, counter)
            if fitted[1] <= d.tokens:
                d.status = "included"
            else:  # it was cut: cut it as far again
                fitted = truncate_block(less, d.tokens, counter)
        if fitted is None:
            d.status, d.text, d.tokens, d.reason = "dropped", "", 0, why
        else:
            d.text, d.tokens = fitted
            d.reason = f"{d.reason}; {why}" if d.reason else why


def warn_dropped(
    engine: ContextEngine,
    lay: Layout,
    history: Sequence[Message],
    limit: int,
    report: ContextReport,
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


def write_receipt(
    engine: ContextEngine, lay: Layout, messages: list[Message], history: Sequence[Message], current: Message,
    summary: str | tuple[Message, ...] | None, bud: Budget, report: ContextReport,
) -> None:  # fmt: skip
    counter, ov = engine.counter, engine.overhead
    lines: list[BlockReport] = []
    if engine.system_prompt:
        lines.append(
            BlockReport(
                "system_prompt",
                "engine",
                "system",
                0,
                "included",
                engine._msg_cost(engine.system_prompt),
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
    if isinstance(summary, tuple):
        lines.append(compaction_line(lay.summary_message, summary, lay.summary_full))
    elif summary:
        got = engine._msg_cost(lay.summary_text) if lay.summary_text else 0
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
        lines.append(BlockReport("history", "history", "recent", 1, h_status, hist_tokens, reason))
        thinking = thinning_line(engine, lay.thinned, window) if lay.thinned else None
        lines += [thinking] if thinking else []
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
    if engine.restate_goal:
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
    report.blocks[:0] = lines[:1] if engine.system_prompt else []
    report.blocks.extend(lines[1:] if engine.system_prompt else lines)
    # the prompt cache: this request against the previous build's (`PrefixMemo`)
    report.prefix = engine._prefixes.compare(
        lay.namespace, messages, lay.breakpoints, lay.head, bool(lay.summary_text),
        lay.window_tokens, counter, ov,
    )  # fmt: skip
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
        and (engine.system_prompt or lay.static_p0 or lay.static_fit)
        else 0
    )
    used = {
        "system": count_message(counter, messages[0], ov) if first_sys else 0,
        "summary": engine._msg_cost(lay.summary_text)
        if lay.summary_text
        else lay.summary_full
        if lay.summary_message is not None
        else 0,
        "recent": hist_tokens,
        "input": cur + goal + ov.reply_priming,
    }
    used["retrieved"] = report.used - sum(used.values())
    weights = bud.weights()
    for name in ("system", "summary", "retrieved", "recent", "input"):
        allotted = lay.grant.get(name, 0) + lay.protected_by.get(name, 0)
        report.sections[name] = SectionReport(round(weights[name], 4), allotted, used[name])
