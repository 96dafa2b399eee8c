"""Conversations and "providers" for the usage-feedback test and benchmark.

A provider here is a real tokenizer counting the request as the provider's format
sends it, standing in for the usage a provider reports:

* `OpenAIChat` — the OpenAI Chat request (``built.render("openai")``) counted as
  OpenAI's cookbook does with a real tiktoken encoding (o200k_base for gpt-4o and
  later): 3 tokens per message, its role and content, 3 to prime the reply;
* `AnthropicLike` — the Anthropic request (``built.render("anthropic")``) counted
  block by block with a real tokenizer of another vocabulary (Anthropic's is not
  published and no copy of it ships offline): per turn 3 tokens and its role, per
  block 3 tokens and its text, per system block 3 and its text, 3 for the reply.

`english_trace` and `chinese_trace` make deterministic chat traces (a user turn, an
assistant answer) from phrase lists, with numbers, names and punctuation mixed in;
`locomo_trace` and `seed_trace` read the real ones in ``../shared`` for the bench.
`run_trace` plays a trace through `Conversations`: build, "send" (count with the
provider), append the answer with the usage; one `Turn` row per turn.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextwright import BuiltContext, Conversations, Message

__all__ = [
    "AnthropicLike",
    "OpenAIChat",
    "Turn",
    "chinese_trace",
    "english_trace",
    "locomo_trace",
    "run_trace",
    "seed_trace",
]

Count = Callable[[str], int]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        kinds = ("text", "input_text", "output_text")
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in kinds
        )
    return ""


@dataclass
class OpenAIChat:
    """The OpenAI Chat request counted with a real encoding, as OpenAI's cookbook counts."""

    name: str
    count: Count

    def tokens(self, built: BuiltContext) -> int:
        return self.tokens_of(built.render("openai"))

    def tokens_of(self, messages: Sequence[dict[str, Any]]) -> int:
        """The tokens of a Chat Completions ``messages`` list (or a Responses ``input``)."""
        n = 3  # every reply is primed with <|start|>assistant<|message|>
        for m in messages:
            n += 3 + self.count(m["role"]) + self.count(_text(m.get("content")))
            if m.get("name"):
                n += 1 + self.count(m["name"])
        return n

    def usage(self, reported: int) -> dict[str, Any]:
        return {"prompt_tokens": reported, "completion_tokens": 20, "total_tokens": reported + 20}


@dataclass
class AnthropicLike:
    """The Anthropic request counted block by block with a real tokenizer of another vocabulary."""

    name: str
    count: Count

    def tokens(self, built: BuiltContext) -> int:
        return self.tokens_of(built.render("anthropic"))

    def tokens_of(self, req: dict[str, Any]) -> int:
        """The tokens of an Anthropic request's ``system`` and ``messages``."""
        n = 3
        for block in req.get("system") or []:
            n += 3 + self.count(block.get("text", ""))
        for m in req["messages"]:
            n += 3 + self.count(m["role"])
            content = m["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for b in blocks:
                n += 3 + self.count(b.get("text") or json.dumps(b, ensure_ascii=False))
        return n

    def usage(self, reported: int) -> dict[str, Any]:
        # a third of it read from the prompt cache: input_tokens is only what followed
        read = reported // 3
        return {
            "input_tokens": reported - read,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": read,
            "output_tokens": 20,
        }


# -- traces ---------------------------------------------------------------------------------

_EN_ASK = [
    "Can you check the {thing} for {name}? It was due on {day}.",
    "What did {name} say about the {thing} last {day}?",
    "I moved the {thing} to room {n}; is that OK with the {team} team?",
    "Remind me: how many {thing}s did we order in {month} ({n} or {m})?",
    "Please summarise the {team} meeting notes, especially the part on the {thing}.",
]
_EN_ANSWER = [
    "Sure. {name} confirmed the {thing} on {day}; the {team} team approved {n} of {m} items.",
    "According to the notes from {month}, {name} wants the {thing} reviewed before {day}.",
    "Room {n} works, but the {team} team asked that the {thing} stays there until {month}.",
    "We ordered {n} {thing}s in {month}, then {m} more after {name}'s request on {day}.",
    "The {team} meeting covered budgets, the {thing} schedule, and {name}'s proposal (v{n}.{m}).",
]
_EN_WORDS = {
    "thing": ["invoice", "projector", "deployment", "contract", "laptop", "roadmap", "dataset"],
    "name": ["Caroline", "Melanie", "Dr. Okafor", "Jean-Luc", "Priya", "Mr. Zhang"],
    "day": ["Monday", "Tuesday", "the 14th", "Friday afternoon", "March 3rd"],
    "team": ["finance", "platform", "design", "legal", "support"],
    "month": ["January", "April", "September", "December"],
}
_ZH_ASK = [
    "请帮我查一下{name}的{thing}，截止日期是{day}。",
    "{name}上次对{thing}有什么意见？我记得是{day}说的。",
    "我把{thing}搬到了{n}号会议室，{team}那边没问题吧？",
    "提醒我一下：{month}一共订了多少个{thing}？是{n}个还是{m}个？",
    "请总结{team}的会议纪要，重点是关于{thing}的部分。",
]
_ZH_ANSWER = [
    "好的。{name}已经在{day}确认了{thing}，{team}批准了{m}项中的{n}项。",
    "根据{month}的记录，{name}希望在{day}之前完成{thing}的审核。",
    "{n}号会议室可以，但是{team}要求{thing}在{month}之前不要移动。",
    "我们在{month}订了{n}个{thing}，{day}{name}又要求追加了{m}个。",
    "{team}的会议讨论了预算、{thing}的进度，以及{name}的提案（第{n}版）。",
]
_ZH_WORDS = {
    "thing": ["发票", "投影仪", "部署方案", "合同", "笔记本电脑", "路线图", "数据集"],
    "name": ["王经理", "李娜", "张医生", "陈老师", "刘工程师", "赵总"],
    "day": ["周一", "周二下午", "十四号", "上周五", "三月三日"],
    "team": ["财务部", "平台组", "设计组", "法务部", "客服中心"],
    "month": ["一月", "四月", "九月", "十二月"],
}


def _trace(
    asks: Sequence[str], answers: Sequence[str], words: dict[str, list[str]], turns: int, seed: int
) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(turns):
        fill = {k: rng.choice(v) for k, v in words.items()}
        fill |= {"n": str(rng.randint(2, 480)), "m": str(rng.randint(2, 99))}
        ask = " ".join(rng.choice(asks).format(**fill) for _ in range(rng.randint(1, 2)))
        answer = " ".join(rng.choice(answers).format(**fill) for _ in range(rng.randint(1, 3)))
        out.append((ask, answer))
    return out


def english_trace(turns: int, seed: int = 1) -> list[tuple[str, str]]:
    return _trace(_EN_ASK, _EN_ANSWER, _EN_WORDS, turns, seed)


def chinese_trace(turns: int, seed: int = 2) -> list[tuple[str, str]]:
    return _trace(_ZH_ASK, _ZH_ANSWER, _ZH_WORDS, turns, seed)


def locomo_trace(path: Path, turns: int) -> list[tuple[str, str]]:
    """Consecutive pairs of a LoCoMo conversation's turns (the first speaker asks)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    conv = doc.get("conversation", doc)
    sessions = sorted(
        (k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])
    )
    texts = [t["text"] for k in sessions for t in conv[k] if isinstance(t, dict) and t.get("text")]
    return list(zip(texts[0::2], texts[1::2], strict=False))[:turns]


def seed_trace(folder: Path, turns: int) -> list[tuple[str, str]]:
    """Paragraphs of the Chinese design documents, in pairs (a question, an answer)."""
    paragraphs: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        paragraphs += [p.strip()[:1200] for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
    return list(zip(paragraphs[0::2], paragraphs[1::2], strict=False))[:turns]


# -- playing a trace ------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn: the engine's raw count, its corrected count, the provider's, the factor."""

    raw: int
    corrected: int
    reported: int
    budget: int
    factor: float

    @property
    def error(self) -> float:
        """How far the corrected count is from the provider's (+: over-count)."""
        return self.corrected / self.reported - 1


async def run_trace(
    conversations: Conversations,
    conversation: str,
    trace: Sequence[tuple[str, str]],
    provider: OpenAIChat | AnthropicLike,
    *,
    tenant: str = "default",
    feedback: bool = True,
) -> list[Turn]:
    """Each turn: build, count with ``provider``, append the answer (with the usage)."""
    rows = []
    for ask, answer in trace:
        built = await conversations.build(conversation, ask, tenant=tenant)
        reported = provider.tokens(built)
        usage = built.report.usage
        raw = int(usage["raw"]) if usage else built.report.used
        corrected = int(usage["corrected"]) if usage else built.report.used
        budget = int(usage["budget"]) if usage else built.report.budget
        factor = float(usage["factor"]) if usage else 1.0
        rows.append(Turn(raw, corrected, reported, budget, factor))
        await conversations.append(
            conversation, [Message.assistant(answer)], tenant=tenant,
            usage=provider.usage(reported) if feedback else None,
        )  # fmt: skip
    return rows
