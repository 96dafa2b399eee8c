"""Evaluation: how much of what a question needs does a small context bring back?

``contextwright eval locomo DIR --budget 1000,2000,4000,8000 [--embedder …] [--json]``
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

The report gives, per budget N, recall overall (pooled over evidence turns) and
per category, the per-conversation recalls with their mean and spread, the mean and maximum
tokens used besides the system prompt and the question, how many builds went
over the window (must be 0), and build latency p50/p95 (the `Conversations.build`
call, recall included). ``--cv`` adds a leave-one-conversation-out summary of the
ranker's knobs (`_locomo_cv`).

Categories are the numbers of the data's ``category`` field, with the meaning
LoCoMo's release documents and the data bears out: 1 multi-hop (2.3-3.6
evidence turns per question on the development split, the others about 1),
2 temporal ("When did …"), 3 open-domain / commonsense ("Would … likely …"),
4 single-hop, 5 adversarial (an ``adversarial_answer``, no ``answer``): category
1 is multi-hop, not single-hop, whatever order tables list them in.

`memory_qa_engine` is the configuration measured: a reusable setup for assistants
that answer questions about a long past. Its method is in ``history/_rank.py``
(ranking) and ``history/_recall.py`` (packing). On the LoCoMo development split
(5 conversations, 997 questions; 2 cores shared with other work):

    budget N                      1,000   2,000   4,000   8,000
    recall, lexical               0.772   0.851   0.892   0.947   p95 12-14 ms
    recall, + static vectors      0.798   0.873   0.928   0.968   (``--embedder auto``)
    recall, + MiniLM vectors      0.807   0.875   0.930   0.970   p95 24-31 ms

The static vectors (``StaticEmbedder``, the ``static`` extra) are the default
when installed (``--embedder auto``; ``none`` for lexical).

For reference, on the same split: the recency window alone 0.03 / 0.09 / 0.18 /
0.33, and plain BM25 over turns 0.62 / 0.68 / 0.76 / 0.83. With MiniLM about
13 ms of a build is the embedding of the question (one CPU thread).

This module holds the configuration and the measuring; the files are read in
`_locomo_data`, and the ``eval`` command lives in `_locomo_cli`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...budget._budget import Budget
from ...history import RecallSource
from ...history._rank import RankWeights, TurnIndex, TurnRanker
from ...history._recall import MEMORY_QA_SHARES
from ...model._blocks import unescape_content
from ...model._messages import Message
from ...pipeline._engine import ContextEngine
from ...service._conversations import Conversations
from ...stores import AsyncStore, Backend, SQLiteStore, Store
from ...tokens._count import TokenCounter
from ...tokens._exact import TiktokenCounter
from ...tokens._frame import count_messages
from ._locomo_data import LocomoConversation, Question, load_locomo

__all__ = ["CATEGORIES", "SYSTEM_PROMPT", "evaluate_locomo", "memory_qa_engine", "resolve_embedder"]

SYSTEM_PROMPT = (
    "You are a helpful assistant with a long memory of this conversation. "
    "Answer the user's question from the context; say so if it is not there."
)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TENANT, USER = "eval", "eval"
Observer = Callable[["Question", list[dict[str, Any]]], None]


# -- the configuration -------------------------------------------------------------------


def memory_qa_engine(
    store: Store | AsyncStore | Backend,
    *,
    counter: TokenCounter | None = None,
    embedder: Any = "auto",
    system_prompt: str = SYSTEM_PROMPT,
    weights: RankWeights | None = None,
    **engine_kw: Any,
) -> ContextEngine:
    """An engine for answering questions about a long conversation from a small window.

    Its one source is `RecallSource.for_memory_qa` over ``store``: stored turns
    ranked by full-text evidence spread to neighbours, speaker and date priors,
    and vector evidence from ``embedder`` (``"auto"``, the default: the static
    word vectors of the ``static`` extra when installed, for English and Chinese; None:
    lexical; or an `Embedder`, e.g. ``SentenceTransformerEmbedder()``; see
    `TurnRanker.for_memory_qa`), packed exactly to the allowance with
    ``counter`` (``weights``: the ranker's knobs, default `RankWeights()`). Recall
    gets most of the budget: ``budget=8000`` (an int) means
    ``Budget(8000, shares=MEMORY_QA_SHARES)``; a per-build budget should carry
    those shares too. Give `Conversations` the same store or `Backend` (its
    default recall then stays out: this engine brings its own)::

        backend = SQLiteBackend("chat.db").backend()
        convs = Conversations(memory_qa_engine(backend, budget=8000), backend)

    The goal restatement is off: the question is the last message anyway, and at
    1,000 tokens its copy would cost a recalled turn.
    """
    if isinstance(store, Backend):  # its roles, as `Conversations` reads them
        search, log = store.search, store.conversations
        db: Any = SimpleNamespace(
            search_outlines=search.search_outlines, speaker_names=search.speaker_names,
            read_outline=log.read_outline,
        )  # fmt: skip
    else:
        db = store if isinstance(store, AsyncStore) else AsyncStore(store)
    recall = RecallSource.for_memory_qa(db, embedder=embedder, weights=weights)
    budget = engine_kw.get("budget")
    if isinstance(budget, int) and not isinstance(budget, bool):
        engine_kw["budget"] = Budget(budget, shares=MEMORY_QA_SHARES)
    engine_kw.setdefault("restate_goal", False)
    engine = ContextEngine(
        system_prompt=system_prompt, sources=[recall], counter=counter, **engine_kw
    )
    # the engine's caching counter: the engine's count of the block is then a cache hit
    recall.counter = engine.counter
    return engine


def _recall_of(engine: ContextEngine) -> RecallSource:
    return next(s for s in engine.sources if isinstance(s, RecallSource))


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
            "recall": rate(self.hits), "evidence": len(self.hits), "hits": sum(self.hits),
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
    counter: TokenCounter, encoder: Any, observe: Observer | None, knobs: RankWeights | None,
    locale: str,
) -> dict[str, Any]:  # fmt: skip
    store = SQLiteStore(":memory:")
    db = AsyncStore(store)
    engine = memory_qa_engine(db, counter=counter, embedder=embedder, weights=knobs, locale=locale)
    weights = Budget(1, shares=MEMORY_QA_SHARES).weights()
    per_budget: dict[int, _Tally] = {b: _Tally() for b in budgets}
    opened = [Conversations(engine, store, recall=False)]
    threads: int | None = None
    try:
        t0 = time.perf_counter()
        await opened[0].append(conv.name, conv.messages, tenant=TENANT, user=USER)
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        await _recall_of(engine).prepare(conv.name, tenant=TENANT, locale=locale)
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
        for c in opened:  # background jobs end before the store closes under them
            await c.aclose()
        await db.close()
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
    if embedder is None or "torch" not in sys.modules:  # static vectors need no torch
        return None
    import torch

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
    embedder: Any = "auto",
    observe: Observer | None = None,
    weights: RankWeights | None = None,
    conversations: Sequence[LocomoConversation] | None = None,
    locale: str = "en",
) -> dict[str, Any]:
    """Run the evaluation over LoCoMo files; returns the report as a JSON-ready dict.

    ``observe(question, request)`` is called with every rendered request (tests
    use it to check what the builder saw). ``weights`` are the ranker's knobs;
    ``conversations``, when given, are used instead of reading ``paths`` again;
    ``locale`` is the engine's (``"zh"`` for the Chinese set, `_zh`);
    ``embedder`` as `memory_qa_engine`'s (the report names the one used).
    Besides the pooled figures, ``spread`` gives per budget the mean, standard
    deviation, minimum and maximum of the per-conversation recalls.
    """
    embedder = resolve_embedder(embedder, locale)
    # every file is read before any work
    convs = list(conversations) if conversations is not None else [
        c for p in paths for c in load_locomo(p)
    ]  # fmt: skip
    counter = TiktokenCounter("cl100k_base")
    encoder = TiktokenCounter("cl100k_base").encoding  # a second one: recounts share nothing
    tallies = {b: _Tally() for b in budgets}
    per_file: dict[str, Any] = {}

    async def main() -> None:
        for conv in convs:
            per_file[conv.name] = await _evaluate_one(
                conv, budgets, embedder, tallies, counter, encoder, observe, weights, locale
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
        "categories": {str(c): name for c, name in CATEGORIES.items()},
        "budgets": {str(b): t.summary() for b, t in tallies.items()},
        "spread": {str(b): spread([c["budgets"][str(b)]["recall"] for c in per_file.values()])
                   for b in budgets},
        "conversations": per_file,
    }  # fmt: skip


def resolve_embedder(embedder: Any, locale: str = "en") -> Any:
    """The embedder `memory_qa_engine` uses for ``locale``: ``"auto"`` resolved, else itself."""
    if not isinstance(embedder, str):
        return embedder
    ranker = TurnRanker.for_memory_qa(None, embedder)
    return ranker.embedder if ranker.uses_vectors(TurnIndex(locale=locale)) else None


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, population standard deviation, minimum and maximum of per-conversation figures."""
    if not values:
        return {"mean": 0.0, "sd": 0.0, "min": 0.0, "max": 0.0}
    return {
        "mean": statistics.fmean(values), "sd": statistics.pstdev(values),
        "min": min(values), "max": max(values),
    }  # fmt: skip
