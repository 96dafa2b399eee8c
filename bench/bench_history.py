"""Stateful (stored) mode, side by side, in one process: contextwright vs LlamaIndex / LangChain.

Every workload runs on a fresh SQLite *file* in a temporary directory (WAL,
``synchronous=NORMAL``: `SQLiteStore`'s defaults), never ``:memory:``. The thread is
a seeded synthetic conversation: a user question, the assistant's answer, and in 1
of 5 assistant turns a tool call whose result is a 1–8 KB JSON document; words are
drawn with Zipf frequencies from ~3,000 (function words, domain words, made-up
words), so full-text search sees common and rare terms. Every measurement appends
fresh `Message` copies (no token counts cached on them) through a fresh engine.

1. **Append latency**, one message per call, 1,000 calls onto a conversation that
   already holds 10,000 (the one the import below left): ``SQLiteStore.append`` with
   a precomputed count; ``Conversations.append_sync`` (count + tool-result
   compression + store) with the heuristic counter and with cl100k, once the
   import's background summary is done; LlamaIndex
   ``Memory.put`` on its default chat store (SQLAlchemy + aiosqlite, in memory) and
   on an aiosqlite file. Goal ≤ 0.3 ms per message.
2. **Bulk import** of 10,000 messages: ``SQLiteStore.append`` in one batch;
   ``Conversations.import_sync`` in batches of 1,000 (it stores the batches
   uncounted and counts only the newest messages, those the tail can hold: the
   rest is summarised at once; the background summary it schedules at the end is
   waited for apart, untimed, and its time noted; the full-text index is written
   when the conversation is first searched, or by ``optimize_index``, which the
   CLI's import and the build templates below use);
   LlamaIndex ``Memory.put_messages`` in
   batches of ``--li-batch`` (50: its fastest; it re-reads and re-counts the active
   queue on every put). Goal ≥ 20,000 messages/s.
3. **Stateful build**: 1,000 / 10,000 / 100,000 messages are imported into a
   template file (``import_sync(optimize_index=True)``, as the CLI does) and built once (the *first* build: nothing is summarised yet, so
   it compacts inline). Each loop then runs on a copy of that file in a new
   `Conversations` (its first build, the *restart*, reloads the tail) and repeats
   the turn: ``build_sync`` of a new user message (timed), the assistant's reply
   appended (timed apart), ``wait_idle_sync`` (untimed: the background summaries
   run between turns, and so does recall's indexing of the turn just ended, which
   the reply's append schedules). Engine: cl100k, budget 8,000, the eight default sources
   with something to say, plus recall (on by default; a second loop turns it off).
   At most ``--turns`` turns or ``--loop-seconds``. Goals ≤ 1 ms p50, ≤ 5 ms p99,
   and 10× the history ≤ 1.3× the p50. Stage means come from ``report.timings_ms``;
   `Conversations`' own parts (``_tail`` refresh, compaction check, storing the
   message) are timed by wrapping those methods on the instance, the store calls
   by wrapping the store's. LangChain ``trim_messages`` (memoised cl100k counts,
   strategy last, start_on human, budget 8,000) on the same threads is the
   stateless reference.
4. **Rule compaction** of 1,000 messages: ``compact_sync(force=True)`` on a fresh
   conversation (own file) per run, only the call timed. Goal ≤ 20 ms p50.

Run: ``python bench/bench_history.py [--json out.json] [--no-100k] [--profile]``;
about 2–3 minutes on 2 cores (``--no-100k``: about 1). ``--profile`` adds cProfile
runs of the cl100k append, warm builds at 10k and the compaction (main thread
only: the store worker and the summary thread show up as ``epoll.poll``).
"""

# No `from __future__ import annotations`: LangChain's trim_messages reads the
# counter's first parameter annotation and needs the real `BaseMessage` class.

import argparse
import cProfile
import gc
import io
import itertools
import json
import os
import platform
import pstats
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _peers import ENC, VERIFY, langchain_counters, to_langchain, to_llamaindex
from _sources import eight_sources
from contextwright import (
    CachedCounter,
    ContextEngine,
    Conversations,
    HeuristicCounter,
    Message,
    TiktokenCounter,
    ToolCallPart,
    count_message,
    count_messages,
)
from contextwright.history import RuleSummarizer
from contextwright.sources import Assessment, ConversationState, DeviceInfo, StageVisit
from contextwright.stores import SQLiteStore

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=ResourceWarning)

TENANT, USER = "acme", "u1"
BUDGET = 8000
SYSTEM_PROMPT = (
    "You are a careful assistant for Acme's customers. Answer from the conversation and the "
    "context blocks below; say when you do not know. Keep answers short unless asked otherwise."
)
# contextwright's default per-message accounting (MessageOverhead), used for the peers too
PER_MESSAGE, PER_TOOL_CALL, PER_TOOL_RESULT, REPLY_PRIMING = 3, 12, 4, 3
CL100K = "tiktoken:cl100k_base"

# The project's performance goals; the reference numbers are the peers' published costs.
GOAL_APPEND_MS = 0.3
GOAL_IMPORT_PER_S = 20_000
GOAL_BUILD_P50_MS = 1.0
GOAL_BUILD_P99_MS = 5.0
GOAL_SCALING = 1.3
GOAL_COMPACT_MS = 20.0
# The build loops' engines (sources, recall): the eight default sources of bench_build,
# or history alone (system prompt, summary, window — what the peers do), each with and
# without recall of old turns.
CONFIGS = ((True, True), (True, False), (False, True), (False, False))


# -- the synthetic thread ------------------------------------------------------------------

_FUNCTION = [
    "the",
    "to",
    "and",
    "a",
    "of",
    "in",
    "is",
    "it",
    "you",
    "that",
    "for",
    "we",
    "on",
    "with",
    "this",
    "can",
    "was",
    "be",
    "are",
    "have",
    "not",
    "what",
    "please",
    "also",
    "still",
    "could",
    "would",
    "should",
    "about",
    "from",
]
_DOMAIN = [
    "order",
    "invoice",
    "refund",
    "shipping",
    "customer",
    "account",
    "plan",
    "team",
    "report",
    "status",
    "update",
    "payment",
    "delivery",
    "address",
    "warehouse",
    "stock",
    "item",
    "price",
    "discount",
    "coupon",
    "ticket",
    "issue",
    "error",
    "timeout",
    "server",
    "region",
    "backup",
    "export",
    "import",
    "schedule",
    "meeting",
    "budget",
    "forecast",
    "quarter",
    "revenue",
    "contract",
    "renewal",
    "trial",
    "upgrade",
    "downgrade",
    "feature",
    "request",
    "bug",
    "fix",
    "release",
    "version",
    "build",
    "deploy",
    "rollback",
    "database",
    "query",
    "index",
    "cache",
    "latency",
    "metric",
    "dashboard",
    "alert",
    "owner",
    "review",
    "today",
    "tomorrow",
    "yesterday",
    "soon",
    "later",
    "maybe",
    "sure",
    "thanks",
    "already",
    "again",
]


def _vocabulary(seed: int = 5) -> tuple[list[str], list[float]]:
    """About 3,000 words with Zipf frequencies: function words first, then domain words
    spread over the top few hundred ranks, then made-up words (so full-text search sees
    a natural spread of common and rare terms, not a hundred words in every message)."""
    rng = random.Random(seed)
    syl = [
        "ka",
        "lo",
        "mi",
        "ne",
        "ru",
        "ta",
        "vo",
        "shi",
        "zen",
        "pra",
        "dor",
        "lin",
        "mar",
        "tek",
        "fo",
        "bel",
        "gra",
        "vik",
        "sen",
        "tor",
        "pal",
    ]
    made = sorted(
        {a + b for a in syl for b in syl} | {"".join(rng.sample(syl, 3)) for _ in range(2600)}
    )
    rng.shuffle(made)
    rest = made[: 2900 - len(_DOMAIN)]
    for i, w in enumerate(_DOMAIN):  # domain words at ranks ~30..400
        rest.insert(i * 4 + rng.randint(0, 3), w)
    vocab = _FUNCTION + rest
    cum, acc = [], 0.0
    for rank in range(len(vocab)):
        acc += 1.0 / (rank + 1)
        cum.append(acc)
    return vocab, cum


_VOCAB, _CUM = _vocabulary()
_TOOLS = ("search_orders", "get_customer", "lookup_inventory", "fetch_invoice", "run_sql")


def _words(rng: random.Random, lo: int, hi: int) -> str:
    text = " ".join(rng.choices(_VOCAB, cum_weights=_CUM, k=rng.randint(lo, hi)))
    return text[0].upper() + text[1:]


def _row_pool(rng: random.Random, n: int = 4000) -> list[str]:
    """Serialised JSON records (about 130 bytes each) that tool results are made of."""
    return [
        json.dumps(
            {
                "id": rng.randint(10_000, 99_999),
                "sku": f"SKU-{rng.randint(100, 999)}-{rng.choice('ABCDEFGH')}",
                "name": _words(rng, 2, 5),
                "qty": rng.randint(0, 500),
                "price": round(rng.uniform(1, 900), 2),
                "status": rng.choice(["open", "shipped", "held", "refunded", "cancelled"]),
                "updated": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            }
        )
        for _ in range(n)
    ]


def synthetic_thread(n: int, seed: int = 2024) -> list[Message]:
    """``n`` messages; a prefix of a longer thread with the same seed is the shorter thread.

    Per exchange: a question, then with probability 1/4 an assistant turn calling a
    tool and its 1–8 KB JSON result, then the answer — so 1 assistant turn in 5 calls
    a tool.
    """
    rng = random.Random(seed)
    pool = _row_pool(random.Random(seed + 1))
    out: list[Message] = []
    t = 1_700_000_000.0
    calls = 0
    while len(out) < n:
        t += 20
        out.append(Message.user(_words(rng, 6, 40) + "?", id=f"m{len(out)}", created_at=t))
        if rng.random() < 0.25:
            calls += 1
            tool = rng.choice(_TOOLS)
            args = {"query": _words(rng, 2, 8), "limit": rng.randint(5, 50)}
            call = ToolCallPart(f"call_{calls:06d}", tool, json.dumps(args))
            t += 5
            out.append(
                Message.assistant(
                    _words(rng, 3, 12), tool_calls=[call], id=f"m{len(out)}", created_at=t
                )
            )
            size, rows, acc = rng.randint(1024, 8192), [], 40
            while acc < size:
                r = pool[rng.randrange(len(pool))]
                rows.append(r)
                acc += len(r) + 2
            body = (
                f'{{"ok": true, "tool": "{tool}", "request": {calls}, "rows": [{", ".join(rows)}]}}'
            )
            t += 1
            out.append(Message.tool(call.id, body, tool_name=tool, id=f"m{len(out)}", created_at=t))
        t += 10
        out.append(Message.assistant(_words(rng, 20, 150) + ".", id=f"m{len(out)}", created_at=t))
    return out[:n]


def fresh(messages: Sequence[Message]) -> list[Message]:
    """Copies without cached token counts (`Message.replace` does not carry them over)."""
    return [m.replace() for m in messages]


def turn_messages(k: int, seed: int = 99) -> list[tuple[str, Message]]:
    """``k`` (user message, assistant reply) pairs for the build loop.

    Every message names a policy and notes (the knowledge gate) so all eight sources
    have something to say; the rest varies, so recall searches differ per turn.
    """
    rng = random.Random(seed)
    out = []
    for i in range(k):
        q = (
            f"{_words(rng, 5, 20)} - what does the refund policy say about order 88231, "
            f"and which shipping notes apply? ({i})"
        )
        a = Message.assistant(_words(rng, 20, 120) + ".", id=f"reply-{seed}-{i}")
        out.append((q, a))
    return out


# -- contextwright --------------------------------------------------------------------------

STATE = ConversationState(
    collected_info={"name": "Tim", "plan": "pro", "order": "88231", "region": "EU"},
    assessment=Assessment(
        recommended=("refund", "store credit"),
        score=0.82,
        highlights=("long-standing customer", "clear description of the problem"),
        concerns=("second refund request this quarter",),
        note="Escalate if the refund exceeds 500 EUR.",
    ),
    stage="resolution",
    stage_turns=3,
    stage_history=(StageVisit("intake", 4), StageVisit("diagnosis", 7)),
    device=DeviceInfo("iPhone 15", "Europe/Lisbon", "PT", "en-PT", 60),
)
SOURCE_NAMES = (
    "user_memory",
    "collected_info",
    "conversation_stats",
    "assessment_result",
    "relevant_knowledge",
    "similar_experiences",
    "device_context",
    "active_agents_history",
    "recalled_turns",
)


def make_engine(now: float, counter: Any = None, sources: bool = True) -> ContextEngine:
    """cl100k, budget 8,000 and (``sources``) the eight default sources, as in bench_build."""
    srcs: list[Any] = []
    if sources:
        srcs = eight_sources(
            now,
            tenant=TENANT,
            user=USER,
            memories=(
                ("Prefers short answers with the numbers first", "preference", 90),
                ("Order 88231 is waiting for a refund decision", "fact", 80),
                ("Lives in Lisbon; writes in English", "fact", 50),
                ("Wants shipping notes sent by email", "intent", 40),
            ),
            passages=(
                (
                    "Refund policy: orders can be refunded within 30 days of delivery.\n"
                    "Refunds above 500 EUR need a supervisor.",
                    "policies/refunds.md",
                ),
                (
                    "Shipping notes: EU orders ship from Rotterdam; allow 3-5 working days.",
                    "notes/shipping.md",
                ),
                (
                    "Escalation policy: a second refund in a quarter is reviewed by the risk team.",
                    "policies/escalation.md",
                ),
            ),
            experiences=(
                (
                    "When a refund is pending, state the policy window before the decision.",
                    "resolution",
                ),
                ("Customers asking about shipping notes prefer a dated checklist.", "tone"),
            ),
            labels={"name": "Name", "plan": "Plan", "order": "Order", "region": "Region"},
            core_fields=("name", "plan"),
        )
    return ContextEngine(
        system_prompt=SYSTEM_PROMPT,
        sources=srcs,
        counter=counter or TiktokenCounter("cl100k_base"),
        budget=BUDGET,
        clock=lambda: now,
    )


def import_conv(
    conv: Conversations, cid: str, messages: Sequence[Message], batch: int, optimize: bool = False
) -> float:
    """Import ``messages`` in batches through the full pipeline; seconds taken."""
    t = time.perf_counter()
    conv.import_sync(
        cid, messages, tenant=TENANT, user=USER, batch_size=batch, optimize_index=optimize
    )
    return time.perf_counter() - t


# -- peers ----------------------------------------------------------------------------------


# -- measurement helpers --------------------------------------------------------------------


def pct(samples: Sequence[float], q: int) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def stats(samples: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50": statistics.median(samples),
        "p95": pct(samples, 95),
        "p99": pct(samples, 99),
        "mean": statistics.fmean(samples),
    }


class LoadSampler:
    """The 1-minute load average, sampled every 2 s on a daemon thread."""

    def __init__(self) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self.samples.append(os.getloadavg()[0])
        return {
            "min": min(self.samples),
            "mean": statistics.fmean(self.samples),
            "max": max(self.samples),
        }


class Workdir:
    """Fresh database files in one temporary directory."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cw-bench-history-"))
        self.n = 0

    def db(self, tag: str) -> str:
        self.n += 1
        return str(self.root / f"{self.n:03d}-{tag}.db")

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def journal_mode(path: str) -> str:
    with sqlite3.connect(path) as c:
        return str(c.execute("PRAGMA journal_mode").fetchone()[0])


def file_mb(path: str) -> float:
    return sum(
        os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)
    ) / (1 << 20)


@dataclass
class Result:
    section: str
    tool: str
    samples_ms: list[float] = field(default_factory=list)
    value: float | None = None  # throughput etc.
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# -- 1 + 2: import, then single appends ----------------------------------------------------


def bench_store_raw(wd: Workdir, base: list[Message], more: list[Message]) -> list[Result]:
    counter = TiktokenCounter("cl100k_base")
    # precomputed counts (outside the timing): what a caller that counted already passes
    tok_base = [count_message(counter, m) for m in base]
    tok_more = [count_message(counter, m) for m in more]
    base, more = fresh(base), fresh(more)
    path = wd.db("raw")
    store = SQLiteStore(path)
    gc.collect()
    t = time.perf_counter()
    store.append("c", base, tenant=TENANT, user=USER, tokens=tok_base, counter=CL100K)
    secs = time.perf_counter() - t
    mode = journal_mode(path)
    imp = Result(
        "import",
        "SQLiteStore.append (raw, counts given)",
        value=len(base) / secs,
        note=f"1 batch of {len(base):,}; {mode}",
        extra={"seconds": secs, "batch": len(base)},
    )
    samples = []
    gc.collect()
    for m, n in zip(more, tok_more, strict=True):
        t = time.perf_counter()
        store.append("c", [m], tenant=TENANT, user=USER, tokens=[n], counter=CL100K)
        samples.append((time.perf_counter() - t) * 1e3)
    app = Result(
        "append",
        "SQLiteStore.append (raw, count given)",
        samples,
        note=f"{mode}; file {file_mb(path):.0f} MB",
    )
    store.close()
    return [imp, app]


def bench_conversations(
    wd: Workdir, label: str, counter: Any, base: list[Message], more: list[Message], now: float
) -> list[Result]:
    base, more = fresh(base), fresh(more)
    path = wd.db(label)
    conv = Conversations(make_engine(now, counter, sources=False), SQLiteStore(path))
    gc.collect()
    secs = import_conv(conv, "c", base, 1000)
    t = time.perf_counter()
    conv.wait_idle_sync(120)  # the background summary the import scheduled
    summary_s = time.perf_counter() - t
    t = time.perf_counter()
    conv.store.optimize_search_index()  # what the CLI's import ends with
    optimize_s = time.perf_counter() - t
    imp = Result(
        "import",
        f"Conversations.import_sync ({label})",
        value=len(base) / secs,
        note=f"10 batches of 1,000; store, then count + compress what the tail holds; "
        f"then {summary_s:.2f} s of background summary (untimed)",
        extra={"seconds": secs, "batch": 1000, "summary_s": summary_s},
    )
    samples = []
    gc.collect()
    for m in more:
        t = time.perf_counter()
        conv.append_sync("c", [m], tenant=TENANT, user=USER)
        samples.append((time.perf_counter() - t) * 1e3)
    app = Result(
        "append",
        f"Conversations.append_sync ({label})",
        samples,
        note=f"{journal_mode(path)}; file {file_mb(path):.0f} MB; after the import's "
        f"summary and index optimize ({optimize_s:.2f} s)",
    )
    conv.close()
    return [imp, app]


def bench_llamaindex(
    wd: Workdir, base: list[Message], more: list[Message], batch: int, on_file: bool
) -> list[Result]:
    from llama_index.core.memory import Memory as LIMemory

    kw: dict[str, Any] = {}
    backend = "SQLAlchemy + aiosqlite, :memory: (its default)"
    if on_file:
        path = wd.db("llamaindex")
        kw["async_database_uri"] = f"sqlite+aiosqlite:///{path}"
        backend = "SQLAlchemy + aiosqlite, file (journal: rollback, its default)"
    mem = LIMemory.from_defaults(
        session_id="c", token_limit=BUDGET, tokenizer_fn=ENC.encode_ordinary, **kw
    )
    li_base, li_more = to_llamaindex(base), to_llamaindex(more)
    tag = "file" if on_file else "default"
    gc.collect()
    t = time.perf_counter()
    for i in range(0, len(li_base), batch):
        mem.put_messages(li_base[i : i + batch])
    secs = time.perf_counter() - t
    imp = Result(
        "import",
        f"llamaindex Memory.put_messages ({tag})",
        value=len(li_base) / secs,
        note=f"batches of {batch}; {backend}",
        extra={"seconds": secs, "batch": batch},
    )
    samples = []
    gc.collect()
    for m in li_more:
        t = time.perf_counter()
        mem.put(m)
        samples.append((time.perf_counter() - t) * 1e3)
    app = Result("append", f"llamaindex Memory.put ({tag})", samples, note=backend)
    return [imp, app]


# -- 3: the stateful turn loop --------------------------------------------------------------


class Phases:
    """Wall time of `Conversations.build`'s own parts, by wrapping them on the instance."""

    def __init__(self, conv: Conversations) -> None:
        self.on = False
        self.ms: dict[str, list[float]] = {"_tail": [], "_check": [], "store message": []}
        tail, chk, app = conv._tail, conv._check, conv._append

        async def _tail(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await tail(*a, **k)
            finally:
                if self.on:
                    self.ms["_tail"].append((time.perf_counter() - t) * 1e3)

        def _check(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return chk(*a, **k)
            finally:
                if self.on:
                    self.ms["_check"].append((time.perf_counter() - t) * 1e3)

        async def append(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await app(*a, **k)
            finally:
                if self.on:
                    self.ms["store message"].append((time.perf_counter() - t) * 1e3)

        conv._tail, conv._check, conv._append = _tail, _check, append  # type: ignore[method-assign]


STORE_CALLS = (
    "version", "get_conversation", "read", "read_outline", "read_tail", "latest_summary",
    "search_outlines", "speaker_names", "append", "append_versioned",
)  # fmt: skip


def record_store(store: SQLiteStore, names: Sequence[str] = STORE_CALLS) -> dict[str, Any]:
    """Wrap ``store``'s methods on the instance to time them (they run on the worker thread).

    `AsyncStore` looks each method up on the store at call time, so the wrappers are seen.
    Recording happens while ``rec["on"]`` is set.
    """
    rec: dict[str, Any] = {"on": False}
    for name in names:
        method = getattr(store, name)

        def timed(*a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return _m(*a, **k)
            finally:
                if rec["on"]:
                    rec.setdefault(_n, []).append((time.perf_counter() - t) * 1e3)

        setattr(store, name, timed)
    return rec


def first_build(
    wd: Workdir, thread: list[Message], n: int, now: float, pair: tuple[str, Message]
) -> dict[str, Any]:
    """Import ``n`` messages into a template file and run its first (cold) build."""
    path = wd.db(f"template-{n}")
    store = SQLiteStore(path)
    conv = Conversations(make_engine(now), store)
    msgs = fresh(thread[:n])
    gc.collect()
    import_s = import_conv(conv, "c", msgs, 1000, optimize=True)  # as the CLI imports
    del msgs
    t = time.perf_counter()
    built = conv.build_sync("c", pair[0], tenant=TENANT, user=USER, state=STATE)
    cold_ms = (time.perf_counter() - t) * 1e3
    conv.append_sync("c", [pair[1].replace()], tenant=TENANT, user=USER)
    conv.wait_idle_sync(120)
    summaries = len(store.summaries("c", tenant=TENANT))
    conv.close()
    return {
        "messages": n,
        "path": path,
        "import_s": import_s,
        "cold_ms": cold_ms,
        "cold_compaction": built.report.compaction,
        "summaries": summaries,
        "file_mb": file_mb(path),
    }


def bench_turns(
    wd: Workdir,
    template: dict[str, Any],
    now: float,
    recall: bool,
    sources: bool,
    pairs: list[tuple[str, Message]],
    max_seconds: float,
    console: Console,
) -> dict[str, Any]:
    """The turn loop on a copy of ``template`` (its first build already done), in a new process state."""
    n = template["messages"]
    path = wd.db(f"build-{n}-{'recall' if recall else 'norecall'}-{int(sources)}")
    shutil.copyfile(template["path"], path)
    store = SQLiteStore(path)
    calls = record_store(store)
    conv = Conversations(make_engine(now, sources=sources), store, recall=recall)
    phases = Phases(conv)
    build_ms: list[float] = []
    append_ms: list[float] = []
    idle_ms: list[float] = []
    engine_total: list[float] = []
    timings: list[dict[str, float]] = []
    unstored_ms: list[float] = []  # each build less its own storing of the message
    worst, over, inside = 0, 0, set()
    restart_ms = 0.0
    gc.collect()
    started = time.perf_counter()
    for i, (q, reply) in enumerate(pairs):
        if i > 1 and time.perf_counter() - started > max_seconds:
            break
        phases.on = calls["on"] = i > 0
        t = time.perf_counter()
        built = conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
        dt = (time.perf_counter() - t) * 1e3
        phases.on = calls["on"] = False
        if i == 0:
            restart_ms = dt  # a new process: the tail is loaded from the store
        else:
            build_ms.append(dt)
            stored = phases.ms["store message"]
            unstored_ms.append(dt - (stored[-1] if stored else 0.0))
            engine_total.append(built.report.timings_ms.get("total", 0.0))
            timings.append(dict(built.report.timings_ms))
        used = count_messages(VERIFY, built.messages)
        worst = max(worst, used)
        over += used > BUDGET
        inside |= {
            b.name for b in built.report.blocks if b.status in ("included", "truncated")
        } & set(SOURCE_NAMES)
        t = time.perf_counter()
        conv.append_sync("c", [reply.replace()], tenant=TENANT, user=USER)
        if i > 0:
            append_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        conv.wait_idle_sync(120)
        idle_ms.append((time.perf_counter() - t) * 1e3)
    summaries = len(store.summaries("c", tenant=TENANT)) - template["summaries"]
    keys = list(dict.fromkeys(k for d in timings for k in d))
    builds = len(build_ms)
    out = {
        "messages": n,
        "recall": recall,
        "sources": sources,
        "restart_ms": restart_ms,
        "build_ms": build_ms,
        "append_ms": append_ms,
        "idle_ms": idle_ms,
        "stage_means_ms": {k: statistics.fmean(d.get(k, 0.0) for d in timings) for k in keys},
        "phase_means_ms": {k: statistics.fmean(v) if v else 0.0 for k, v in phases.ms.items()},
        "unstored_ms": unstored_ms,
        "store_ms_per_build": {k: sum(v) / builds for k, v in calls.items() if k != "on"},
        "store_calls_per_build": {k: len(v) / builds for k, v in calls.items() if k != "on"},
        "wrapper_ms": statistics.fmean(b - e for b, e in zip(build_ms, engine_total, strict=True)),
        "summaries": summaries,
        "worst_tokens": worst,
        "over_budget": over,
        "sources_in": sorted(inside),
        "journal": journal_mode(path),
    }
    conv.close()
    console.print(
        f"  build loop @ {n:,}, {config_label(sources, recall)}: {builds} warm turns in "
        f"{time.perf_counter() - started:.1f} s, {summaries} background summaries "
        f"(waited {sum(idle_ms) / 1e3:.2f} s for them, untimed)"
    )
    return out


def config_label(sources: bool, recall: bool) -> str:
    """How a build loop's engine is set up, as the tables name it."""
    return ("8 sources" if sources else "history only") + (" + recall" if recall else "")


def bench_trim(thread: list[Message], n: int, seconds: float = 1.0) -> dict[str, Any]:
    from langchain_core.messages import trim_messages

    msgs = to_langchain(
        thread[:n], "what does the refund policy say about order 88231?", SYSTEM_PROMPT
    )
    _, count, _ = langchain_counters()

    def run() -> Any:
        return trim_messages(
            msgs,
            max_tokens=BUDGET - REPLY_PRIMING,
            token_counter=count,
            strategy="last",
            start_on="human",
            include_system=True,
            allow_partial=False,
        )

    run()  # fills the memo
    t = time.perf_counter()
    run()
    one = time.perf_counter() - t
    reps = max(5, min(200, int(seconds / max(one, 1e-6))))
    samples = []
    gc.collect()
    for _ in range(reps):
        t = time.perf_counter()
        out = run()
        samples.append((time.perf_counter() - t) * 1e3)
    return {
        "messages": n,
        "samples_ms": samples,
        "kept": len(out),
        "tokens": REPLY_PRIMING + sum(count(m) for m in out),
    }


# -- 4: compaction --------------------------------------------------------------------------


def bench_compact(
    wd: Workdir, thread: list[Message], runs: int, now: float
) -> tuple[list[float], dict[str, list[float]], dict[str, Any]]:
    samples: list[float] = []
    parts: dict[str, list[float]] = {"_tail": [], "store": [], "summarizer": [], "rest": []}
    info: dict[str, Any] = {}
    for r in range(runs):
        store = SQLiteStore(wd.db("compact"))
        conv = Conversations(make_engine(now, sources=False), store)
        import_conv(conv, "c", fresh(thread[:1000]), 1000)
        phases = Phases(conv)
        spent: list[float] = []
        for name in ("summarize", "summarize_outlined"):
            inner = getattr(conv.summarizer, name, None)
            if inner is None:
                continue

            async def timed(
                *a: Any, _inner: Any = inner, _spent: list[float] = spent, **k: Any
            ) -> Any:
                t = time.perf_counter()
                try:
                    return await _inner(*a, **k)
                finally:
                    _spent.append((time.perf_counter() - t) * 1e3)

            setattr(conv.summarizer, name, timed)
        calls = record_store(store, (*STORE_CALLS, "save_compaction_versioned"))
        timed_tail = conv._tail

        async def tail_apart(
            *a: Any, _tail: Any = timed_tail, _calls: Any = calls, **k: Any
        ) -> Any:
            _calls["on"] = False  # the cold tail's own reads are counted in _tail
            try:
                return await _tail(*a, **k)
            finally:
                _calls["on"] = True

        conv._tail = tail_apart  # type: ignore[method-assign]
        phases.on = calls["on"] = True
        gc.collect()
        t = time.perf_counter()
        res = conv.compact_sync("c", tenant=TENANT, user=USER, force=True)
        total = (time.perf_counter() - t) * 1e3
        samples.append(total)
        phases.on = calls["on"] = False
        parts["_tail"].append(phases.ms["_tail"][0])
        parts["summarizer"].append(sum(spent))
        parts["store"].append(sum(sum(v) for k, v in calls.items() if k != "on"))
        parts["rest"].append(
            total - parts["_tail"][-1] - parts["summarizer"][-1] - parts["store"][-1]
        )
        if r == 0:
            info = {
                "applied": res.applied,
                "strategies": list(res.strategies),
                "original": res.original_count,
                "retained": res.retained_count,
                "tokens_before": res.tokens_before_compaction,
                "tokens_after": res.tokens_after_compaction,
                "method": res.method,
                "summary_chars": len(res.summary),
            }
        conv.close()
    return samples, parts, info


# -- profiling ------------------------------------------------------------------------------


def _pstats(prof: cProfile.Profile, n: int = 22) -> str:
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out).strip_dirs()
    st.sort_stats("tottime").print_stats(n)
    st.sort_stats("cumulative").print_stats(n)
    return out.getvalue()


def profiles(wd: Workdir, thread: list[Message], now: float) -> dict[str, str]:
    out: dict[str, str] = {}
    # cl100k single appends onto 10,000
    conv = Conversations(make_engine(now, sources=False), SQLiteStore(wd.db("prof-append")))
    import_conv(conv, "c", fresh(thread[:10_000]), 1000)
    more = fresh(thread[10_000:11_000])
    prof = cProfile.Profile()
    prof.enable()
    for m in more:
        conv.append_sync("c", [m], tenant=TENANT, user=USER)
    prof.disable()
    conv.close()
    out["append_sync cl100k, 1,000 single appends onto 10,000"] = _pstats(prof)
    # warm builds at 10k; recall off, its cost is the FTS query on the store's thread
    conv = Conversations(make_engine(now), SQLiteStore(wd.db("prof-build")), recall=False)
    import_conv(conv, "c", fresh(thread[:10_000]), 1000)
    pairs = turn_messages(201, seed=7)
    prof = cProfile.Profile()
    for i, (q, reply) in enumerate(pairs):
        if i:
            prof.enable()
        conv.build_sync("c", q, tenant=TENANT, user=USER, state=STATE)
        prof.disable()
        conv.append_sync("c", [reply], tenant=TENANT, user=USER)
        conv.wait_idle_sync(60)
    conv.close()
    out["build_sync warm @ 10,000, recall off, 200 turns (build only)"] = _pstats(prof)
    # compaction of 1,000
    prof = cProfile.Profile()
    for _ in range(5):
        conv = Conversations(make_engine(now, sources=False), SQLiteStore(wd.db("prof-compact")))
        import_conv(conv, "c", fresh(thread[:1000]), 1000)
        prof.enable()
        conv.compact_sync("c", tenant=TENANT, user=USER, force=True)
        prof.disable()
        conv.close()
    out["compact_sync(force=True) of 1,000, 5 runs"] = _pstats(prof)
    # the rule summariser alone (it runs on the background thread in compact_sync)
    conv = Conversations(make_engine(now, sources=False), SQLiteStore(wd.db("prof-summary")))
    views = [conv._writes.view(m)[0] for m in fresh(thread[:994])]
    conv.close()
    summarizer = RuleSummarizer(CachedCounter(TiktokenCounter("cl100k_base")))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        summarizer.summarize_sync(views, previous=None, max_tokens=800, locale="auto")
    prof.disable()
    out["RuleSummarizer.summarize_sync of 994 messages, 5 runs"] = _pstats(prof)
    return out


# -- report ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    vers = {}
    for pkg in (
        "contextwright",
        "langchain-core",
        "llama-index-core",
        "tiktoken",
        "SQLAlchemy",
        "aiosqlite",
    ):
        try:
            vers[pkg] = version(pkg)
        except Exception:
            vers[pkg] = "?"
    vers["sqlite"] = sqlite3.sqlite_version
    import contextwright

    src = Path(contextwright.__file__).resolve().parents[1]
    git = ""
    try:
        head = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if head:
            git = head + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "contextwright_src": str(src),
        "git": git or "not a git checkout",
        "loadavg_at_start": os.getloadavg(),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "cpu": cpu or platform.processor(),
        "platform": platform.platform(),
        "versions": vers,
    }


def verdict(ok: bool) -> str:
    return "[green]pass[/]" if ok else "[red]FAIL[/]"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--turns", type=int, default=200, help="warm builds per loop (at most)")
    ap.add_argument(
        "--loop-seconds", type=float, default=12.0, help="time cap per build loop (≥ 2 turns)"
    )
    ap.add_argument("--no-100k", action="store_true", help="skip the 100,000-message build line")
    ap.add_argument(
        "--li-batch", type=int, default=50, help="LlamaIndex put_messages batch size for import"
    )
    ap.add_argument("--compactions", type=int, default=20, help="compaction runs")
    ap.add_argument("--profile", action="store_true", help="cProfile append, build and compact")
    args = ap.parse_args(argv)

    console = Console(width=max(200, Console().width))
    info = machine()
    load = LoadSampler()
    console.print(
        f"[bold]bench_history[/] — {info['cpu']}, {info['nproc']} cores, Python {info['python']}, "
        f"SQLite {info['versions']['sqlite']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if k != "sqlite")
        + f"; load average {info['loadavg_at_start'][0]:.2f} at start"
    )
    console.print(f"  contextwright from {info['contextwright_src']} ({info['git']})")
    started = time.perf_counter()
    wd = Workdir()
    console.print(f"  databases: fresh files under {wd.root} (WAL), removed at the end")
    try:
        t = time.perf_counter()
        size = 11_000 if args.no_100k else 100_000
        thread = synthetic_thread(size)
        n_tool = sum(m.role == "tool" for m in thread[:10_000])
        kb = sum(len(m.text) for m in thread[:10_000] if m.role == "tool") / 1024
        console.print(
            f"  thread: {size:,} messages generated in {time.perf_counter() - t:.1f} s; the first "
            f"10,000 hold {n_tool:,} tool results ({kb / 1024:.1f} MB of JSON)"
        )
        now = (thread[-1].created_at or 0) + 600
        # The fixture is the harness's, not the system's: keep the collector's full
        # passes (tens of ms over a million objects) from rescanning it mid-build.
        gc.collect()
        gc.freeze()
        base, more = thread[:10_000], thread[10_000:11_000]

        # 1 + 2
        results: list[Result] = []
        t = time.perf_counter()
        results += bench_store_raw(wd, base, more)
        results += bench_conversations(wd, "heuristic", HeuristicCounter(), base, more, now)
        results += bench_conversations(
            wd, "cl100k", TiktokenCounter("cl100k_base"), base, more, now
        )
        console.print(f"  contextwright import + append: {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        results += bench_llamaindex(wd, base, more, args.li_batch, on_file=False)
        results += bench_llamaindex(wd, base, more, args.li_batch, on_file=True)
        console.print(f"  llamaindex import + put: {time.perf_counter() - t:.1f} s")

        # 3
        sizes = [1000, 10_000] + ([] if args.no_100k else [100_000])
        pairs = turn_messages(args.turns + 2)
        templates, loops = [], []
        for n in sizes:
            t = time.perf_counter()
            tp = first_build(wd, thread, n, now, pairs[0])
            templates.append(tp)
            console.print(
                f"  template @ {n:,}: import {tp['import_s']:.1f} s, first build "
                f"{tp['cold_ms'] / 1e3:.2f} s ({tp['cold_compaction'].get('urgency')}), "
                f"{time.perf_counter() - t:.1f} s in all"
            )
            for sources, recall in CONFIGS:
                loops.append(
                    bench_turns(wd, tp, now, recall, sources, pairs[1:], args.loop_seconds, console)
                )
        t = time.perf_counter()
        trims = [bench_trim(thread, n) for n in sizes]
        console.print(f"  langchain trim_messages: {time.perf_counter() - t:.1f} s")

        # 4
        t = time.perf_counter()
        compact_ms, compact_parts, compact_info = bench_compact(wd, thread, args.compactions, now)
        console.print(f"  compaction: {time.perf_counter() - t:.1f} s")
        run_s = time.perf_counter() - started
        info["load_during_run"] = load.stop()
        info["loadavg_at_end"] = os.getloadavg()

        goals: list[tuple[str, str, str, bool]] = []

        # -- table 1: append latency
        tab = Table(
            title="1. Append latency per message (ms): 1,000 single-message calls onto a "
            "conversation of 10,000"
        )
        for col, just in (
            ("tool", "left"),
            ("calls", "right"),
            ("p50", "right"),
            ("p95", "right"),
            ("p99", "right"),
            ("mean", "right"),
            ("goal", "right"),
            ("pass", "left"),
            ("note", "left"),
        ):
            tab.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in results:
            if r.section != "append":
                continue
            s = stats(r.samples_ms)
            cw = not r.tool.startswith("llamaindex")
            ok = s["p50"] <= GOAL_APPEND_MS
            tab.add_row(
                r.tool,
                str(s["n"]),
                f"{s['p50']:.3f}",
                f"{s['p95']:.3f}",
                f"{s['p99']:.3f}",
                f"{s['mean']:.3f}",
                f"≤ {GOAL_APPEND_MS}" if cw else "ref 4–8",
                verdict(ok) if cw else "",
                r.note,
            )
            if cw and "SQLiteStore" not in r.tool:
                goals.append(
                    (f"append p50, {r.tool}", f"≤ {GOAL_APPEND_MS} ms", f"{s['p50']:.3f} ms", ok)
                )
        console.print(tab)

        # -- table 2: import
        tab = Table(title="2. Bulk import of 10,000 messages (fresh file each)")
        for col, just in (
            ("tool", "left"),
            ("seconds", "right"),
            ("msg/s", "right"),
            ("goal", "right"),
            ("pass", "left"),
            ("note", "left"),
        ):
            tab.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in results:
            if r.section != "import":
                continue
            cw = not r.tool.startswith("llamaindex")
            ok = (r.value or 0) >= GOAL_IMPORT_PER_S
            tab.add_row(
                r.tool,
                f"{r.extra['seconds']:.2f}",
                f"{r.value:,.0f}",
                f"≥ {GOAL_IMPORT_PER_S:,}" if cw else "ref ~7,000",
                verdict(ok) if cw else "",
                r.note,
            )
            if cw and "SQLiteStore" not in r.tool:
                goals.append(
                    (
                        f"import, {r.tool}",
                        f"≥ {GOAL_IMPORT_PER_S:,} msg/s",
                        f"{r.value:,.0f} msg/s",
                        ok,
                    )
                )
        console.print(tab)

        # -- table 3: build loop
        tab = Table(
            title=f"3. Stateful build, warm (ms): build_sync of a new user message (stored, then "
            f"built), then the reply appended (timed apart); cl100k, budget {BUDGET:,}"
        )
        for col, just in (
            ("history", "right"),
            ("tool", "left"),
            ("n", "right"),
            ("first / restart", "right"),
            ("p50", "right"),
            ("p50 w/o store", "right"),
            ("p95", "right"),
            ("p99", "right"),
            ("mean", "right"),
            ("× smaller", "right"),
            ("reply append p50/p95", "right"),
            ("bg sum.", "right"),
            ("check", "left"),
            ("note", "left"),
        ):
            tab.add_column(col, justify=just)  # type: ignore[arg-type]
        by_size = {tp["messages"]: tp for tp in templates}
        p50s: dict[tuple[int, bool, bool], float] = {}
        for lp in loops:
            p50s[(lp["messages"], lp["sources"], lp["recall"])] = statistics.median(lp["build_ms"])
        for i, n in enumerate(sizes):
            tp = by_size[n]
            for lp in (x for x in loops if x["messages"] == n):
                s = stats(lp["build_ms"])
                a = stats(lp["append_ms"])
                cfg = config_label(lp["sources"], lp["recall"])
                prev = p50s.get((sizes[i - 1], lp["sources"], lp["recall"])) if i else None
                check = "ok" if not lp["over_budget"] else f"OVER ×{lp['over_budget']}"
                tab.add_row(
                    f"{n:,}",
                    f"cw build_sync, {cfg}",
                    str(s["n"]),
                    f"{tp['cold_ms']:,.0f} / {lp['restart_ms']:,.0f}",
                    f"{s['p50']:.2f}",
                    f"{statistics.median(lp['unstored_ms']):.2f}",
                    f"{s['p95']:.2f}",
                    f"{s['p99']:.2f}",
                    f"{s['mean']:.2f}",
                    f"{s['p50'] / prev:.2f}" if prev else "",
                    f"{a['p50']:.2f} / {a['p95']:.2f}",
                    str(lp["summaries"]),
                    f"{check} (≤ {lp['worst_tokens']:,})",
                    f"{len(lp['sources_in'])}/{8 * lp['sources'] + lp['recall']} sources in; import "
                    f"{tp['import_s']:.1f} s; {lp['journal']} {tp['file_mb']:.0f} MB",
                )
                label = f" @ {n:,}, {cfg}"
                goals.append(
                    (
                        "build p50" + label,
                        f"≤ {GOAL_BUILD_P50_MS} ms",
                        f"{s['p50']:.2f} ms",
                        s["p50"] <= GOAL_BUILD_P50_MS,
                    )
                )
                goals.append(
                    (
                        "build p99" + label,
                        f"≤ {GOAL_BUILD_P99_MS} ms",
                        f"{s['p99']:.2f} ms",
                        s["p99"] <= GOAL_BUILD_P99_MS,
                    )
                )
            tr = trims[i]
            ts = stats(tr["samples_ms"])
            prev_trim = statistics.median(trims[i - 1]["samples_ms"]) if i else None
            tab.add_row(
                "",
                "langchain trim_messages",
                str(ts["n"]),
                "",
                f"{ts['p50']:.2f}",
                "",
                f"{ts['p95']:.2f}",
                f"{ts['p99']:.2f}",
                f"{ts['mean']:.2f}",
                f"{ts['p50'] / prev_trim:.2f}" if prev_trim else "",
                "",
                "",
                f"{tr['tokens']:,} tok",
                f"stateless; {tr['kept']} msgs kept",
            )
            tab.add_section()
        console.print(tab)
        console.print(
            "  first / restart: the first build after the import (the tail is 2× the window "
            "and nothing is summarised yet, so it compacts inline before returning) / the "
            "first build of a new process on a copy of that file (tail reloaded). × smaller: "
            "p50 over the p50 at the next smaller history. p50 w/o store: each build less its "
            "own append of the new message (what a stateless build does; the append is table "
            "1's operation). bg sum.: background summaries during the loop. The benchmark's own "
            "fixture (up to 100,000 generated messages) is gc.freeze()d, so the collector's "
            "full passes do not rescan it inside the timed builds."
        )
        for sources, recall in CONFIGS:
            for a_n, b_n in itertools.pairwise(sizes):
                a_k, b_k = (a_n, sources, recall), (b_n, sources, recall)
                if a_k in p50s and b_k in p50s:
                    ratio = p50s[b_k] / p50s[a_k]
                    goals.append(
                        (
                            f"build p50 {b_n:,} / {a_n:,}, {config_label(sources, recall)}",
                            f"≤ {GOAL_SCALING}×",
                            f"{ratio:.2f}×",
                            ratio <= GOAL_SCALING,
                        )
                    )

        # -- table 5: stages
        tab = Table(
            title="5. Where a warm stateful build goes (mean ms per build): engine stages from "
            "report.timings_ms; Conversations' own parts timed around its methods; store calls "
            "timed on the store's worker thread"
        )
        keys = list(dict.fromkeys(k for lp in loops for k in lp["stage_means_ms"]))
        cols = ("history", "engine", *keys, "wall − total", "_tail", "_check", "store msg")
        for col in (*cols, "store calls (ms, calls per build)"):
            tab.add_column(col, justify="left" if col.startswith("store calls") else "right")
        for lp in loops:
            ph = lp["phase_means_ms"]
            calls = ", ".join(
                f"{k} {v:.2f} ({lp['store_calls_per_build'][k]:.1f})"
                for k, v in lp["store_ms_per_build"].items()
            )
            tab.add_row(
                f"{lp['messages']:,}",
                config_label(lp["sources"], lp["recall"]),
                *(f"{lp['stage_means_ms'].get(k, 0.0):.3f}" for k in keys),
                f"{lp['wrapper_ms']:.3f}",
                f"{ph['_tail']:.3f}",
                f"{ph['_check']:.3f}",
                f"{ph['store message']:.3f}",
                calls,
            )
        console.print(tab)
        console.print(
            "  wall − total: build_sync's wall time minus the engine's report total, i.e. the "
            "stateful wrapper (_tail refresh + compaction check + storing the message + the sync "
            "facade and thread hops)."
        )

        # -- table 4: compaction
        cs = stats(compact_ms)
        tab = Table(
            title=f"4. Rule compaction of 1,000 messages: compact_sync(force=True), "
            f"{len(compact_ms)} fresh conversations (ms)"
        )
        cols = ("p50", "p95", "mean", "cold _tail / store / summarizer / rest (p50s)", "goal")
        for col in (*cols, "pass", "result"):
            tab.add_column(col, justify="left" if col == "result" else "right")
        ok = cs["p50"] <= GOAL_COMPACT_MS
        ci = compact_info
        med = {k: statistics.median(v) for k, v in compact_parts.items()}
        tab.add_row(
            f"{cs['p50']:.1f}",
            f"{cs['p95']:.1f}",
            f"{cs['mean']:.1f}",
            f"{med['_tail']:.1f} / {med['store']:.1f} / {med['summarizer']:.1f} / {med['rest']:.1f}",
            f"≤ {GOAL_COMPACT_MS:.0f} (LLM: 2,000)",
            verdict(ok),
            f"{ci['method']}: {ci['original']} → {ci['retained']} msgs + summary "
            f"({ci['summary_chars']:,} chars); {ci['tokens_before']:,} → {ci['tokens_after']:,} "
            f"tokens; {', '.join(ci['strategies'])}",
        )
        goals.append(
            (
                "rule compaction of 1,000, p50",
                f"≤ {GOAL_COMPACT_MS:.0f} ms",
                f"{cs['p50']:.1f} ms",
                ok,
            )
        )
        console.print(tab)

        # -- goals
        tab = Table(title="Goals")
        for col in ("goal", "target", "measured", "pass"):
            tab.add_column(col, justify="left" if col == "goal" else "right")
        for name, target, measured, ok in goals:
            tab.add_row(name, target, measured, verdict(ok))
        console.print(tab)
        ld = info["load_during_run"]
        console.print(
            f"total run time {run_s:.0f} s; 1-min load average during the run: min {ld['min']:.2f}, "
            f"mean {ld['mean']:.2f}, max {ld['max']:.2f} (other processes share the cores: "
            f"p95/p99 are noisy, compare p50s)"
        )

        prof_text: dict[str, str] = {}
        if args.profile:
            prof_text = profiles(wd, thread, now)
            for title, text in prof_text.items():
                console.print(f"[bold]cProfile: {title}[/]")
                console.print(text, markup=False, highlight=False)

        if args.json:
            doc = {
                "machine": info,
                "config": {
                    "budget": BUDGET,
                    "turns": args.turns,
                    "sizes": sizes,
                    "li_batch": args.li_batch,
                    "compactions": args.compactions,
                    "run_seconds": run_s,
                },
                "append_import": [
                    {
                        "section": r.section,
                        "tool": r.tool,
                        "stats_ms": stats(r.samples_ms) if r.samples_ms else None,
                        "per_s": r.value,
                        "note": r.note,
                        **r.extra,
                        "samples_ms": r.samples_ms,
                    }
                    for r in results
                ],
                "first_builds": templates,
                "build_loops": [
                    {
                        **lp,
                        "build_stats_ms": stats(lp["build_ms"]),
                        "append_stats_ms": stats(lp["append_ms"]),
                    }
                    for lp in loops
                ],
                "langchain_trim": [{**tr, "stats_ms": stats(tr["samples_ms"])} for tr in trims],
                "compaction": {
                    "samples_ms": compact_ms,
                    "parts_ms": compact_parts,
                    "stats_ms": cs,
                    **compact_info,
                },
                "goals": [
                    {"goal": g, "target": t_, "measured": m, "pass": ok} for g, t_, m, ok in goals
                ],
                "profile": prof_text,
            }
            args.json.write_text(json.dumps(doc, indent=1))
            console.print(f"raw results written to {args.json}")
        return 0 if all(lp["over_budget"] == 0 for lp in loops) else 1
    finally:
        wd.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
