"""A deterministic tool-heavy agent trace, and its replay through `Conversations`.

`agent_trace(calls, seed)` yields the events of a coding agent's session, one model
call after another: a user task, then steps of one or two tool calls with their
results (file reads, test runs, searches, directory listings, logs; some in
Chinese, some large enough to be compressed and offloaded), then the agent's
answer, then the next task. Nothing is random beyond ``random.Random(seed)``, so
every run replays the very same messages.

`replay` sends the trace through a `Conversations` as an agent would: each model
call is one build (`build(cid, user message)` for a task, `build(cid, tool
result)` for the next step after the tool results), the assistant's turns are
appended in between. Each build is rendered for Anthropic and compared with the
request before it, block by block (what Anthropic's prompt cache hashes):

* the **cacheable part** of a request is everything up to its last
  ``cache_control`` block (the system prompt, the summary, the history);
* a build **reads** the longest prefix of blocks it shares with the previous
  request's cacheable part, and **writes** the rest of its own cacheable part;
* the **minimum** a build must write is the cacheable blocks that the previous
  request did not hold at all (new messages), or the whole cacheable part when
  its system blocks changed (a compaction: a new summary) or it is the first;
* a non-compacting build **keeps the prefix** when the previous request's
  cacheable part is, byte for byte, a prefix of its own.

Used by `bench_cache_replay.py` (the table) and `tests/test_cache_replay.py`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from contextwright import Conversations, Message, TokenCounter, ToolCallPart

__all__ = ["Event", "ReplayStats", "agent_trace", "replay"]

_FILES = [
    "src/app/server.py", "src/app/routes.py", "src/app/models.py", "src/app/cache.py",
    "src/app/auth.py", "tests/test_routes.py", "tests/test_cache.py", "docs/setup.md",
    "src/app/billing.py", "src/app/jobs.py", "config/settings.toml", "src/app/utils.py",
]  # fmt: skip
_TASKS_EN = [
    "The {f} endpoint returns 500 when the cache is cold. Find out why and fix it.",
    "Add a retry with backoff to the job runner in {f}; keep the tests green.",
    "Our billing totals are off by one cent for EUR invoices. Investigate {f}.",
    "Rename the `fetch_all` helper in {f} to `load_all` everywhere and update the docs.",
    "The test suite got slow. Profile {f} and tell me what takes the time.",
    "Please review {f} for SQL injection risks and patch anything you find.",
]
_TASKS_ZH = [
    "{f} 里的缓存在冷启动时会报错，请找出原因并修复。",
    "请检查 {f} 的日志输出，把调试信息改成结构化的 JSON 格式。",
    "用户反馈登录很慢，请分析 {f} 并给出优化方案。",
]
_WORDS = [
    "cache", "request", "handler", "session", "token", "retry", "backoff", "invoice", "total",
    "amount", "cursor", "query", "index", "worker", "queue", "lease", "timeout", "config",
    "parse", "render", "template", "user", "account",
]  # fmt: skip


@dataclass(frozen=True)
class Event:
    """One step of the trace: ``kind`` is "task" (a user message, then a build),
    "assistant" (appended), "results" (tool results: all but the last appended,
    then a build with the last)."""

    kind: str
    messages: tuple[Message, ...]


def _code(rng: random.Random, path: str, lines: int) -> str:
    out = [f"# {path}", "from __future__ import annotations", ""]
    for i in range(lines):
        w = rng.sample(_WORDS, 3)
        if i % 9 == 0:
            out.append(f"def {w[0]}_{w[1]}(self, {w[2]}: int = {i}) -> dict[str, int]:")
        else:
            out.append(f"    {w[0]} = self.{w[1]}.get({w[2]!r}, {rng.randint(0, 999)})  # {i}")
    return "\n".join(out)


def _tests(rng: random.Random, lines: int, zh: bool) -> str:
    out = []
    for i in range(lines):
        name = f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{i}"
        out.append(f"{name} {'PASSED' if rng.random() > 0.08 else 'FAILED'}")
    fail = rng.randint(0, 3)
    tail = (
        f"{fail} 个失败, {lines - fail} 个通过" if zh else f"{fail} failed, {lines - fail} passed"
    )
    return "\n".join([*out, f"===== {tail} in {rng.uniform(0.5, 40):.2f}s ====="])


def _search(rng: random.Random, hits: int) -> str:
    rows = [
        {"path": rng.choice(_FILES), "line": rng.randint(1, 900),
         "text": " ".join(rng.sample(_WORDS, 5))}
        for _ in range(hits)
    ]  # fmt: skip
    return json.dumps({"query": rng.choice(_WORDS), "total": hits, "hits": rows})


def _listing(rng: random.Random, n: int) -> str:
    return json.dumps(
        [
            {"name": f"{rng.choice(_WORDS)}_{i}.py", "size": rng.randint(80, 90_000)}
            for i in range(n)
        ]
    )


def _tool_result(rng: random.Random, tool: str, zh: bool) -> str:
    size = rng.random()
    if tool == "read_file":
        return _code(rng, rng.choice(_FILES), 12 if size < 0.6 else 60 if size < 0.9 else 400)
    if tool == "run_tests":
        return _tests(rng, 8 if size < 0.6 else 60 if size < 0.9 else 300, zh)
    if tool == "search":
        return _search(rng, 4 if size < 0.6 else 30 if size < 0.9 else 150)
    if tool == "list_dir":
        return _listing(rng, 6 if size < 0.7 else 120)
    note = "日志" if zh else "log"
    return "\n".join(
        f"2026-11-{rng.randint(1, 28):02d} {note} worker={rng.randint(1, 8)} "
        f"{' '.join(rng.sample(_WORDS, 4))}"
        for _ in range(5 if size < 0.7 else 80)
    )


_TOOLS = ["read_file", "run_tests", "search", "list_dir", "tail_log"]


def agent_trace(calls: int, seed: int = 23) -> Iterator[Event]:
    """Events of an agent session with ``calls`` model calls (builds), seeded."""
    rng = random.Random(seed)
    made = 0
    task = 0
    while made < calls:
        zh = rng.random() < 0.25
        f = rng.choice(_FILES)
        text = rng.choice(_TASKS_ZH if zh else _TASKS_EN).format(f=f)
        yield Event("task", (Message.user(f"[task {task}] {text}", id=f"u{task}"),))
        made += 1
        steps = rng.randint(1, 6)
        for s in range(steps):
            if made >= calls:
                return
            n = 1 if rng.random() < 0.7 else 2
            calls_ = []
            for k in range(n):
                tool = rng.choice(_TOOLS)
                args = {"query": rng.choice(_WORDS)} if tool == "search" else None
                args = args or {"path": rng.choice(_FILES)}
                calls_.append(ToolCallPart(f"call_{task}_{s}_{k}", tool, json.dumps(args)))
            thought = "我先看一下相关代码。" if zh else f"Let me look at step {s} of this."
            yield Event(
                "assistant",
                (Message.assistant(thought, tool_calls=calls_, id=f"a{task}.{s}"),),
            )
            results = tuple(
                Message.tool(c.id, _tool_result(rng, c.name, zh), tool_name=c.name,
                             id=f"t{task}.{s}.{k}")
                for k, c in enumerate(calls_)
            )  # fmt: skip
            yield Event("results", results)
            made += 1
        answer = (
            f"任务 {task} 完成：问题出在 {f} 的第 {rng.randint(10, 400)} 行，已修复并通过测试。"
            if zh
            else f"Task {task} done: the cause was line {rng.randint(10, 400)} of {f}; "
            f"fixed it and the tests pass ({rng.randint(20, 300)} passed)."
        )
        yield Event("assistant", (Message.assistant(answer, id=f"f{task}"),))
        task += 1


def _blocks(request: dict[str, Any]) -> tuple[list[str], int]:
    """The request as a list of blocks (JSON, cache marks removed), and how many of
    them are cacheable (up to the last one with a ``cache_control`` mark)."""
    out: list[str] = []
    last = 0

    def add(where: str, block: dict[str, Any]) -> None:
        nonlocal last
        marked = "cache_control" in block
        plain = {k: v for k, v in block.items() if k != "cache_control"}
        out.append(where + json.dumps(plain, sort_keys=True, ensure_ascii=False))
        if marked:
            last = len(out)

    for b in request.get("system", []):
        add("system:", b)
    for i, m in enumerate(request["messages"]):
        content = m["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for b in content:
            add(f"{i}:{m['role']}:", b)
    return out, last


@dataclass
class ReplayStats:
    """What `replay` measured (tokens by the conversations' counter, per block)."""

    builds: int = 0
    compacting: int = 0  # builds whose system blocks (the summary) changed
    kept_prefix: int = 0  # non-compacting builds that kept the previous cacheable prefix
    non_compacting: int = 0
    written: int = 0  # cache-write tokens (rendered blocks)
    minimum: int = 0  # the least any build could write (see the module docstring)
    cached: int = 0  # cache-read tokens
    cacheable: int = 0
    sent: int = 0  # every block of every request
    reported_written: int = 0  # what the receipts say (`ContextReport.prefix`)
    reported_minimum: int = 0
    summaries: int = 0
    used: list[int] = field(default_factory=list)
    breaks: list[int] = field(default_factory=list)  # non-compacting builds that broke

    @property
    def ratio(self) -> float:
        return self.written / self.minimum if self.minimum else 0.0

    @property
    def cost(self) -> float:
        """Input cost in base-price tokens at Anthropic's multipliers: a cache read
        0.1, a cache write 1.25, the uncached rest 1."""
        return 0.1 * self.cached + 1.25 * self.written + (self.sent - self.cacheable)

    @property
    def share(self) -> float:
        return self.kept_prefix / self.non_compacting if self.non_compacting else 1.0


def replay(
    convs: Conversations, counter: TokenCounter, calls: int, *, seed: int = 23, cid: str = "agent"
) -> ReplayStats:
    """Replay ``calls`` model calls of `agent_trace` through ``convs`` (sync API)."""
    stats = ReplayStats()
    prev: list[str] | None = None
    prev_cacheable = 0
    sizes: dict[str, int] = {}

    def size(block: str) -> int:
        n = sizes.get(block)
        if n is None:
            n = sizes[block] = counter.count(block)
        return n

    for event in agent_trace(calls, seed):
        if event.kind == "assistant":
            convs.append_sync(cid, list(event.messages))
            continue
        if event.kind == "results":
            if len(event.messages) > 1:
                convs.append_sync(cid, list(event.messages[:-1]))
            built = convs.build_sync(cid, event.messages[-1])
        else:
            built = convs.build_sync(cid, event.messages[0])
        convs.wait_idle_sync()  # a background summary lands before the next call
        blocks, cacheable = _blocks(built.render("anthropic"))
        stats.builds += 1
        stats.used.append(built.report.used)
        mine = sum(size(b) for b in blocks[:cacheable])
        stats.cacheable += mine
        stats.sent += mine + sum(size(b) for b in blocks[cacheable:])
        prefix = built.report.prefix
        if prefix is not None:
            stats.reported_written += prefix.write_tokens
            stats.reported_minimum += prefix.least_write_tokens
        if prev is None:
            stats.written += mine
            stats.minimum += mine
            prev, prev_cacheable = blocks, cacheable
            continue
        common = 0
        limit = min(prev_cacheable, cacheable)
        while common < limit and blocks[common] == prev[common]:
            common += 1
        read = sum(size(b) for b in blocks[:common])
        stats.cached += read
        stats.written += mine - read
        sys_now = [b for b in blocks[:cacheable] if b.startswith("system:")]
        sys_before = [b for b in prev[:prev_cacheable] if b.startswith("system:")]
        if sys_now != sys_before:
            stats.compacting += 1
            stats.minimum += mine
        else:
            stats.non_compacting += 1
            had = Counter(prev[:prev_cacheable])
            new = 0
            for b in blocks[:cacheable]:
                if had[b] > 0:
                    had[b] -= 1
                else:
                    new += size(b)
            stats.minimum += new
            if common == prev_cacheable:
                stats.kept_prefix += 1
            else:
                stats.breaks.append(stats.builds)
        prev, prev_cacheable = blocks, cacheable
    stats.summaries = len(convs.run_sync(convs.backend.summaries.summaries(cid, tenant="default")))
    return stats
