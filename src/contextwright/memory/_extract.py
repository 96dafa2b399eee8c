"""Memory extraction: what a conversation says about the user, as short statements.

Memory extraction (docs/design-notes.md) pulls valuable information out
of every conversation automatically — users do not maintain a memory base by hand —
merged with what is already known and persisted. This module does the pulling out by
rules (`_extract_llm` by a model); `MemoryWriter` merges and persists. An `Extractor` turns messages into `Extracted` items:
a third-person statement ("User is 35 years old" / "用户今年35岁"), a category, an
importance from 0 to 100, an optional ``key`` naming a single-valued fact (a newer
item with the same key supersedes the stored one), and the ids of the messages it
came from.

`RuleExtractor` is the default (no network by default). It mines USER
messages only — what the assistant says is not a fact about the user — sentence by
sentence and clause by clause, in English and Chinese. The rules, as pattern → kind:
normalised content, key, importance (``KINDS`` holds the numbers; docs/design-notes.md,
Memory extraction, gives the reasons: 90 age/education, 85 work, 80 intent, 70 family, 60
preference):

- "remember that…", "don't forget…", "keep in mind…", 记住…, 别忘了… → the inner
  statement, with the kind and key of the rule that reads it (else a plain fact);
  95, above anything inferred.
- "I'm 35", "I am 35 years old", "I turned 35", 我今年35岁, 我35岁 → age: "User is 35
  years old" / "用户今年35岁"; key ``age``; 90. "My name is…", 我叫… → ``name``; 90.
- "I have a master's degree…", "I graduated from…", 我本科毕业于…, 我是硕士学历 →
  education; key ``education``; 90. "I'm allergic to…", 我对…过敏 → health; 90.
- "I work at/for X", 我在X工作 → employer; key ``employer``; 85. "I'm a nurse",
  "I work as…", 我是一名…, 我是程序员, 我是做…的 → occupation; key ``occupation``; 85.
- "I'm planning to…", "I plan to…", "I'm going to…", "I will…", "next week I…",
  "I'm interested in…", 我打算…, 我计划…, 下周我要…, 我对…感兴趣 → intent; no key; 80.
- "I live in X", "I moved to X", 我住在X, 我搬到了X → location; key ``location``; 75.
  "I'm from X", 我是上海人 → origin; key ``origin``; 70.
- "my daughter is 7", "my daughter Mia…", 我女儿今年7岁, 我有两个孩子 → family;
  70; key ``family.daughter`` (``family.children``…) when the statement gives the
  relative's age or name, which a newer statement updates — anything else about
  them is unkeyed, so it does not supersede the age. "I'm married", 我已婚 → key
  ``marital_status``; 70.
- "I prefer / like / love / hate / don't like X", "my favourite X is Y", 我喜欢X,
  我不喜欢X, 我更喜欢X → preference: "User likes X" / "用户喜欢X"; no key; 60.

Precision matters more than recall: a wrong memory is worse than a missing one,
because it is injected into every later conversation. So the rules skip questions
("am I 35?", "你喜欢什么?"), hypotheticals ("if I were…", "如果我…"), quoted or
reported speech ("she said 'I love cats'"), and negations that would flip the
meaning ("I don't live in Berlin" matches no rule; "I don't like X" is the
preference "User doesn't like X"). Names and numbers are kept verbatim.

The records live in `_extracted`, the English and Chinese rule tables in `_rules_en`
and `_rules_zh`; this module holds the importances (``KINDS``) and the reading
itself: sentences, quotes, clauses, the guards, the first rule that matches.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import replace

from .._errors import ConfigError
from ..model._messages import Message
from ..model._parts import TextPart
from ._extracted import Extracted, Extractor, _clip, dedupe_key
from ._rules_en import (
    _CONTRACTIONS,
    _EN_AND,
    _EN_COMMA,
    _EN_LEAD,
    _HYPO_EN,
    _Q_EN,
    _REMEMBER_EN,
    _REPORTED_EN,
    _TIME_ALONE,
    EN_RULES,
    _en_statement,
)
from ._rules_zh import (
    _HYPO_ZH,
    _Q_ZH,
    _REMEMBER_ZH,
    _REPORTED_ZH,
    _SELF_ZH,
    _SUBJECT_ZH,
    _ZH_LEAD,
    _ZH_SPLIT,
    ZH_RULES,
    _zh_statement,
)

# Extracted, Extractor and dedupe_key are defined in _extracted; named here too, as
# the rest of the package reads extraction from this module.
__all__ = ["KINDS", "Extracted", "Extractor", "RuleExtractor", "dedupe_key"]


# -- the rule table ----------------------------------------------------------------

# kind: (category, importance, confidence). Importances (docs/design-notes.md, Memory
# extraction): age/education 90, work 85, intent 80, family 70, preference 60. Location
# sits between work and family: stable and identifying, less often decisive. An explicit
# "remember that…" outranks anything inferred; allergies are safety facts, and a name
# is identity: both rank with age. Confidence is lower where the rule is a heuristic
# (an occupation guessed from a noun's suffix, "I'll …").
KINDS: dict[str, tuple[str, int, float]] = {
    "remember": ("fact", 95, 1.0),
    "age": ("fact", 90, 0.95),
    "name": ("fact", 90, 0.9),
    "education": ("fact", 90, 0.9),
    "health": ("fact", 90, 0.9),
    "employer": ("fact", 85, 0.9),
    "occupation": ("fact", 85, 0.8),
    "work": ("fact", 85, 0.8),
    "intent": ("intent", 80, 0.75),
    "location": ("fact", 75, 0.9),
    "origin": ("fact", 70, 0.85),
    "family": ("fact", 70, 0.85),
    "marital_status": ("fact", 70, 0.9),
    "preference": ("preference", 60, 0.85),
}

# -- reading a message ---------------------------------------------------------------

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
# Quoted text is someone's words, not the user's statement: masked, then restored.
_QUOTED = re.compile(
    r'"[^"\n]{0,300}"|“[^”\n]{0,300}”|‘[^’\n]{0,300}’|「[^」\n]{0,300}」|『[^』\n]{0,300}』|`[^`\n]{0,300}`'
)
_SLOT = re.compile("\ue000(\\d+)\ue001")
_WIDE = {c: unicodedata.normalize("NFKC", chr(c)) for c in (*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B))}  # fmt: skip
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[.!?])(?=[\u4e00-\u9fff])|(?<=[。！？；;])\s*|\n+")
_TRIM = " \t.!?。！？,，;；:：~～…、"


class RuleExtractor:
    """Extraction by rules, in English and Chinese (table in the module docstring).

    ``locale``: "auto" applies each language's rules to the sentences written in it;
    "en" or "zh" applies only that language's. Full-width digits and letters are read
    as half width, so "我３５岁" gives "用户35岁".
    """

    name = "rules"

    def __init__(self, *, max_chars: int = 300) -> None:
        if max_chars < 20:
            raise ConfigError(f"RuleExtractor max_chars must be >= 20, got {max_chars}")
        self.max_chars = max_chars

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        return self.extract_sync(messages, locale=locale)

    def extract_sync(self, messages: Sequence[Message], *, locale: str = "auto") -> list[Extracted]:
        """`extract` without the event loop: pure computation."""
        if locale not in ("auto", "en", "zh") and not locale.startswith(("en", "zh")):
            raise ConfigError(f"locale must be 'auto', 'en' or 'zh', got {locale!r}")
        out: dict[str, Extracted] = {}
        for message in messages:
            if message.role != "user":
                continue  # the assistant's words are not facts about the user
            text = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
            for kind, content, key in self._read(text, locale[:2] if locale != "auto" else "auto"):
                category, importance, confidence = KINDS[kind.removeprefix("remember:")]
                if kind.startswith("remember"):  # asked to remember: the inner kind, ranked high
                    importance, confidence = KINDS["remember"][1:]
                clipped = _clip(content, self.max_chars)
                item = Extracted(clipped, category, importance, key, (message.id,), confidence)
                fold = dedupe_key(item.content)
                seen = out.get(fold)
                if seen is None:
                    out[fold] = item
                elif message.id not in seen.source_message_ids:
                    out[fold] = replace(
                        seen, source_message_ids=(*seen.source_message_ids, message.id)
                    )
        return list(out.values())

    def _read(self, text: str, locale: str) -> list[tuple[str, str, str | None]]:
        """(kind, content, key) for every statement in ``text``."""
        text = _FENCE.sub("\n", text).translate(_WIDE)
        text = re.sub(r"(?<=\w)’(?=\w)", "'", text)
        quoted: list[str] = []

        def mask(m: re.Match[str]) -> str:
            quoted.append(m.group(0))
            return f"\ue000{len(quoted) - 1}\ue001"

        text = _QUOTED.sub(mask, text)
        found: list[tuple[str, str, str | None]] = []
        for sentence in _SENTENCE.split(text):
            sentence = sentence.strip()
            if not sentence:
                continue
            zh = bool(_CJK.search(sentence))
            if locale != "auto" and locale != ("zh" if zh else "en"):
                continue
            for kind, content, key in self._sentence(sentence, zh):
                content = _SLOT.sub(lambda m: quoted[int(m[1])], content)
                found.append((kind, content.strip(_TRIM + " "), key))
        return found

    def _sentence(self, sentence: str, zh: bool) -> list[tuple[str, str, str | None]]:
        if not zh:
            for pattern, repl in _CONTRACTIONS:
                sentence = pattern.sub(repl, sentence)
        lead = _ZH_LEAD if zh else _EN_LEAD
        body = lead.sub("", sentence)
        remember = (_REMEMBER_ZH if zh else _REMEMBER_EN).match(body)
        if remember:
            if self._blocked(body, body, 0, zh, last=True):
                return []
            return [self._remember(remember["x"].strip(_TRIM), zh)]
        found: list[tuple[str, str, str | None]] = []
        clauses = self._clauses(sentence, zh)
        for i, (start, clause) in enumerate(clauses):
            if self._blocked(sentence, clause, start, zh, last=i == len(clauses) - 1):
                continue
            hit = self._match(lead.sub("", clause).strip(_TRIM), zh)
            if hit is not None:
                found.append(hit)
        return found

    def _clauses(self, sentence: str, zh: bool) -> list[tuple[int, str]]:
        """The clauses of a sentence with their offsets; a subject-less clause after one
        whose subject is the user gets "我" / "I" (我35岁，在杭州工作 → 我在杭州工作)."""
        out: list[tuple[int, str]] = []
        if zh:
            starts = [0, *(m.end() for m in _ZH_SPLIT.finditer(sentence))]
            ends = [*(m.start() for m in _ZH_SPLIT.finditer(sentence)), len(sentence)]
            self_subject = False
            for s, e in zip(starts, ends, strict=True):
                clause = _ZH_LEAD.sub("", sentence[s:e].strip())
                if self_subject and clause and not _SUBJECT_ZH.match(clause):
                    clause = "我" + clause
                self_subject = bool(_SELF_ZH.match(clause))
                out.append((s, clause))
            return out
        starts = [0, *(m.end() for m in _EN_COMMA.finditer(sentence))]
        ends = [*(m.start() for m in _EN_COMMA.finditer(sentence)), len(sentence)]
        for s, e in zip(starts, ends, strict=True):
            segment = sentence[s:e]
            bounds = [0, *(c.end() for c in _EN_AND.finditer(segment))]
            stops = [*(c.start() for c in _EN_AND.finditer(segment)), len(segment)]
            pieces: list[tuple[int, int, str]] = []  # (start, end, text) within the segment
            for a, b in zip(bounds, stops, strict=True):
                piece = segment[a:b].strip()
                if pieces and not re.match(r"^I\b", piece):
                    if re.match(r"^I\b", _EN_LEAD.sub("", pieces[-1][2])):
                        piece = "I " + piece  # "I'm 35 and live in Berlin"
                    else:  # "my daughter is 7 and loves…": not the user's clause, keep it whole
                        first = pieces.pop()
                        pieces.append((first[0], b, segment[first[0] : b].strip()))
                        continue
                pieces.append((a, b, piece))
            out.extend((s + a, piece) for a, _, piece in pieces if piece)
        # "Next week, I…": a time alone is not a clause, it belongs to the next one
        for i in range(len(out) - 2, -1, -1):
            if _TIME_ALONE.fullmatch(out[i][1].strip(_TRIM)):
                out[i : i + 2] = [(out[i][0], f"{out[i][1]}, {out[i + 1][1]}")]
        return out

    @staticmethod
    def _blocked(sentence: str, clause: str, start: int, zh: bool, *, last: bool) -> bool:
        """A question, a hypothetical, or reported speech: not a statement by the user."""
        before = sentence[:start]
        if zh:
            question = bool(re.search(r"[？?]\s*$", clause) or _Q_ZH.search(clause.rstrip(_TRIM)))
            return question or bool(_HYPO_ZH.search(before + clause) or _REPORTED_ZH.search(before))
        body = _EN_LEAD.sub("", clause)
        question = clause.rstrip().endswith("?") or (last and sentence.rstrip().endswith("?"))
        question = question or bool(_Q_EN.match(body))
        return question or bool(_HYPO_EN.search(before + clause) or _REPORTED_EN.search(before))

    @staticmethod
    def _match(clause: str, zh: bool) -> tuple[str, str, str | None] | None:
        for kind, pattern, build in ZH_RULES if zh else EN_RULES:
            m = pattern.match(clause)
            if m is not None:
                built = build(m)
                if built is not None:
                    content, key = built
                    return kind, content, key
        return None

    def _remember(self, x: str, zh: bool) -> tuple[str, str, str | None]:
        """An explicit "remember that…": the inner statement if a rule reads it, else as said."""
        inner = self._match(x, zh)
        if inner is not None:
            return f"remember:{inner[0]}", inner[1], inner[2]
        return "remember", _zh_statement(x) if zh else _en_statement(x), None
