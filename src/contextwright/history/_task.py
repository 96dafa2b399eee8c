"""The active task: what the user is trying to get done, what has been done, what was found.

An active-task tracker follows the current goal, records the completed steps and the
findings, and renders a status summary for the prompt; that status goes
(docs/design-notes.md, Instruction pinning and the active task) at the very end of the
context, after the restated goal ("instruction pinning"), where
recency bias keeps it from being washed out by long tool output in the middle.

`ActiveTaskTracker` keeps one `ActiveTask` per (tenant, conversation), in memory and
thread-safe, bounded (LRU over ``max_tasks`` conversations). It learns from the
messages it is shown (`observe`):

* a **user** message states the goal. A new request or question replaces it (and
  starts a fresh task: steps and findings belong to the goal they served); a short
  acknowledgement ("ok", "thanks", "好的", "谢谢") changes nothing; a follow-up ("and
  also…", "另外…", "还有…") is appended to the goal;
* an **assistant** message's tool calls are steps ("called search(q='tokio')"), and its
  prose gives findings: up to two sentences that state a result (numbers, "found",
  "is", "结果", "共"…), never questions or "let me check";
* a **tool** message completes the step of its call ("… → returned 12 items", "… →
  error: timeout"), so a call and its result stay one line, as they stay one unit in
  the window.

A message is observed once (by id), so the same history can be shown again without
double counting. `status_summary` renders the task in English or Chinese within
``summary_chars`` characters, dropping the oldest steps and findings first.

Two ways into the prompt, both catching up from the turn's history first:
``ContextEngine(task_status=tracker.status_for_turn)`` restates the status with the
goal at the very end (instruction pinning), and `ActiveTaskSource` renders it as an
``active_task`` block (P1) in the dynamic tail.

What a message's text says (acknowledgement, follow-up, a tool's outcome, a
finding) is read by the helpers in `_task_read`; this module holds the task, the
tracker and the source.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._errors import ConfigError
from ..model._blocks import Block, Priority
from ..model._messages import Message
from ..model._parts import TextPart
from ..sources._base import FetchResult, SourceBase, Trigger
from ..sources._state import Turn
from ._task_read import _ACK, _CJK, _FOLLOW_UP, _arguments, _clip, _findings, _outcome

__all__ = ["ActiveTask", "ActiveTaskSource", "ActiveTaskTracker", "TaskStatus", "TaskStep"]

TaskStatus = Literal["active", "done"]

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "status": "Task status: {status}", "active": "ACTIVE", "done": "DONE", "goal": "Goal: {goal}",
        "none": "(none yet)", "steps": "Completed steps:", "findings": "Findings:",
        "more_steps": "(+{n} earlier steps)", "more_findings": "(+{n} earlier findings)",
        "pending": " (no result yet)",
    },
    "zh": {
        "status": "任务状态：{status}", "active": "进行中", "done": "已完成", "goal": "目标：{goal}",
        "none": "（暂无）", "steps": "已完成步骤：", "findings": "发现：",
        "more_steps": "（另有 {n} 个更早的步骤）", "more_findings": "（另有 {n} 条更早的发现）",
        "pending": "（尚无结果）",
    },
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TaskStep:
    """One thing done for the goal; ``done`` once the tool's result has come back."""

    text: str
    at: float
    call_id: str | None = None
    done: bool = True


@dataclass(frozen=True, slots=True)
class ActiveTask:
    """A snapshot of a conversation's task (the tracker keeps the live one)."""

    goal: str
    status: TaskStatus
    steps: tuple[TaskStep, ...]
    findings: tuple[str, ...]
    started_at: float
    updated_at: float
    dropped_steps: int = 0
    dropped_findings: int = 0


@dataclass
class _Live:
    goal: str
    started_at: float
    updated_at: float
    status: TaskStatus = "active"
    steps: list[TaskStep] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    dropped_steps: int = 0
    dropped_findings: int = 0
    calls: dict[str, str] = field(default_factory=dict)  # call id -> tool name

    def snapshot(self) -> ActiveTask:
        return ActiveTask(
            self.goal, self.status, tuple(self.steps), tuple(self.findings), self.started_at,
            self.updated_at, self.dropped_steps, self.dropped_findings,
        )  # fmt: skip


@dataclass
class _Slot:
    task: _Live | None = None
    seen: deque[str] = field(default_factory=lambda: deque(maxlen=512))
    seen_set: set[str] = field(default_factory=set)


class ActiveTaskTracker:
    """Goals, steps and findings per (tenant, conversation); see the module docstring.

    ``goal_chars`` bounds the goal; ``max_steps`` and ``max_findings`` keep the newest
    (the number dropped is reported); ``summary_chars`` bounds `status_summary`;
    ``max_tasks`` bounds the conversations held (least recently used go first).
    """

    def __init__(
        self,
        *,
        max_steps: int = 10,
        max_findings: int = 10,
        goal_chars: int = 200,
        summary_chars: int = 1200,
        finding_chars: int = 160,
        max_tasks: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        for label, value, low in (
            ("max_steps", max_steps, 0), ("max_findings", max_findings, 0), ("goal_chars", goal_chars, 20),
            ("summary_chars", summary_chars, 100), ("finding_chars", finding_chars, 20), ("max_tasks", max_tasks, 1),
        ):  # fmt: skip
            if value < low:
                raise ConfigError(f"ActiveTaskTracker {label} must be >= {low}, got {value}")
        self.max_steps = max_steps
        self.max_findings = max_findings
        self.goal_chars = goal_chars
        self.summary_chars = summary_chars
        self.finding_chars = finding_chars
        self.max_tasks = max_tasks
        self.clock = clock
        self._slots: OrderedDict[tuple[str, str], _Slot] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    # -- learning ------------------------------------------------------------------------

    def observe(self, tenant: str, conversation: str, message: Message) -> ActiveTask | None:
        """Learn from one message (once per message id); returns the task afterwards."""
        with self._lock:
            slot = self._slot(tenant, conversation)
            if message.id not in slot.seen_set:
                self._remember(slot, message.id)
                self._learn(slot, message)
            return slot.task.snapshot() if slot.task else None

    def observe_new(
        self, tenant: str, conversation: str, messages: Sequence[Message]
    ) -> ActiveTask | None:
        """Learn from the messages after the newest one already observed (oldest first).

        Older unseen messages are skipped: showing a history window again must not turn
        the goal back to an earlier request.
        """
        with self._lock:
            slot = self._slot(tenant, conversation)
            start = 0
            for i in range(len(messages) - 1, -1, -1):
                if messages[i].id in slot.seen_set:
                    start = i + 1
                    break
            for m in messages[start:]:
                if m.id not in slot.seen_set:
                    self._remember(slot, m.id)
                    self._learn(slot, m)
            return slot.task.snapshot() if slot.task else None

    def catch_up(self, turn: Turn, scan: int = 40) -> ActiveTask | None:
        """Learn from a turn: the newest ``scan`` history messages not yet seen, then the
        current message. The current message is taken on its own because in an agent
        loop it is rebuilt with the tool work that followed it in ``history``."""
        recent = turn.history[max(0, len(turn.history) - scan) :]
        self.observe_new(turn.tenant, turn.conversation, list(recent))
        return self.observe(turn.tenant, turn.conversation, turn.message)

    def mark_done(self, tenant: str, conversation: str) -> ActiveTask | None:
        """Set the task's status to "done" (a new request starts a new one)."""
        with self._lock:
            slot = self._slots.get((tenant, conversation))
            if slot is None or slot.task is None:
                return None
            slot.task.status = "done"
            slot.task.updated_at = self.clock()
            return slot.task.snapshot()

    def get(self, tenant: str, conversation: str) -> ActiveTask | None:
        with self._lock:
            slot = self._slots.get((tenant, conversation))
            if slot is None:
                return None
            self._slots.move_to_end((tenant, conversation))  # reading it is using it
            return slot.task.snapshot() if slot.task else None

    def clear(self, tenant: str, conversation: str) -> bool:
        with self._lock:
            return self._slots.pop((tenant, conversation), None) is not None

    def _slot(self, tenant: str, conversation: str) -> _Slot:
        key = (tenant, conversation)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot()
            while len(self._slots) > self.max_tasks:
                self._slots.popitem(last=False)
        else:
            self._slots.move_to_end(key)
        return slot

    @staticmethod
    def _remember(slot: _Slot, message_id: str) -> None:
        if len(slot.seen) == slot.seen.maxlen:
            slot.seen_set.discard(slot.seen[0])
        slot.seen.append(message_id)
        slot.seen_set.add(message_id)

    def _learn(self, slot: _Slot, message: Message) -> None:
        now = self.clock()
        if message.role == "user":
            self._goal(
                slot, " ".join(p.text for p in message.parts if isinstance(p, TextPart)), now
            )
        elif message.role == "assistant":
            task = slot.task or self._start(slot, "", now)
            for call in message.tool_calls:
                task.calls[call.id] = call.name
                text = f"called {call.name}({_arguments(call.arguments, 80)})"
                self._add_step(task, TaskStep(text, now, call.id, done=False))
            prose = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
            for finding in _findings(prose, self.finding_chars):
                self._add_finding(task, finding)
            task.updated_at = now
        elif message.role == "tool":
            task = slot.task or self._start(slot, "", now)
            for r in message.tool_results:
                outcome = _outcome(r.text, r.is_error)
                index = next((i for i, s in enumerate(task.steps) if s.call_id == r.call_id), None)
                if index is not None:
                    step = task.steps[index]
                    task.steps[index] = TaskStep(f"{step.text} → {outcome}", now, step.call_id)
                else:  # the call was not seen (or has been dropped): the result stands alone
                    name = r.name or task.calls.get(r.call_id) or "tool"
                    self._add_step(task, TaskStep(f"{name} {outcome}", now, r.call_id))
            task.updated_at = now

    def _goal(self, slot: _Slot, text: str, now: float) -> None:
        text = " ".join(text.split())
        if not text or _ACK.match(text):
            return  # an acknowledgement is not a new request
        follow = _FOLLOW_UP.match(text)
        task = slot.task
        if follow and task is not None and task.goal and task.status == "active":
            addition = text[follow.end() :].strip() or text
            joined = f"{task.goal}; {addition}"
            if len(joined) > self.goal_chars:  # keep room for the newest addition
                keep = max(self.goal_chars // 2, self.goal_chars - len(addition) - 2)
                joined = f"{_clip(task.goal, keep)}; {_clip(addition, self.goal_chars - keep - 2)}"
            task.goal, task.updated_at = joined, now
            return
        self._start(slot, _clip(text, self.goal_chars), now)

    @staticmethod
    def _start(slot: _Slot, goal: str, now: float) -> _Live:
        slot.task = _Live(goal, now, now)
        return slot.task

    def _add_step(self, task: _Live, step: TaskStep) -> None:
        task.steps.append(step)
        while len(task.steps) > self.max_steps:
            old = task.steps.pop(0)
            task.dropped_steps += 1
            if old.call_id:
                task.calls.pop(old.call_id, None)

    def _add_finding(self, task: _Live, finding: str) -> None:
        folded = finding.casefold()
        if any(f.casefold() == folded for f in task.findings):
            return
        task.findings.append(finding)
        while len(task.findings) > self.max_findings:
            task.findings.pop(0)
            task.dropped_findings += 1

    # -- rendering -----------------------------------------------------------------------

    def status_for_turn(self, turn: Turn, *, observe: bool = True, scan: int = 40) -> str:
        """The ``ContextEngine(task_status=tracker.status_for_turn)`` hook (pinning).

        Shows the tracker the newest ``scan`` history messages and the current message
        (what it has seen is skipped), then renders the status in the turn's locale.
        The engine already restates the current message as the goal, so the Goal line
        is left out when it says the same — and then a task with no steps or findings
        yet adds nothing ("").
        """
        if observe:
            self.catch_up(turn, scan)
        return self.status_summary(
            turn.tenant, turn.conversation, locale=turn.locale, restated_goal=turn.query
        )

    def status_summary(
        self,
        tenant: str,
        conversation: str,
        locale: str = "en",
        *,
        restated_goal: str | None = None,
    ) -> str:
        """The task as a few lines for the prompt ("" when there is none), at most
        ``summary_chars`` characters: the oldest steps and findings go first, then the goal
        is shortened. With ``restated_goal`` (the text the prompt already restates as
        the goal), a Goal line saying the same is left out."""
        task = self.get(tenant, conversation)
        if task is None or not (task.goal or task.steps or task.findings):
            return ""
        if locale == "auto":
            locale = "zh" if _CJK.search(task.goal) else "en"
        t = LABELS["zh" if locale.startswith("zh") else "en"]
        steps = [s.text + ("" if s.done else t["pending"]) for s in task.steps]
        findings = list(task.findings)
        more_steps, more_findings = task.dropped_steps, task.dropped_findings
        goal: str | None = task.goal
        if restated_goal is not None and task.goal:
            restated = " ".join(restated_goal.split())
            if restated.startswith(task.goal.removesuffix("…")):
                goal = None  # the prompt says it already
                if not (steps or findings or task.status == "done"):
                    return ""
        limit = self.summary_chars
        while True:
            text = self._render(t, task.status, goal, steps, findings, more_steps, more_findings)
            if len(text) <= limit:
                return text
            # Shorten in order of what matters least: a long goal to a third of the room,
            # the oldest steps and findings (the newest of each stays), the goal to 40
            # characters, the last items, and only then the text itself.
            room = len(goal or "")
            if room > max(40, limit // 3):
                goal = _clip(goal or "", max(40, limit // 3))
            elif len(steps) + len(findings) > 2 or (room <= 40 and (steps or findings)):
                longer = steps if len(steps) >= len(findings) else findings
                longer.pop(0)
                if longer is steps:
                    more_steps += 1
                else:
                    more_findings += 1
            elif room > 40:
                goal = _clip(goal or "", 40)
            else:
                return _clip(text, limit)

    @staticmethod
    def _render(
        t: dict[str, str], status: TaskStatus, goal: str | None, steps: Iterable[str],
        findings: Iterable[str], more_steps: int, more_findings: int,
    ) -> str:  # fmt: skip
        lines = [t["status"].format(status=t[status])]
        if goal is not None:  # None: left out (restated elsewhere); "" : not known yet
            lines.append(t["goal"].format(goal=goal or t["none"]))
        steps, findings = list(steps), list(findings)
        if steps or more_steps:
            lines.append(t["steps"])
            if more_steps:
                lines.append(t["more_steps"].format(n=more_steps))
            lines += [f"- {s}" for s in steps]
        if findings or more_findings:
            lines.append(t["findings"])
            if more_findings:
                lines.append(t["more_findings"].format(n=more_findings))
            lines += [f"- {f}" for f in findings]
        return "\n".join(lines)


class ActiveTaskSource(SourceBase):
    """The task status as a block (name "active_task", P1), for the engine to place.

    With ``observe`` (the default) each fetch first shows the tracker the newest
    ``scan`` history messages and the current message; the tracker skips what it has
    already seen, so a caller that also feeds it directly loses nothing. Written in the
    turn's locale.
    """

    def __init__(
        self,
        tracker: ActiveTaskTracker,
        *,
        observe: bool = True,
        scan: int = 40,
        name: str = "active_task",
        priority: int = Priority.P1,
        trigger: Trigger | None = None,
        deadline: float = 0.5,
    ) -> None:
        super().__init__(name=name, priority=priority, trigger=trigger, deadline=deadline)
        self.tracker = tracker
        self.observe = observe
        self.scan = scan

    async def fetch(self, turn: Turn, allowance: int) -> FetchResult:
        if self.observe:
            self.tracker.catch_up(turn, self.scan)
        text = self.tracker.status_summary(turn.tenant, turn.conversation, locale=turn.locale)
        if not text:
            return None
        return Block(self.name, text, self.priority, provenance="active_task")
