"""`LLMSummarizer`: thread summaries written by a model, under a deadline, with the rules behind.

The prompt asks the model to merge the previous summary and the new messages (not to
append them); the message counts are appended by code, so they stay exact and the
rules (`RuleSummarizer`) can continue from an LLM summary. Any failure — timeout,
error, empty answer — falls back to the rules, and ``method`` says why
(``CompactionConfig.llm_fallback_to_rules``; docs/design-notes.md, Summaries). See
``_summary`` for the `Summarizer` contract.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import replace

from .._errors import ConfigError
from ..llm import LLM, describe_error
from ..model._messages import Message
from ..model._parts import TextPart
from ..tokens._count import TokenCounter
from ..tokens._truncate import truncate_to_tokens
from ._summary import RuleSummarizer, Summarizer, SummaryDraft, _clip
from ._summary_format import LABELS, Locale, RuleSummary, resolve_locale, strip_frame

__all__ = ["LLMSummarizer"]

PROMPTS: dict[Locale, tuple[str, str]] = {
    "en": (
        "You write faithful, concise summaries of conversations. You never invent facts.",
        "Update the running summary of a conversation between a user and an assistant.\n\n"
        "Merge the previous summary and the new messages into ONE summary. Do not just "
        "append the new messages: combine what belongs together, update what changed, and "
        "drop what no longer matters.\n"
        "Keep:\n"
        "- the user's background, goals and preferences;\n"
        "- decisions and conclusions, with their reasons;\n"
        "- open questions and unfinished tasks;\n"
        "- technical details: file names, commands, code languages, tool results that matter.\n"
        "Write in English, as short bullet lines, at most {max_tokens} tokens. "
        "Reply with the summary only.\n\n"
        "<previous_summary>\n{previous}\n</previous_summary>\n\n"
        "<new_messages>\n{messages}\n</new_messages>",
    ),
    "zh": (
        "你负责为对话撰写忠实、简洁的摘要，从不编造事实。",
        "请更新用户与助手之间对话的滚动摘要。\n\n"
        "把之前的摘要和新消息合并成一份摘要。不要把新消息简单地追加在后面：合并相关的内容，"
        "更新已经变化的信息，删掉不再重要的内容。\n"
        "需要保留：\n"
        "- 用户的背景、目标和偏好；\n"
        "- 决定和结论，以及理由；\n"
        "- 尚未解决的问题和未完成的任务；\n"
        "- 技术细节：文件名、命令、代码语言、重要的工具结果。\n"
        "用中文书写，使用简短的要点，最多 {max_tokens} 个 token。只输出摘要本身。\n\n"
        "<previous_summary>\n{previous}\n</previous_summary>\n\n"
        "<new_messages>\n{messages}\n</new_messages>",
    ),
}
_NONE = {"en": "(none)", "zh": "（无）"}
# Message text must not close the prompt's own tags and smuggle in instructions.
_PROMPT_TAG = re.compile(r"<(/?\s*(?:previous_summary|new_messages))", re.IGNORECASE)


def _transcript(messages: Sequence[Message], tool_result_chars: int) -> str:
    lines: list[str] = []
    call_names: dict[str, str] = {}
    for m in messages:
        if m.role == "tool":
            for r in m.tool_results:
                name = r.name or call_names.get(r.call_id) or "tool"
                flag = " (error)" if r.is_error else ""
                lines.append(f"[tool {name}{flag}] {_clip(r.text, tool_result_chars)}")
            continue
        text = "\n".join(p.text for p in m.parts if isinstance(p, TextPart)).strip()
        if text:
            lines.append(f"[{m.role}] {text}")
        for call in m.tool_calls:
            call_names[call.id] = call.name
            lines.append(f"[{m.role} calls {call.name}] {_clip(call.arguments, tool_result_chars)}")
    return _PROMPT_TAG.sub(r"‹\1", "\n".join(lines))


class LLMSummarizer:
    """Summaries written by an `LLM`, under a deadline, falling back to the rules.

    The prompt (``PROMPTS``, English or Chinese; or ``prompt_template`` with the
    fields ``{previous}``, ``{messages}`` and ``{max_tokens}``) asks the model to merge
    the previous summary with the new messages. The call runs under
    ``asyncio.wait_for(deadline)``. A timeout, an exception or an empty answer falls
    back to ``fallback`` (default `RuleSummarizer`) with ``method`` naming the reason;
    an answer over ``max_tokens`` is cut, not rejected. The new messages are shown to
    the model with tool output cut to ``tool_result_chars`` characters and the whole
    transcript to ``max_input_tokens``.
    """

    def __init__(
        self,
        llm: LLM,
        counter: TokenCounter,
        *,
        deadline: float = 8.0,
        fallback: Summarizer | None = None,
        prompt_template: str | None = None,
        system: str | None = None,
        tool_result_chars: int = 300,
        max_input_tokens: int = 8000,
    ) -> None:
        if deadline <= 0:
            raise ConfigError(f"LLMSummarizer deadline must be > 0 seconds, got {deadline}")
        if prompt_template is not None:
            try:
                prompt_template.format(previous="", messages="", max_tokens=0)
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(
                    "prompt_template may use only {previous}, {messages} and {max_tokens} "
                    f"(write literal braces as {{{{ }}}}): {exc!r}"
                ) from None
        self.llm = llm
        self.counter = counter
        self.deadline = deadline
        self.fallback: Summarizer = fallback or RuleSummarizer(counter)
        self.prompt_template = prompt_template
        self.system = system
        self.tool_result_chars = tool_result_chars
        self.max_input_tokens = max_input_tokens
        self.name = f"llm:{llm.name}"

    def build_prompt(
        self, messages: Sequence[Message], *, previous: str | None, max_tokens: int, locale: Locale
    ) -> tuple[str, str]:
        """The ``(system, prompt)`` pair sent to the model."""
        system, template = PROMPTS[locale]
        transcript = truncate_to_tokens(
            _transcript(messages, self.tool_result_chars),
            self.max_input_tokens,
            self.counter,
            keep="both",
        )
        # The counts line is the code's business: the model is not asked to keep it.
        body = strip_frame(previous or "") or _NONE[locale]
        prompt = (self.prompt_template or template).format(
            previous=_PROMPT_TAG.sub(r"‹\1", body), messages=transcript, max_tokens=max_tokens
        )
        return (self.system if self.system is not None else system), prompt

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft:
        if max_tokens < 0:
            raise ConfigError(f"max_tokens must be >= 0, got {max_tokens}")
        loc = resolve_locale(locale, messages, previous)
        system, prompt = self.build_prompt(
            messages, previous=previous, max_tokens=max_tokens, locale=loc
        )
        try:
            answer = await asyncio.wait_for(
                self.llm.complete(prompt, system=system, max_tokens=max(1, max_tokens)),
                self.deadline,
            )
        except asyncio.TimeoutError:
            reason = f"timeout after {self.deadline:g}s"
        except Exception as exc:  # any failure of the model falls back to the rules
            reason = describe_error(exc, 160)
        else:
            body = strip_frame(answer if isinstance(answer, str) else "")
            if body:
                return self._draft(body, messages, previous, max_tokens, loc)
            reason = "empty answer"
        draft = await self.fallback.summarize(
            messages, previous=previous, max_tokens=max_tokens, locale=loc
        )
        return replace(draft, method=f"{draft.method} (fallback: {reason})")

    def _draft(
        self,
        body: str,
        messages: Sequence[Message],
        previous: str | None,
        max_tokens: int,
        locale: Locale,
    ) -> SummaryDraft:
        counts = RuleSummary.parse(previous) if previous else RuleSummary()
        for m in messages:
            counts.messages += 1
            counts.user_messages += m.role == "user"
            counts.assistant_messages += m.role == "assistant"
            counts.tool_messages += m.role == "tool"
            counts.tool_calls += len(m.tool_calls)
        head, tail = LABELS[locale]["header"], counts.counts_line(locale)
        content = _fit_frame(head, body, tail, max_tokens, self.counter)
        return SummaryDraft(
            content=content,
            method=self.name,
            messages=counts.messages,
            user_messages=counts.user_messages,
            assistant_messages=counts.assistant_messages,
            tool_messages=counts.tool_messages,
            tokens=self.counter.count(content),
        )


def _fit_frame(head: str, body: str, tail: str, max_tokens: int, counter: TokenCounter) -> str:
    """``head``, ``body`` and ``tail`` on their lines within ``max_tokens``, cutting the body.

    Whole lines of the body are kept while they fit (the model's bullets stay intact);
    only when not even the first one fits is it cut inside, and only when the frame
    itself does not fit is the whole text cut.
    """
    text = f"{head}\n{body}\n{tail}"
    if counter.count(text) <= max_tokens:
        return text
    lines = body.splitlines()
    lo, hi = 0, len(lines)  # the first lo lines fit; the first hi do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if counter.count("\n".join([head, *lines[:mid], tail])) <= max_tokens:
            lo = mid
        else:
            hi = mid
    if lo:
        return "\n".join([head, *lines[:lo], tail])
    room = max_tokens - counter.count(head) - counter.count(tail) - 2
    while room > 0:
        cut = truncate_to_tokens(lines[0] if lines else body, room, counter)
        text = f"{head}\n{cut}\n{tail}"
        over = counter.count(text) - max_tokens
        if over <= 0:
            return text
        room -= over  # tokens can merge differently across the joins
    return truncate_to_tokens(f"{head}\n{body}\n{tail}", max_tokens, counter)
