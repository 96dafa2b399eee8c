"""Memory extraction by a model: the prompt, the parsing of its answer, the fallback.

`LLMExtractor` asks an `LLM` for a JSON array instead of applying rules, under a deadline, parses the
answer robustly (code fences, prose around it) and validates every item (invalid ones
are dropped); on a timeout, an `LLMError` or an unusable answer it falls back to the
rules. How the last call went is in ``last_method`` (``"llm:<name>"`` or
``"rules (fallback: <reason>)"``); `LLMExtractor.extract_with_method` returns it with
the items, for callers that share one extractor across tasks.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError
from ..llm import LLM, describe_error
from ..model._messages import Message
from ..model._parts import TextPart
from ._extract import _CJK, RuleExtractor
from ._extracted import _I, Extracted, Extractor, _clip

__all__ = ["PROMPTS", "LLMExtractor", "parse_items"]

PROMPTS: dict[str, tuple[str, str]] = {
    "en": (
        "You extract durable facts about the user from conversations, for a long-term memory. "
        "You never invent facts.",
        "Read the conversation and list what is worth remembering about the USER in later "
        "conversations: facts about them (age, education, work, location, family), stated "
        "preferences, plans and intentions, and anything they asked you to remember. Ignore "
        "what the assistant says, greetings, questions, hypotheticals and one-off requests.\n"
        "Answer with a JSON array only, at most {max_items} items, each an object with:\n"
        '- "content": a short third-person statement, e.g. "User is 35 years old";\n'
        '- "category": "fact", "preference", "intent", "skill" or "project";\n'
        '- "importance": 0-100 (age, education 90; work 85; plans 80; family 70; preferences 60);\n'
        '- "key": a stable name such as "age", "employer", "location", "family.daughter" when '
        "the statement replaces an earlier value of a single-valued fact, else null;\n"
        '- "source": the number of the message it comes from.\n'
        "Answer [] when there is nothing worth remembering.\n\n"
        "<conversation>\n{conversation}\n</conversation>",
    ),
    "zh": (
        "你负责从对话中提取关于用户的长期记忆，从不编造事实。",
        "阅读下面的对话，列出以后的对话中值得记住的关于用户的信息：用户的事实（年龄、学历、工作、"
        "所在地、家庭）、明确表达的偏好、计划和意向，以及用户要求记住的内容。忽略助手说的话、寒暄、"
        "提问、假设和一次性的请求。\n"
        "只输出一个 JSON 数组，最多 {max_items} 项，每项是一个对象：\n"
        '- "content"：简短的第三人称陈述，用中文，例如 "用户今年35岁"；\n'
        '- "category"："fact"、"preference"、"intent"、"skill" 或 "project"；\n'
        '- "importance"：0-100（年龄、学历 90；工作 85；计划 80；家庭 70；偏好 60）；\n'
        '- "key"：当这条信息会取代同一事实的旧值时，给出稳定的名字，如 "age"、"employer"、'
        '"location"、"family.daughter"，否则为 null；\n'
        '- "source"：信息来自的消息编号。\n'
        "没有值得记住的内容时输出 []。\n\n"
        "<conversation>\n{conversation}\n</conversation>",
    ),
}
CATEGORY_ALIASES = {"facts": "fact", "preferences": "preference", "intents": "intent",
                    "intention": "intent", "plan": "intent", "goal": "intent",
                    "skills": "skill", "projects": "project"}  # fmt: skip
# The categories asked for, with the importance an item gets when it gives none.
LLM_CATEGORIES = {"fact": 70, "preference": 60, "intent": 80, "skill": 60, "project": 70}
_PROMPT_TAG = re.compile(r"<(/?\s*conversation)", _I)
_KEY = re.compile(r"[a-z0-9_][a-z0-9_.\-]{0,63}")


def parse_items(answer: str) -> list[Any] | None:
    """The JSON array in a model's answer, or None if there is none.

    Tolerates code fences and prose around the array, and an object wrapping it
    (``{"memories": […]}``); the first position that decodes to a list wins.
    """
    text = re.sub(r"```[a-zA-Z]*", " ", answer)
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch not in "[{":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            for name in ("memories", "items", "facts", "results"):
                if isinstance(value.get(name), list):
                    return list(value[name])
    return None


def _validate(item: Any, numbered: Sequence[Message], max_chars: int) -> Extracted | None:
    """An `Extracted` from one item of the model's array, or None if it is unusable."""
    if not isinstance(item, dict):
        return None
    content, category = item.get("content"), item.get("category", "fact")
    if not isinstance(content, str) or not content.strip() or not isinstance(category, str):
        return None
    category = category.strip().lower()
    category = CATEGORY_ALIASES.get(category, category)
    if category not in LLM_CATEGORIES:
        return None
    importance: Any = item.get("importance")
    if isinstance(importance, str):
        importance = importance.strip()
        importance = float(importance) if re.fullmatch(r"\d+(?:\.\d+)?", importance) else None
    if isinstance(importance, bool) or not isinstance(importance, (int, float)):
        importance = LLM_CATEGORIES[category]
    importance = max(0, min(100, round(importance)))
    key = item.get("key")
    if isinstance(key, str):
        key = "_".join(key.strip().lower().split())
        key = key if _KEY.fullmatch(key) else None
    else:
        key = None
    source = item.get("source")
    users = [m.id for m in numbered if m.role == "user"]
    if isinstance(source, int) and not isinstance(source, bool) and 1 <= source <= len(numbered):
        ids: tuple[str, ...] = (numbered[source - 1].id,)
    else:
        ids = tuple(users)
    return Extracted(_clip(content, max_chars), category, importance, key, ids, 0.8)


def _transcript(messages: Sequence[Message], result_chars: int) -> str:
    lines: list[str] = []
    for n, m in enumerate(messages, 1):
        if m.role == "tool":
            text = _clip(m.text, result_chars)
        else:
            text = "\n".join(p.text for p in m.parts if isinstance(p, TextPart)).strip()
        if text:
            lines.append(f"[{n} {m.role}] {text}")
    return _PROMPT_TAG.sub(r"‹\1", "\n".join(lines))


class LLMExtractor:
    """Extraction by an `LLM`, under a deadline, falling back to the rules.

    The prompt (``PROMPTS``, English or Chinese by the messages' script, or ``prompt``
    with the fields ``{conversation}`` and ``{max_items}``) asks for a JSON array of
    ``{content, category, importance, key, source}``. Items that are not objects, lack
    content or name an unknown category are dropped (``last_dropped`` counts them);
    importance is clamped to 0..100 (missing: the category's default); a malformed key
    becomes None; at most ``max_items`` are kept. A timeout, an exception from the
    model, or an answer with no JSON array falls back to ``fallback`` (default
    `RuleExtractor`); ``last_method`` says which way the last call went:
    ``"llm:<name>"`` or ``"rules (fallback: <reason>)"``. Concurrent callers sharing
    one extractor should use `extract_with_method`, which returns the method with the
    items instead of leaving it on the object.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        deadline: float = 8.0,
        fallback: Extractor | None = None,
        max_items: int = 10,
        prompt: str | None = None,
        system: str | None = None,
        max_tokens: int = 800,
        max_input_chars: int = 12_000,
        tool_result_chars: int = 200,
        max_chars: int = 300,
    ) -> None:
        if deadline <= 0:
            raise ConfigError(f"LLMExtractor deadline must be > 0 seconds, got {deadline}")
        if max_items < 1:
            raise ConfigError(f"LLMExtractor max_items must be >= 1, got {max_items}")
        if prompt is not None and "{conversation}" not in prompt:
            raise ConfigError("an LLMExtractor prompt must contain {conversation}")
        self.llm = llm
        self.deadline = deadline
        self.fallback: Extractor = fallback or RuleExtractor()
        self.max_items = max_items
        self.prompt = prompt
        self.system = system
        self.max_tokens = max_tokens
        self.max_input_chars = max_input_chars
        self.tool_result_chars = tool_result_chars
        self.max_chars = max_chars
        self.name = f"llm:{llm.name}"
        self.last_method = ""
        self.last_dropped = 0

    def build_prompt(self, messages: Sequence[Message], locale: str = "auto") -> tuple[str, str]:
        """The ``(system, prompt)`` pair sent to the model."""
        if locale == "auto":
            locale = (
                "zh" if any(_CJK.search(m.text) for m in messages if m.role == "user") else "en"
            )
        system, template = PROMPTS["zh" if locale.startswith("zh") else "en"]
        transcript = _transcript(messages, self.tool_result_chars)
        if len(transcript) > self.max_input_chars:  # the newest messages matter most
            transcript = "…" + transcript[-self.max_input_chars :]
        # str.replace, not format: the template holds JSON braces
        body = (self.prompt or template).replace("{max_items}", str(self.max_items))
        return (self.system if self.system is not None else system), body.replace(
            "{conversation}", transcript
        )

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        items, self.last_method = await self.extract_with_method(messages, locale=locale)
        return items

    async def extract_with_method(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> tuple[list[Extracted], str]:
        """The items and how they were made (``"llm:<name>"`` or ``"rules (fallback: …)"``)."""
        if not any(m.role == "user" for m in messages):
            return [], self.name  # nothing the user said: no call needed
        system, prompt = self.build_prompt(messages, locale)
        try:
            answer = await asyncio.wait_for(
                self.llm.complete(prompt, system=system, max_tokens=self.max_tokens), self.deadline
            )
        except asyncio.TimeoutError:
            reason = f"timeout after {self.deadline:g}s"
        except Exception as exc:  # any failure of the model falls back to the rules
            reason = describe_error(exc, 160)
        else:
            raw = parse_items(answer if isinstance(answer, str) else "")
            if raw is not None:
                items = [v for v in (_validate(i, messages, self.max_chars) for i in raw) if v]
                self.last_dropped = len(raw) - len(items)
                return items[: self.max_items], self.name
            reason = "no JSON array in the answer"
        items = await self.fallback.extract(messages, locale=locale)
        return items, f"{self.fallback.name} (fallback: {reason})"
