"""Incremental thread summaries: older turns folded into one short text, turn after turn.

When history outgrows its share of the budget, the oldest turns leave the prompt and a
summary takes their place (what it keeps: docs/design-notes.md, Summaries — topics,
decisions, preferences, technical details; a new summary merges with the old). A
`Summarizer` is incremental:
it gets the previous summary (or ``None``) and only the messages since, and returns a
`SummaryDraft` that *merges* the two, never longer than ``max_tokens`` by the given
counter. Nothing here deletes a message; the caller decides what the summary replaces.

Two summarizers ship:

* `RuleSummarizer` — no model, no network, deterministic; the default
  (docs/design-notes.md, Summaries). It writes the rule summary in English or Chinese::

      [Summary of the earlier conversation]
      Topics:
      - How do I serve HTTP asynchronously in Rust?
      Conclusions:
      - Use tokio as the async runtime.
      Technical context:
      - Code blocks: rust ×2
      - Files: Cargo.toml
      - Tool calls: search ×1
      - search → 3 crates found: tokio, hyper, axum
      (Compressed 6 messages: 2 user, 3 assistant, 1 tool; 1 tool call)

  The format is its own data (`_summary_format`): `RuleSummary.parse` reads a
  rendered summary back into item lists and counts, so the next round merges lists
  (de-duplicated, the newest kept when a list is capped) and adds counts, instead of
  appending text to text. Lines it does not recognise (an LLM's summary, a
  hand-written note) are kept as items of an "Earlier summary" section.

* `LLMSummarizer` (``_summary_llm``) — asks an `LLM` to merge the previous summary and
  the new messages, under a deadline; on any failure (timeout, error, empty answer) it
  falls back to the rules and says so in ``method`` (``llm_fallback_to_rules``).
  The message counts are appended by code, not by the model, so they stay exact and
  the rules can continue from an LLM summary.

The rules read only the newest turns in full and count the rest, so they are also an
`OutlineSummarizer`: a compaction hands them the older messages as stored outlines
(`Store.read_outline`) and never decodes thousands of messages it only counts.

Over ``max_tokens``, the rules drop the oldest items first (the longest list loses
first) and an LLM answer keeps as many of its first lines as fit; only when that is
not enough is the text cut with `truncate_to_tokens`. ``max_tokens`` is a hard cap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._errors import ConfigError
from ..model._messages import Message
from ..model._parts import TextPart
from ..stores import MessageOutline
from ..tokens._count import TokenCounter
from ..tokens._truncate import truncate_to_tokens
from ._summary_format import (
    CODE_FENCE,
    Locale,
    RuleSummary,
    add_counts,
    item_key,
    merge_items,
    resolve_locale,
)

__all__ = ["OutlineSummarizer", "RuleSummarizer", "Summarizer", "SummaryDraft"]


@dataclass(frozen=True)
class SummaryDraft:
    """A summary and what it covers.

    ``content`` is the text, at most ``max_tokens`` by the summarizer's counter
    (``tokens``). ``method`` says how it was made: ``"rules"``, ``"llm:<name>"`` or
    ``"rules (fallback: <reason>)"``. The counts are cumulative: every message the
    summary stands for, the previous summary's ones included. ``stand_in``: a
    provider's compaction of the same messages (`ProviderCompactor`), sent in
    place of ``content`` to that provider; ``()`` for the others.
    """

    content: str
    method: str
    messages: int
    user_messages: int
    assistant_messages: int
    tool_messages: int
    tokens: int
    stand_in: tuple[Message, ...] = ()


@runtime_checkable
class Summarizer(Protocol):
    """Folds ``messages`` into ``previous`` (a summary text or ``None``), incrementally.

    The result merges the previous summary with the new messages (not just appended),
    stays within ``max_tokens`` by the summarizer's counter, and is written in
    ``locale`` (``"en"``, ``"zh"``, or ``"auto"`` to pick from the messages).
    """

    name: str

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft: ...


@runtime_checkable
class OutlineSummarizer(Summarizer, Protocol):
    """A `Summarizer` that reads only the newest messages in full and counts the rest.

    ``full_messages(roles)`` says how many of the newest of messages with these
    roles (oldest first) it reads in full; `summarize_outlined` takes the older ones
    as stored outlines (`Store.read_outline`: role, text but no tool results, tool
    call names) and the newest as messages, and returns what `summarize` would for
    all of them. A compaction of a long conversation then never decodes the
    thousands of stored messages (their tool results above all) it only counts.
    """

    def full_messages(self, roles: Sequence[str]) -> int: ...

    async def summarize_outlined(
        self,
        older: Sequence[MessageOutline],
        newer: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft: ...


# -- extraction ------------------------------------------------------------------------

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# File names in prose and tool arguments: ASCII path characters only, because
# Python's \w would swallow the Chinese around a name ("修改main.rs文件").
_FILE = re.compile(
    r"(?<![A-Za-z0-9_/.-])(?:[A-Za-z0-9_.-]+/)*(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*\."
    r"(?:py|pyi|ipynb|rs|toml|lock|json|jsonl|ya?ml|md|rst|txt|csv|tsx?|jsx?|mjs|go|java|kt|"
    r"c|h|cc|cpp|hpp|cs|rb|php|swift|sql|sh|ini|cfg|conf|env|html|css|scss|vue|xml|proto|tf)"
    r"|Dockerfile|Makefile)(?![A-Za-z0-9_])"
)
# Every file name above has a dot before a lower-case extension, or is one of the two
# names: texts without either (most prose) skip the costly scan.
_FILE_HINT = re.compile(r"\.[a-z]|Dockerfile|Makefile")
_MD_PREFIX = re.compile(r"^(?:[-*+•>]\s+|\d+[.)]\s+|#{1,6}\s+)+")
# A sentence ends at . ! ? before a space, or right after Chinese end punctuation. The
# zero-width Chinese alternative is tried at every position, so lines without such a
# mark are split by the first alternative alone (the same pieces, 3x faster).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])")
_SENTENCE_END_LATIN = re.compile(r"(?<=[.!?])\s+(?=\S)")
_CJK_END = "。！？；"
# Words that state a result or decision (the "Conclusions" / "关键结论" section). A
# sentence scores 2 per strong word and 1 for any weak one; each reply gives its
# best-scoring sentences.
# The lookahead names the first letters of the alternatives (ſ folds to s): it changes
# no match, but lets the engine skip other positions fast (2.6x on long replies).
_STRONG = re.compile(
    r"(?=[sſrduicgpmnf建应推决采使改选需可必结解确])"
    r"(?:\b(?:should|recommend\w*|suggest\w*|decid\w*|use|uses|using|switch(?:ed)? to|cho(?:o)?se|"
    r"go with|prefer\w*|must|needs? to|instead|fix(?:ed|es)?|solution|conclusion)\b"
    r"|建议|应该|推荐|决定|采用|使用|改用|选择|需要|可以|必须|结论|解决|确定)",
    re.IGNORECASE,
)
# An instruction at the start of a sentence is a decision too ("Add tokio to Cargo.toml").
_IMPERATIVE = re.compile(
    r"^(?:add|install|run|set|enable|disable|avoid|pin|keep|put|remove|replace|upgrade|"
    r"don't|do not|never|always)\b|^(?:请|先|不要|务必|记得)",
    re.IGNORECASE,
)
_WEAK = re.compile(  # with the same kind of lookahead as _STRONG
    r"(?=[iawrmb是为因所\d])"
    r"(?:\b(?:is|are|was|were|will|works?|returns?|means?|because)\b|是|为|因为|所以|\d)",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(?:(?:let me|let's see|i'll (?:check|look|search|run|try)|i will (?:check|look)|sure|"
    r"okay|ok|great|thanks|thank you|hi|hello|hey|yes|no)\b|好的|让我|我来|稍等|收到|谢谢|你好|嗯|是的)",
    re.IGNORECASE,
)


def _split_code(text: str) -> tuple[str, list[str]]:
    """Prose with fenced code blocks removed, and the blocks' languages."""
    langs = [(m.group(1) or "text").lower() for m in CODE_FENCE.finditer(text)]
    return CODE_FENCE.sub("\n", text), langs


def _sentences(prose: str) -> list[str]:
    out: list[str] = []
    for line in prose.splitlines():
        line = _MD_PREFIX.sub("", line.strip()).replace("**", "").strip()
        latin = line.isascii() or not any(mark in line for mark in _CJK_END)
        ends = _SENTENCE_END_LATIN if latin else _SENTENCE_END
        out.extend(p.strip() for p in ends.split(line) if p.strip())
    return out


def _clip(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters, cut at a clause or word if one is near."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    at = max(cut.rfind(c) for c in "，,；;：: ")
    if at >= limit // 2:
        cut = cut[:at]
    return cut.rstrip(" ,，;；:：") + "…"


def _is_filler(sentence: str) -> bool:
    """Greetings, acknowledgements and "let me check": neither topics nor conclusions."""
    if len(item_key(sentence)) < 3:
        return True
    return bool(_FILLER.match(sentence)) and len(sentence) < 40 and not _STRONG.search(sentence)


def _newest(items: list[str], n: int) -> list[str]:
    return items[-n:] if n > 0 else []


def _files(text: str) -> list[str]:
    if not _FILE_HINT.search(text):
        return []
    return [m.group(0).removeprefix("./") for m in _FILE.finditer(_URL.sub(" ", text))]


class RuleSummarizer:
    """The rule-based summary, incremental, in English or Chinese.

    Topics are the first substantive sentence of each user message; conclusions
    are up to ``conclusions_per_reply`` sentences of each assistant reply that state
    a result or decision (else its last sentence); the technical context counts code
    blocks by language and tool calls by name, lists file names, and keeps a head of
    at most ``tool_result_chars`` characters of each tool's latest result — tool
    output is never quoted at length. Lists are capped by the ``max_*`` settings,
    keeping the newest; items are cut to ``max_item_chars``.
    """

    def __init__(
        self,
        counter: TokenCounter,
        *,
        max_topics: int = 8,
        max_conclusions: int = 8,
        max_files: int = 12,
        max_tool_results: int = 4,
        max_notes: int = 8,
        conclusions_per_reply: int = 2,
        max_item_chars: int = 120,
        tool_result_chars: int = 80,
    ) -> None:
        caps = {
            "max_topics": max_topics,
            "max_conclusions": max_conclusions,
            "max_files": max_files,
            "max_tool_results": max_tool_results,
            "max_notes": max_notes,
            "conclusions_per_reply": conclusions_per_reply,
        }
        for key, value in caps.items():
            if value < 0:
                raise ConfigError(f"RuleSummarizer {key} must be >= 0, got {value}")
        if max_item_chars < 8 or tool_result_chars < 8:
            raise ConfigError("RuleSummarizer max_item_chars and tool_result_chars must be >= 8")
        self.counter = counter
        self.name = "rules"
        self.max_topics = max_topics
        self.max_conclusions = max_conclusions
        self.max_files = max_files
        self.max_tool_results = max_tool_results
        self.max_notes = max_notes
        self.conclusions_per_reply = conclusions_per_reply
        self.max_item_chars = max_item_chars
        self.tool_result_chars = tool_result_chars

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft:
        return self.summarize_sync(
            messages, previous=previous, max_tokens=max_tokens, locale=locale
        )

    def summarize_sync(
        self,
        messages: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft:
        """`summarize` without the event loop: pure computation, no I/O."""
        return self._summarize((), messages, previous, max_tokens, locale)

    async def summarize_outlined(
        self,
        older: Sequence[MessageOutline],
        newer: Sequence[Message],
        *,
        previous: str | None = None,
        max_tokens: int = 800,
        locale: str = "auto",
    ) -> SummaryDraft:
        """`summarize` of ``older`` then ``newer``, the older ones given as outlines.

        The same text as `summarize` of all of them as messages when ``newer`` holds
        at least the newest `full_messages` of them; with fewer, the outlines that the
        rules would have read are only counted.
        """
        return self._summarize(older, newer, previous, max_tokens, locale)

    def full_messages(self, roles: Sequence[str]) -> int:
        """How many of the newest messages (with ``roles``, oldest first) are read in full.

        Only the newest ``max_topics`` topics and ``max_conclusions`` conclusions
        survive the caps, so older messages are only counted (roles, tool calls,
        code languages); the sentence and conclusion rules, the costly part, run on
        the newest messages with twice the room the caps need, which leaves space
        for duplicates. Compacting 1,000 messages then costs about as much as 60.
        """
        users = replies = 0
        start = len(roles)
        need_users = 2 * self.max_topics
        need_replies = 2 * self.max_conclusions // max(1, self.conclusions_per_reply) + 1
        while start > 0 and (users < need_users or replies < need_replies):
            start -= 1
            users += roles[start] == "user"
            replies += roles[start] == "assistant"
        return len(roles) - start

    def _summarize(
        self,
        older: Sequence[MessageOutline],
        newer: Sequence[Message],
        previous: str | None,
        max_tokens: int,
        locale: str,
    ) -> SummaryDraft:
        if max_tokens < 0:
            raise ConfigError(f"max_tokens must be >= 0, got {max_tokens}")
        loc = resolve_locale(locale, [*older, *newer], previous)
        before = RuleSummary.parse(previous) if previous else RuleSummary()
        # What the rules read in full (`full_messages`) is extracted; the rest is counted.
        roles = [m.role for m in older] + [m.role for m in newer]
        split = max(0, len(roles) - self.full_messages(roles) - len(older))
        counted: list[MessageOutline | Message] = [*older, *newer[:split]]
        recent = self.extract(newer[split:])
        state = self._capped(
            before.merged(self._count_only(counted).merged(recent) if counted else recent)
        )
        content = self._fit(state, loc, max_tokens)
        return SummaryDraft(
            content=content,
            method=self.name,
            messages=state.messages,
            user_messages=state.user_messages,
            assistant_messages=state.assistant_messages,
            tool_messages=state.tool_messages,
            tokens=self.counter.count(content),
        )

    def extract(self, messages: Sequence[Message]) -> RuleSummary:
        """The `RuleSummary` of ``messages`` alone (no caps applied)."""
        s = RuleSummary()
        call_names: dict[str, str] = {}
        for m in messages:
            s.messages += 1
            if m.role == "user":
                s.user_messages += 1
                prose, langs = _split_code(m.text)
                add_counts(s.code, {lang: langs.count(lang) for lang in dict.fromkeys(langs)})
                topic = next((t for t in _sentences(prose) if not _is_filler(t)), None)
                if topic:
                    s.topics.append(_clip(topic.rstrip(":："), self.max_item_chars))
                s.files.extend(_files(prose))
            elif m.role == "assistant":
                s.assistant_messages += 1
                text = "\n".join(p.text for p in m.parts if isinstance(p, TextPart))
                prose, langs = _split_code(text)
                add_counts(s.code, {lang: langs.count(lang) for lang in dict.fromkeys(langs)})
                s.conclusions.extend(self._conclusions(prose))
                s.files.extend(_files(prose))
                for call in m.tool_calls:
                    s.tool_calls += 1
                    call_names[call.id] = call.name
                    add_counts(s.tools, {call.name: 1})
                    s.files.extend(_files(call.arguments))
            elif m.role == "tool":
                s.tool_messages += 1
                for r in m.tool_results:
                    name = r.name or call_names.get(r.call_id) or "tool"
                    head = next((ln for ln in r.text.splitlines() if ln.strip()), "")
                    if head:
                        s.results.pop(name, None)
                        s.results[name] = (_clip(head, self.tool_result_chars), r.is_error)
        # De-duplicate within this batch too (a question asked twice is one topic).
        s.topics = merge_items((), s.topics)
        s.conclusions = merge_items((), s.conclusions)
        s.files = merge_items((), s.files)
        return s

    @staticmethod
    def _count_only(messages: Sequence[MessageOutline | Message]) -> RuleSummary:
        """The counts `extract` would give, without reading the prose."""
        s = RuleSummary()
        for m in messages:
            s.messages += 1
            role = m.role
            if role == "user":
                s.user_messages += 1
            elif role == "assistant":
                s.assistant_messages += 1
                for call in m.tool_calls:
                    s.tool_calls += 1
                    add_counts(s.tools, {call if isinstance(call, str) else call.name: 1})
            elif role == "tool":
                s.tool_messages += 1
            if role in ("user", "assistant"):
                text = m.text
                if "```" in text:
                    langs = _split_code(text)[1]
                    add_counts(s.code, {lang: langs.count(lang) for lang in dict.fromkeys(langs)})
        return s

    def _conclusions(self, prose: str) -> list[str]:
        scored: list[tuple[int, int, str]] = []
        for i, sentence in enumerate(_sentences(prose)):
            # Questions ask, and "Here is the code:" only introduces what follows.
            if sentence.endswith(("?", "？", ":", "：")) or _is_filler(sentence):
                continue
            strong = len(_STRONG.findall(sentence)) + bool(_IMPERATIVE.match(sentence))
            score = 2 * strong + (_WEAK.search(sentence) is not None)
            scored.append((score, i, sentence))
        if not scored or self.conclusions_per_reply == 0:
            return []
        best = sorted((c for c in scored if c[0] > 0), key=lambda c: (-c[0], c[1]))
        chosen = best[: self.conclusions_per_reply] or [scored[-1]]  # else the last sentence
        return [_clip(s, self.max_item_chars) for _, _, s in sorted(chosen, key=lambda c: c[1])]

    def _capped(self, s: RuleSummary) -> RuleSummary:
        s.topics = _newest(s.topics, self.max_topics)
        s.conclusions = _newest(s.conclusions, self.max_conclusions)
        s.files = _newest(s.files, self.max_files)
        s.notes = _newest([_clip(n, self.max_item_chars) for n in s.notes], self.max_notes)
        while len(s.results) > self.max_tool_results:
            del s.results[next(iter(s.results))]
        return s

    def _fit(self, state: RuleSummary, locale: Locale, max_tokens: int) -> str:
        """Render within ``max_tokens``: drop oldest items, longest list first; then cut."""
        count = self.counter.count
        text = state.render(locale)
        if count(text) <= max_tokens:
            return text
        s = state.copy()
        # On a tie, what is cheapest to lose goes first; topics and conclusions last.
        while True:
            lists: list[list[str] | dict[str, int] | dict[str, tuple[str, bool]]] = [
                s.results, s.files, s.code, s.tools, s.notes, s.conclusions, s.topics,
            ]  # fmt: skip
            longest = max(lists, key=len)
            if not longest:
                break
            if isinstance(longest, list):
                del longest[0]
            else:
                del longest[next(iter(longest))]
            text = s.render(locale)
            if count(text) <= max_tokens:
                return text
        return truncate_to_tokens(text, max_tokens, self.counter)
