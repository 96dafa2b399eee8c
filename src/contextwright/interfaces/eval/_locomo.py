"""Evaluation: how much of what a question needs does a small context bring back?

``contextwright eval locomo DIR --budget 1000,2000,4000,8000 [--embedder minilm] [--json]``
measures recall on conversations in the format of LoCoMo ("Evaluating Very
Long-Term Conversational Memory of LLM Agents", ACL 2024): two speakers, dated
sessions of turns with ids (``D3:12``), and questions that list the ids of the
turns holding their answer (``evidence``).

For each conversation in DIR (a directory of ``*.json`` files, or one file; a
file holds one conversation object, or a list of ``{"conversation": …, "qa": …}``
samples as in the original ``locomo10.json``):

1. **Ingest.** Every turn is appended in order to a fresh SQLite store through
   `Conversations`: ``speaker_a`` is the user, anyone else the assistant
   (consecutive turns of one role are kept as they are), the speaker's name is
   the message name, the session's date (``"1:56 pm on 8 May, 2023"``, read as
   UTC) its ``created_at``. A shared photo's caption is part of what was said, so
   it is appended to the text as ``[shares a photo of …]``. The turn id goes to
   the message metadata, for scoring only. The recall index of the conversation
   is then prepared (turns read, and embedded with ``--embedder``), untimed, as
   a deployment would do in the background after an import.
2. **Build.** For every question with evidence, a context is built with the
   question as the new user message (``store_message=False``), a short fixed
   system prompt and a window of *N + the system prompt + the question*, counted
   by cl100k (`count_messages`, reply priming included), using
   `memory_qa_engine`. The builder sees the question text only: answers,
   evidence and categories never reach it (a test poisons them to prove it).
3. **Score.** The built context is rendered (OpenAI Chat format) and recounted
   from scratch with a fresh cl100k encoder; it must not exceed the window. An
   evidence turn is recalled when its ``text``, whitespace-normalised, is a
   substring of the concatenated rendered content (tag escaping undone).

Evidence ids are read leniently: ``"D8:6; D9:17"`` holds two ids and
``"D:11:26"`` means ``D11:26``. An id that names no turn of the file is
*skipped* and counted in the report (``unresolved_evidence``); a question left
with no resolvable evidence is skipped too (``questions_skipped``).

The report gives, per budget N, recall overall and per category (1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), the mean and maximum
tokens used besides the system prompt and the question, how many builds went
over the window (must be 0), and build latency p50/p95 (the `Conversations.build`
call, recall included).

`memory_qa_engine` is the configuration measured: a reusable setup for assistants
that answer questions about a long past. Its method is in ``history/_rank.py``
(ranking) and ``history/_recall.py`` (packing). On the LoCoMo development split
(5 conversations, 997 questions; 2 cores shared with other work):

    budget N                      1,000   2,000   4,000   8,000
    recall, lexical (default)     0.769   0.844   0.893   0.945   p95 12-14 ms
    recall, + MiniLM vectors      0.807   0.875   0.930   0.970   p95 24-31 ms

For reference, on the same split: the recency window alone 0.03 / 0.09 / 0.18 /
0.33, and plain BM25 over turns 0.62 / 0.68 / 0.76 / 0.83. With MiniLM about
13 ms of a build is the embedding of the question (one CPU thread).
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import json
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..._errors import UserError
from ...budget._budget import Budget
from ...history import RecallSource
from ...history._recall import MEMORY_QA_SHARES
from ...model._blocks import unescape_content
from ...model._messages import Message, Role
from ...pipeline._engine import ContextEngine
from ...service._conversations import Conversations
from ...stores import AsyncStore, SQLiteStore, Store
from ...tokens._count import TiktokenCounter, TokenCounter, count_messages

__all__ = [
    "CATEGORIES",
    "SYSTEM_PROMPT",
    "LocomoConversation",
    "Question",
    "add_parsers",
    "evaluate_locomo",
    "load_locomo",
    "memory_qa_engine",
    "run",
]

SYSTEM_PROMPT = (
    "You are a helpful assistant with a long memory of this conversation. "
    "Answer the user's question from the context; say so if it is not there."
)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TENANT, USER = "eval", "eval"
Observer = Callable[["Question", list[dict[str, Any]]], None]
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


# -- the configuration -------------------------------------------------------------------


def memory_qa_engine(
    store: Store | AsyncStore,
    *,
    counter: TokenCounter | None = None,
    embedder: Any = None,
    system_prompt: str = SYSTEM_PROMPT,
    **engine_kw: Any,
) -> ContextEngine:
    """An engine for answering questions about a long conversation from a small window.

    Its one source is `RecallSource.for_memory_qa` over ``store``: stored turns
    ranked by full-text evidence spread to neighbours, speaker and date priors,
    and vector evidence when ``embedder`` is given (an `Embedder`, e.g.
    ``SentenceTransformerEmbedder()``), packed exactly to the allowance with
    ``counter``. Build with ``budget=Budget(total, shares=MEMORY_QA_SHARES)`` so
    that recall gets most of the budget, and give `Conversations` the same store
    with ``recall=False`` (this engine brings its own). The goal restatement is
    off: the question is the last message anyway, and at 1,000 tokens its copy
    would cost a recalled turn.
    """
    db = store if isinstance(store, AsyncStore) else AsyncStore(store)
    recall = RecallSource.for_memory_qa(db, embedder=embedder)
    engine_kw.setdefault("restate_goal", False)
    engine = ContextEngine(
        system_prompt=system_prompt, sources=[recall], counter=counter, **engine_kw
    )
    # the engine's caching counter: the engine's count of the block is then a cache hit
    recall.counter = engine.counter
    return engine


def _recall_of(engine: ContextEngine) -> RecallSource:
    return next(s for s in engine.sources if isinstance(s, RecallSource))


# -- reading LoCoMo ------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """A question as the builder sees it: its text and nothing else."""

    text: str


@dataclass
class _Scored:
    question: Question
    evidence: list[str]  # resolved turn ids
    category: int


@dataclass
class LocomoConversation:
    """One LoCoMo file: the messages to ingest and the questions to score."""

    name: str
    messages: list[Message]
    items: list[_Scored]
    texts: dict[str, str]  # turn id -> text, for scoring
    unresolved_evidence: int = 0
    questions_skipped: int = 0


def _when(raw: Any, where: str) -> float:
    if not isinstance(raw, str):
        raise UserError(f"{where}: missing or not a string")
    text = " ".join(raw.split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y"):
        try:
            return float(calendar.timegm(datetime.strptime(text, fmt).timetuple()))
        except ValueError:
            continue
    raise UserError(f"{where}: cannot read the date {raw!r}")


def load_locomo(path: Path) -> list[LocomoConversation]:
    """The conversations of one LoCoMo file; raises `UserError` (one line) if it holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        return [
            _parse(
                {**d["conversation"], "qa": d.get("qa")}
                if isinstance(d.get("conversation"), dict)
                else d,
                f"{path.stem}#{d.get('sample_id', i)}",
                f"{path}[{i}]",
            )
            for i, d in enumerate(data)
        ]
    return [_parse(data, path.stem, str(path))]


def _parse(data: Any, name: str, path: str) -> LocomoConversation:
    """One conversation object (see the module docstring for what is read, and how)."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a LoCoMo conversation (expected a JSON object)")
    for key in ("speaker_a", "speaker_b"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UserError(f"{path}: not a LoCoMo conversation (no {key!r} string)")
    if not isinstance(data.get("qa"), list):
        raise UserError(f"{path}: not a LoCoMo conversation (no 'qa' list)")
    sessions = sorted(int(m.group(1)) for k in data if (m := _SESSION.fullmatch(k)))
    if not sessions:
        raise UserError(f"{path}: not a LoCoMo conversation (no 'session_N' lists)")
    speaker_a = data["speaker_a"]
    messages: list[Message] = []
    texts: dict[str, str] = {}
    for n in sessions:
        turns = data[f"session_{n}"]
        if not isinstance(turns, list):
            raise UserError(f"{path}: session_{n} is not a list of turns")
        at = _when(data.get(f"session_{n}_date_time"), f"{path}: session_{n}_date_time")
        for i, t in enumerate(turns):
            where = f"{path}: session_{n}[{i}]"
            if not isinstance(t, dict) or not all(
                isinstance(t.get(k), str) for k in ("speaker", "dia_id", "text")
            ):
                raise UserError(f"{where}: a turn needs 'speaker', 'dia_id' and 'text' strings")
            text = t["text"]
            caption = t.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} [shares {caption.strip()}]"
            role: Role = "user" if t["speaker"] == speaker_a else "assistant"
            messages.append(Message(
                role, text, created_at=at, name=t["speaker"], metadata={"dia_id": t["dia_id"]},
            ))  # fmt: skip
            texts[t["dia_id"]] = t["text"]
    conv = LocomoConversation(name, messages, [], texts)
    for i, qa in enumerate(data["qa"]):
        if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
            raise UserError(f"{path}: qa[{i}] needs a 'question' string")
        ids: list[str] = []
        for raw in qa.get("evidence") or []:
            found = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(str(raw))]
            conv.unresolved_evidence += sum(1 for e in found if e not in texts) + (not found)
            ids += [e for e in found if e in texts]
        ids = list(dict.fromkeys(ids))
        if not ids:
            conv.questions_skipped += 1
            continue
        category = qa.get("category")
        conv.items.append(
            _Scored(Question(qa["question"]), ids, category if isinstance(category, int) else 0)
        )
    return conv


# -- measuring -----------------------------------------------------------------------------


def _rendered_tokens(encoder: Any, request: list[dict[str, Any]]) -> int:
    """cl100k tokens of an OpenAI Chat request, counted from scratch (OpenAI's accounting)."""
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for m in request:
        total += 3 + len(encoder.encode_ordinary(_content(m)))
        if m.get("name"):
            total += 1 + len(encoder.encode_ordinary(m["name"]))
    return total


def _content(m: dict[str, Any]) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def _norm(text: str) -> str:
    return " ".join(text.split())


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class _Tally:
    hits: list[bool] = field(default_factory=list)
    by_category: dict[int, list[bool]] = field(default_factory=lambda: defaultdict(list))
    used: list[int] = field(default_factory=list)
    over: int = 0
    ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def rate(v: list[bool]) -> float:
            return sum(v) / len(v) if v else 0.0

        return {
            "recall": rate(self.hits), "evidence": len(self.hits),
            "per_category": {str(c): rate(v) for c, v in sorted(self.by_category.items())},
            "tokens_mean": statistics.fmean(self.used) if self.used else 0.0,
            "tokens_max": max(self.used, default=0), "over_budget": self.over,
            "latency_ms": {"p50": _pct(self.ms, 0.5), "p95": _pct(self.ms, 0.95)},
        }  # fmt: skip


async def _build(
    convs: Conversations, conversation: str, question: Question, budget: int,
    counter: TokenCounter,
) -> tuple[list[dict[str, Any]], int, float]:  # fmt: skip
    """Build for one question; returns the OpenAI request, its window and the build time.

    Only the question's text reaches the engine: this function is all the builder
    sees of a QA item, and a `Question` holds nothing else.
    """
    fixed = count_messages(counter, [Message.system(SYSTEM_PROMPT), Message.user(question.text)])
    start = time.perf_counter()
    built = await convs.build(
        conversation, question.text, tenant=TENANT, user=USER, store_message=False,
        budget=Budget(budget + fixed, shares=MEMORY_QA_SHARES),
    )  # fmt: skip
    ms = (time.perf_counter() - start) * 1e3
    return built.render("openai"), budget + fixed, ms


async def _evaluate_one(
    conv: LocomoConversation, budgets: Sequence[int], embedder: Any, tallies: dict[int, _Tally],
    counter: TokenCounter, encoder: Any, observe: Observer | None,
) -> dict[str, Any]:  # fmt: skip
    store = SQLiteStore(":memory:")
    db = AsyncStore(store)
    engine = memory_qa_engine(db, counter=counter, embedder=embedder)
    weights = Budget(1, shares=MEMORY_QA_SHARES).weights()
    per_budget: dict[int, _Tally] = {b: _Tally() for b in budgets}
    opened = [Conversations(engine, store, recall=False)]
    threads: int | None = None
    try:
        t0 = time.perf_counter()
        await opened[0].append(conv.name, conv.messages, tenant=TENANT, user=USER)
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        await _recall_of(engine).prepare(conv.name, tenant=TENANT)
        prepare_s = time.perf_counter() - t0
        threads = _single_threaded(embedder)
        for b in budgets:
            # The in-process tail fits what the recent section can show (with room);
            # recall sees every turn older than the tail.
            convs = Conversations(
                engine, store, recall=False, window_tokens=max(1, int(b * weights["recent"]))
            )
            opened.append(convs)
            for item in conv.items:
                request, total, ms = await _build(convs, conv.name, item.question, b, counter)
                if observe is not None:
                    observe(item.question, request)
                tokens = _rendered_tokens(encoder, request)
                text = _norm(unescape_content("\n".join(_content(m) for m in request)))
                hits = [_norm(conv.texts[e]) in text for e in item.evidence]
                for tally in (tallies[b], per_budget[b]):
                    tally.hits += hits
                    tally.by_category[item.category] += hits
                    tally.used.append(tokens - (total - b))
                    tally.over += tokens > total
                    tally.ms.append(ms)
    finally:
        _restore_threads(threads)
        await db.close()
        for c in opened:
            c.close()
    return {
        "turns": len(conv.messages), "questions": len(conv.items),
        "unresolved_evidence": conv.unresolved_evidence, "questions_skipped": conv.questions_skipped,
        "ingest_s": round(ingest_s, 3), "prepare_s": round(prepare_s, 3),
        "budgets": {str(b): t.summary() for b, t in per_budget.items()},
    }  # fmt: skip


def _single_threaded(embedder: Any) -> int | None:
    """Run torch on one thread while queries are embedded one at a time; returns the old count.

    A single short query gains little from two intra-op threads, and on a busy
    two-core machine they wait for each other: measured p95 of one MiniLM query
    embedding 14 ms on one thread against 100+ ms on two under load.
    """
    if embedder is None:
        return None
    try:
        import torch
    except ImportError:
        return None
    old = int(torch.get_num_threads())
    torch.set_num_threads(1)
    return old


def _restore_threads(old: int | None) -> None:
    if old is not None:
        import torch

        torch.set_num_threads(old)


def evaluate_locomo(
    paths: Sequence[Path],
    budgets: Sequence[int],
    *,
    embedder: Any = None,
    observe: Observer | None = None,
) -> dict[str, Any]:
    """Run the evaluation over LoCoMo files; returns the report as a JSON-ready dict.

    ``observe(question, request)`` is called with every rendered request (tests
    use it to check what the builder saw).
    """
    convs = [c for p in paths for c in load_locomo(p)]  # every file is read before any work
    counter = TiktokenCounter("cl100k_base")
    encoder = TiktokenCounter("cl100k_base").encoding  # a second one: recounts share nothing
    tallies = {b: _Tally() for b in budgets}
    per_file: dict[str, Any] = {}

    async def main() -> None:
        for conv in convs:
            per_file[conv.name] = await _evaluate_one(
                conv, budgets, embedder, tallies, counter, encoder, observe
            )

    t0 = time.perf_counter()
    asyncio.run(main())
    return {
        "embedder": getattr(embedder, "name", None) or "none",
        "counter": "cl100k_base", "files": [str(p) for p in paths],
        "questions": sum(len(c.items) for c in convs),
        "unresolved_evidence": sum(c.unresolved_evidence for c in convs),
        "questions_skipped": sum(c.questions_skipped for c in convs),
        "seconds": round(time.perf_counter() - t0, 1),
        "budgets": {str(b): t.summary() for b, t in tallies.items()},
        "conversations": per_file,
    }  # fmt: skip


# -- the command ---------------------------------------------------------------------------


def add_parsers(sub: Any) -> None:
    ev = sub.add_parser("eval", help="measure recall on a benchmark")
    which = ev.add_subparsers(dest="benchmark", required=True)
    lo = which.add_parser(
        "locomo", help="LoCoMo conversations: recall of evidence turns per budget"
    )
    lo.add_argument("dir", type=Path, help="a directory of LoCoMo *.json files, or one file")
    lo.add_argument("--budget", dest="budgets", default="1000,2000,4000,8000",
                    help="comma-separated token budgets besides system prompt and question")  # fmt: skip
    lo.add_argument("--embedder", choices=["none", "minilm"], default="none",
                    help="add vector evidence from all-MiniLM-L6-v2 (needs sentence-transformers)")  # fmt: skip
    lo.add_argument("--json", action="store_true", help="print the raw report as JSON")


def _budgets(raw: str) -> list[int]:
    try:
        out = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--budget must be comma-separated integers, got {raw!r}") from None
    if not out or any(b <= 0 for b in out):
        raise UserError(f"--budget must be positive integers, got {raw!r}")
    return out


def _files(where: Path) -> list[Path]:
    if where.is_file():
        return [where]
    if not where.is_dir():
        raise UserError(f"{where}: no such directory")
    files = sorted(where.glob("*.json"))
    if not files:
        raise UserError(f"{where}: no *.json files")
    return files


def run(args: argparse.Namespace, out: Any) -> int:
    """``eval locomo``: the report as a table, or as JSON with ``--json``; returns 0."""
    budgets = _budgets(args.budgets)
    files = _files(args.dir)
    embedder = None
    if args.embedder == "minilm":
        from ...memory import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    report = evaluate_locomo(files, budgets, embedder=embedder)
    if args.json:
        out.write(json.dumps(report, indent=1) + "\n")
    else:
        _table(report, out)
    return 0


def _table(report: dict[str, Any], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    cats = sorted({c for b in report["budgets"].values() for c in b["per_category"]})
    table = Table(title=f"LoCoMo recall · embedder {report['embedder']} · "
                  f"{report['questions']} questions · cl100k", title_justify="left")  # fmt: skip
    for col in ("budget", "recall", *(f"{c} {CATEGORIES.get(int(c), '?')}" for c in cats),
                "tokens mean", "max", "over", "p50 ms", "p95 ms"):  # fmt: skip
        table.add_column(col, justify="right")
    for b, r in report["budgets"].items():
        table.add_row(
            b, f"{r['recall']:.3f}", *(f"{r['per_category'].get(c, 0):.3f}" for c in cats),
            f"{r['tokens_mean']:.0f}", str(r["tokens_max"]), str(r["over_budget"]),
            f"{r['latency_ms']['p50']:.1f}", f"{r['latency_ms']['p95']:.1f}",
        )  # fmt: skip
    console = Console(file=out, width=140)
    console.print(table)
    per = Table(title="per conversation (recall by budget)", title_justify="left")
    per.add_column("file")
    for b in report["budgets"]:
        per.add_column(b, justify="right")
    for name, c in report["conversations"].items():
        per.add_row(name, *(f"{c['budgets'][b]['recall']:.3f}" for b in report["budgets"]))
    console.print(per)
    console.print(
        f"unresolved evidence ids skipped: {report['unresolved_evidence']} · questions "
        f"without usable evidence skipped: {report['questions_skipped']} · {report['seconds']} s"
    )
