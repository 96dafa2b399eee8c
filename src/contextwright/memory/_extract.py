"""Memory extraction: what a conversation says about the user, as short statements.

Memory extraction (docs/design-notes.md) pulls valuable information out
of every conversation automatically — users do not maintain a memory base by hand —
merged with what is already known and persisted. This module does the pulling out;
`_writer` merges and persists. An `Extractor` turns messages into `Extracted` items:
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

`LLMExtractor` asks an `LLM` for a JSON array instead, under a deadline, parses the
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
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError
from ..llm import LLM, describe_error
from ..model._messages import Message, TextPart

__all__ = [
    "KINDS",
    "PROMPTS",
    "Extracted",
    "Extractor",
    "LLMExtractor",
    "RuleExtractor",
    "dedupe_key",
    "parse_items",
]


@dataclass(frozen=True)
class Extracted:
    """One statement worth remembering, before it is stored."""

    content: str
    category: str
    importance: int
    key: str | None
    source_message_ids: tuple[str, ...]
    confidence: float = 1.0


@runtime_checkable
class Extractor(Protocol):
    """Turns messages into `Extracted` items; ``locale`` is "en", "zh" or "auto"."""

    name: str

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]: ...


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

_Build = Callable[[re.Match[str]], tuple[str, str | None] | None]
_Rule = tuple[str, re.Pattern[str], _Build]
_I = re.IGNORECASE


def _rules(lang_flags: int, *specs: tuple[str, str, _Build]) -> list[_Rule]:
    return [(kind, re.compile(pattern, lang_flags), build) for kind, pattern, build in specs]


def _fixed(template: str, key: str | None = None) -> _Build:
    """A builder filling ``template`` with the match's named groups (pronouns rewritten)."""
    return lambda m: (
        template.format(**{k: _en_obj(v or "") for k, v in m.groupdict().items()}),
        key,
    )


# English: third person for what follows the verb ("visit my parents" → "visit their parents").
_EN_PRONOUNS = [
    (re.compile(r"\bI'm\b"), "the user is"), (re.compile(r"\bI've\b"), "the user has"),
    (re.compile(r"\bI'll\b"), "the user will"), (re.compile(r"\bI'd\b"), "the user would"),
    (re.compile(r"\bI\b"), "the user"), (re.compile(r"\bmy\b", _I), "their"),
    (re.compile(r"\bmyself\b", _I), "themselves"), (re.compile(r"\bmine\b", _I), "theirs"),
    (re.compile(r"\bme\b", _I), "them"),
]  # fmt: skip


def _en_obj(text: str) -> str:
    for pattern, repl in _EN_PRONOUNS:
        text = pattern.sub(repl, text)
    return text.strip()


def _zh_obj(text: str) -> str:
    # inside a statement "我" is the user talking about themself: 自己 reads naturally
    return re.sub(r"我(?!们)", "自己", text.replace("我的", "自己的"))


_ADV = (
    r"(?:(?:really|actually|currently|also|still|now|just|totally|absolutely|definitely|mostly|"
    r"usually|generally|truly|genuinely|do|already|recently|kind\s+of|kinda|sort\s+of)\s+)*"
)
_REL = (
    r"daughters?|sons?|kids?|children|child|baby|wife|husband|spouse|partner|girlfriend|"
    r"boyfriend|fianc[ée]e?|mother|father|mom|mum|dad|parents|brothers?|sisters?|grandmother|"
    r"grandfather|grandma|grandpa|twins"
)
_KIDS = r"daughters?|sons?|kids?|children|child|grandchildren|grandkids|twins|babies|baby"
_REL_KEY = {
    "mom": "mother", "mum": "mother", "dad": "father", "kid": "children", "kids": "children",
    "child": "children", "baby": "children", "twins": "children", "husband": "spouse",
    "wife": "spouse", "girlfriend": "partner", "boyfriend": "partner", "fiance": "partner",
    "fiancé": "partner", "fiancee": "partner", "fiancée": "partner", "grandma": "grandmother",
    "grandpa": "grandfather",
}  # fmt: skip
_TIME_EN = (
    r"(?:next\s+(?:week|month|year|weekend|summer|winter|spring|fall|autumn|semester|monday|"
    r"tuesday|wednesday|thursday|friday|saturday|sunday)|tomorrow|tonight|soon|this\s+(?:weekend|"
    r"summer|winter|spring|fall|autumn|year|month|week|friday|saturday|sunday)|later\s+this\s+"
    r"(?:week|month|year)|in\s+(?:a|one|two|three|four|five|six|a\s+few|\d+)\s+"
    r"(?:days?|weeks?|months?|years?))"
)
_TIME_ALONE = re.compile(_TIME_EN, _I)
_LIFE_EN = (
    r"apply|move|buy|learn|study|become|start|open|get|find|switch|change|travel|visit|retire|"
    r"emigrate|immigrate|relocate|quit|build|launch|sell|rent|invest|save|lose|write|take|go|"
    r"have|adopt|marry|hire"
)
# Objects that point back into the conversation say nothing lasting ("I love it").
_VAGUE_EN = re.compile(
    r"^(?:it|that|this|these|those|them|you|your|yours|him|her|so|the\s+(?:idea|answer|"
    r"suggestion|explanation|response|reply|way\s+you)|to\s+(?:think|know|say|ask|believe|"
    r"hear|see))\b",
    _I,
)
# Plans that are really conversational moves ("I'll check", "I'm going to ask you").
_CHATTY_EN = re.compile(
    r"^(?:ask|tell|say|check|try|need|paste|share|send|show|give|explain|repeat|rephrase|"
    r"clarify|answer|reply|respond|wait|think|let\s+you|get\s+back|look\s+into|see|do\s+(?:that|"
    r"it|this|so)|be\s+(?:honest|brief|quick|back|right|fine)|have\s+to|go\s+now|keep\s+that)\b",
    _I,
)
_JOBS = frozenset(
    ("nurse", "doctor", "chef", "pilot", "student", "lawyer", "clerk", "cook", "nanny",
     "dentist", "surgeon", "analyst", "architect", "medic", "paramedic", "pharmacist", "vet",
     "coach", "tutor", "intern", "founder", "ceo", "cto", "cfo", "agent", "president",
     "professor", "barista", "cashier", "midwife", "therapist", "scientist", "journalist")
)  # fmt: skip
_NOT_JOBS = frozenset(
    ("beginner", "newbie", "fan", "lover", "believer", "member", "user", "customer", "client",
     "teenager", "foreigner", "stranger", "outsider", "vegetarian", "christian", "civilian",
     "guardian", "human", "fool", "loser", "winner", "smoker", "drinker", "reader", "viewer",
     "listener", "follower", "subscriber", "supporter", "applicant", "immigrant", "migrant",
     "relative", "introvert", "extrovert", "bit", "little", "lot", "mother", "father", "parent")
)  # fmt: skip


_INTENSIFIER = re.compile(
    r"\b(?:really|actually|also|just|totally|absolutely|definitely|truly|genuinely|do|"
    r"kind\s+of|kinda|sort\s+of)\s+",
    _I,
)


def _age_en(m: re.Match[str]) -> tuple[str, str | None] | None:
    n = int(m["n"])
    return (f"User is {n} years old", "age") if 1 <= n <= 120 else None


def _pref_en(m: re.Match[str]) -> tuple[str, str | None] | None:
    x = m["x"].strip()
    if _VAGUE_EN.match(x) or len(x) < 2:
        return None
    # Intensifiers say nothing lasting and would defeat dedupe ("really loves" = "loves").
    adv = _INTENSIFIER.sub("", m["adv"] or "")
    verb = " ".join(m["v"].lower().split())
    if verb.startswith("don't"):
        verb = "doesn't" + verb[5:]
    elif verb != "can't stand":
        verb += "s"
    return f"User {adv}{verb} {_en_obj(x)}", None


def _family_en(m: re.Match[str]) -> tuple[str, str | None] | None:
    rest = m["rest"]
    if not rest.strip(" ,"):
        return None
    rel = m["rel"].lower()
    rel = _REL_KEY.get(
        rel, rel.rstrip("s") if rel in ("daughters", "sons", "brothers", "sisters") else rel
    )
    # Age and name identify the relative, and a newer statement updates them (key);
    # anything else about them accumulates (no key), so it does not erase the age.
    states = re.match(
        r"^(?:,?\s+[A-Z][\w-]*,?)?\s+(?:is|are|'s|turned|just\s+turned)\s+(?:an?\s+)?\d"
        r"|^(?:,?\s+[A-Z][\w-]*,?)?\s+(?:is\s+)?(?:called|named)\s|^'s\s+name\s+is\s|^\s+[A-Z][\w-]*$",
        rest,
    )
    head = m["x"][: len(m["x"]) - len(rest)]
    key = f"family.{rel}{_RANK.get((m['mod'] or '').lower(), '')}" if states else None
    gap = " " if rest[:1].isspace() else ""
    return f"User's {head}{gap}{_en_obj(rest)}", key


def _occupation_en(m: re.Match[str]) -> tuple[str, str | None] | None:
    words = m["np"].split()
    last = words[-1]
    if not last[0].islower() or any(w.lower() in _NOT_JOBS for w in words):
        return None  # "I'm an Italian", "I'm a big fan", "I'm a bit lost"
    lw = last.lower()
    if lw not in _JOBS and not lw.endswith(
        ("er", "or", "ist", "ian", "ant", "eer", "ive", "man", "woman")
    ):
        return None
    tail = f" {_en_obj(m['tail'])}" if m["tail"] else ""
    return f"User is {m['art'].lower()} {m['np']}{tail}", "occupation"


def _time_en(m: re.Match[str]) -> tuple[str, str | None] | None:
    x = m["x"].strip()
    if _CHATTY_EN.match(x) or len(x.split()) < 2:
        return None
    when = " ".join(m["t"].split())
    aux = (m["aux"] or "").lower()
    if aux:
        verb = "is" if aux == "'m" else "will"
        said = f"{verb} {_en_obj(x)}"
    elif re.match(r"(?:want|plan|hope|intend|need|expect|have)\b", x, _I):
        said = _third_person(_en_obj(x))  # "next year I want to…" → "the user wants to…"
    else:
        said = f"will {_en_obj(x)}"
    return f"{when[0].upper()}{when[1:]}, the user {said}", None


def _plan_en(template: str, min_words: int = 1) -> _Build:
    def build(m: re.Match[str]) -> tuple[str, str | None] | None:
        x = m["x"].strip()
        if _CHATTY_EN.match(x) or len(x.split()) < min_words:
            return None
        return template.format(**{k: _en_obj(v or "") for k, v in m.groupdict().items()}), None

    return build


def _checked(build: _Build, check: Callable[[re.Match[str]], bool]) -> _Build:
    return lambda m: build(m) if check(m) else None


_WORK = rf"^I(?:\s+{_ADV}work|'m\s+{_ADV}working)\s+"
EN_RULES: list[_Rule] = _rules(
    _I,
    ("age", r"^I'm\s+(?P<n>\d{1,3})(?:\s*(?:years?|yrs?)(?:\s+old)?|\s*y/?o)?(?:\s+(?:now|today|this\s+year|already))?$", _age_en),
    ("age", r"^I\s+(?:just\s+)?turned\s+(?P<n>\d{1,3})(?:\s+(?:years?\s+old|this\s+year|today|last\s+\w+|recently))?$", _age_en),
    ("age", r"^my\s+age\s+is\s+(?P<n>\d{1,3})$", _age_en),
    ("name", r"^my\s+name\s+is\s+(?P<x>[\w'-]+(?:\s+[\w'-]+){0,2})$", _checked(_fixed("User's name is {x}", "name"), lambda m: m["x"][0].isupper())),
    ("health", r"^I'm\s+(?:very\s+|severely\s+|highly\s+)?allergic\s+to\s+(?P<x>.+)$", _fixed("User is allergic to {x}")),
    ("marital_status", r"^I'm\s+(?P<x>(?:happily\s+|recently\s+|newly\s+|now\s+)?(?:married|single|divorced|engaged|widowed|separated)\b.*)$", _fixed("User is {x}", "marital_status")),
    ("family", rf"^I've\s+(?:got\s+)?(?P<x>(?:a|an|one|two|three|four|five|six|\d+|no)\s+(?:[\w-]+\s+)?(?:{_KIDS})\b.*)$", _fixed("User has {x}", "family.children")),
    ("family", rf"^my\s+(?P<x>(?:(?P<mod>older|younger|eldest|oldest|youngest|little|baby|elder|big|[\w-]+-year-old)\s+)?(?P<rel>{_REL})\b(?P<rest>.*))$", _family_en),
    ("preference", r"^I'm\s+(?P<x>(?:a\s+)?(?:vegetarian|vegan|pescatarian))$", _fixed("User is {x}")),
    ("preference", r"^I'm\s+(?P<x>(?:a\s+)?(?:big\s+|huge\s+|massive\s+|great\s+)?fan\s+of\s+.+)$", _fixed("User is {x}")),
    ("preference", r"^my\s+(?P<x>(?:absolute\s+|all-time\s+)?favou?rite\s+.+?\s+(?:is|are)\s+.+)$", _fixed("User's {x}")),
    ("preference", rf"^I\s+(?P<adv>{_ADV})(?P<v>can't\s+stand|don't\s+(?:really\s+)?(?:like|enjoy)|prefer|like|love|enjoy|adore|hate|dislike|detest|loathe)\s+(?P<x>.+)$", _pref_en),
    ("employer", _WORK + r"(?P<p>at|for)\s+(?P<x>.+)$", _fixed("User works {p} {x}", "employer")),
    ("employer", r"^I'm\s+(?:currently\s+|now\s+)?employed\s+(?:at|by)\s+(?P<x>.+)$", _fixed("User works for {x}", "employer")),
    ("occupation", _WORK + r"as\s+(?P<x>.+)$", _fixed("User works as {x}", "occupation")),
    ("work", _WORK + r"in\s+(?P<x>.+)$", _fixed("User works in {x}")),
    ("occupation", r"^I'm\s+(?:currently\s+|now\s+)?(?P<x>retired|unemployed|self-employed|between\s+jobs|a\s+freelancer|freelancing|out\s+of\s+work|a\s+stay-at-home\s+(?:mom|mum|dad|parent))$", _fixed("User is {x}", "occupation")),
    ("occupation", r"^I'm\s+(?:currently\s+|now\s+|also\s+)?(?P<art>an?)\s+(?P<np>[\w-]+(?:\s+[\w-]+){0,3}?)(?P<tail>\s+(?:at|in|for|with|from)\s+.+)?$", _occupation_en),
    ("location", rf"^I(?:\s+{_ADV}(?:live|reside)|'m\s+{_ADV}(?:living|based|located|residing))\s+(?:in|at)\s+(?P<x>.+)$", _fixed("User lives in {x}", "location")),
    ("location", rf"^I(?:'ve)?\s+{_ADV}(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<x>.+)$", _fixed("User moved to {x}", "location")),
    ("origin", r"^I'm\s+(?:originally\s+)?from\s+(?P<x>.+)$", _checked(_fixed("User is from {x}", "origin"), lambda m: m["x"][0].isupper())),
    ("education", r"^I(?:'ve|\s+hold)\s+(?:got\s+|earned\s+|completed\s+)?(?P<x>(?:an?\s+)?(?:bachelor|master|doctorate|phd|ph\.d\.|mba|msc|bsc|associate)(?:'s|s)?\b.*|an?\s+(?:[\w-]+\s+)?degree\b.*)$", _fixed("User has {x}", "education")),
    ("education", r"^I\s+(?:just\s+)?graduated\s+from\s+(?P<x>.+)$", _fixed("User graduated from {x}", "education")),
    ("education", r"^I\s+(?P<v>majored\s+in|studied)\s+(?P<x>.+)$", _checked(_fixed("User {v} {x}", "education"), lambda m: m["v"].lower().startswith("majored") or bool(re.search(r"\b(?:at|university|college)\b", m["x"], _I)))),
    ("intent", rf"^I'm\s+{_ADV}(?P<v>planning|hoping|intending|aiming|preparing)\s+(?P<p>to|on)\s+(?P<x>.+)$", _plan_en("User is {v} {p} {x}")),
    ("intent", rf"^I\s+{_ADV}(?P<v>plan|intend|hope|aim|expect|mean)\s+to\s+(?P<x>.+)$", _plan_en("User {v}s to {x}")),
    ("intent", r"^I(?:'ve)?\s+(?:just\s+|finally\s+)?decided\s+to\s+(?P<x>.+)$", _plan_en("User has decided to {x}")),
    ("intent", r"^I'm\s+(?:seriously\s+|really\s+)?(?P<v>thinking\s+(?:about|of)|considering)\s+(?P<x>.+)$", _plan_en("User is {v} {x}")),
    ("intent", r"^I'm\s+(?P<x>(?:really\s+|very\s+|quite\s+|particularly\s+)?interested\s+in\s+.+)$", _fixed("User is {x}")),
    ("intent", r"^I'm\s+(?P<v>moving|relocating|emigrating|immigrating)\s+to\s+(?P<x>.+)$", _fixed("User is {v} to {x}")),
    ("intent", rf"^I(?:\s+{_ADV}(?:want|wanna)|'d\s+like|\s+would\s+like)\s+to\s+(?P<x>(?:{_LIFE_EN})\b.*)$", _fixed("User wants to {x}")),
    ("intent", rf"^I'm\s+(?P<v>\w+ing)\s+(?P<x>.+?)\s+(?P<t>{_TIME_EN})$", _checked(_plan_en("User is {v} {x} {t}"), lambda m: m["v"].lower() not in ("asking", "wondering", "feeling", "being", "trying", "thinking", "looking"))),
    ("intent", r"^I'm\s+going\s+to\s+(?P<x>.+)$", _plan_en("User is going to {x}")),
    ("intent", rf"^I'll\s+{_ADV}(?P<x>.+)$", _plan_en("User will {x}", min_words=3)),
    ("intent", rf"^(?P<t>{_TIME_EN})\s*,?\s*I(?P<aux>'m|'ll)?\s+(?:going\s+to\s+)?(?P<x>.+)$", _time_en),
)  # fmt: skip

# Chinese: the clause is kept nearly verbatim, "我" becoming "用户" (as in
# "用户35岁，本科学历…"), so names, numbers and measure words survive untouched.
_ZADV = r"(?:也|还|都|很|非常|特别|比较|真的|一直|其实|确实|本来|现在|目前|已经|平时|一般|正|刚|刚刚|最近)*"
_ZNUM = r"(?:\d{1,3}|[一二三四五六七八九十两]{1,4})"
_ZREL = (
    "女儿|儿子|孩子们|孩子|小孩|宝宝|老婆|妻子|太太|爱人|老公|丈夫|先生|男朋友|女朋友|对象|父母|"
    "父亲|母亲|爸爸|妈妈|爸|妈|哥哥|姐姐|弟弟|妹妹|爷爷|奶奶|外公|外婆"
)
_ZREL_KEY = {
    "女儿": "daughter", "儿子": "son", "孩子们": "children", "孩子": "children", "小孩": "children",
    "宝宝": "children", "老婆": "spouse", "妻子": "spouse", "太太": "spouse", "爱人": "spouse",
    "老公": "spouse", "丈夫": "spouse", "先生": "spouse", "男朋友": "partner", "女朋友": "partner",
    "对象": "partner", "父母": "parents", "父亲": "father", "母亲": "mother", "爸爸": "father",
    "妈妈": "mother", "爸": "father", "妈": "mother", "哥哥": "elder_brother",
    "姐姐": "elder_sister", "弟弟": "younger_brother", "妹妹": "younger_sister",
    "爷爷": "grandfather", "奶奶": "grandmother", "外公": "grandfather", "外婆": "grandmother",
}  # fmt: skip
_RANK = {"大": ".eldest", "小": ".youngest", "二": ".second", "older": ".eldest", "elder": ".eldest",
         "eldest": ".eldest", "oldest": ".eldest", "big": ".eldest", "younger": ".youngest",
         "youngest": ".youngest", "little": ".youngest", "baby": ".youngest"}  # fmt: skip
_TIME_ZH = (
    r"(?:下周[一二三四五六日天末]?|下个?星期[一二三四五六日天]?|下个月|下月|明年|明天|后天|今年|年底|月底|"
    r"这个?周末|周末|下半年|过几天|过段时间|以后|将来|近期|马上|很快)"
)
_LIFE_ZH = (
    r"(?:申请|去|买|学|换|搬|移民|考|报|办|读|找|开|创业|辞职|留学|定居|出国|转行|结婚|生|投资|卖|租|"
    r"旅行|旅游|回国|参加|入职|飞)"
)
_VAGUE_ZH = re.compile(r"^(?:你|这个|那个|它|这样|那样|这种|那种|这|那)")
_NOT_INTENT_ZH = re.compile(r"^(?:好|一下|你|问|知道|了解|请教|看看|确认|咨询|说)")
_JOB_ZH = re.compile(
    r"(?:员|师|医生|护士|律师|会计|老板|经理|总监|主管|司机|教授|记者|作家|销售|顾问|创始人|主播|博主|"
    r"模特|演员|店主|厨师|农民|军人|警察|白领|自由职业者?|公务员|全职妈妈|全职太太|学生|研究生|"
    r"博士生|本科生|工程师|设计师|程序员|架构师|科学家|画家|老师)$"
)


def _zh_whole(
    key: str | None = None, check: Callable[[re.Match[str]], bool] | None = None
) -> _Build:
    """The whole clause, "我" → "用户"."""

    def build(m: re.Match[str]) -> tuple[str, str | None] | None:
        if check is not None and not check(m):
            return None
        return "用户" + _zh_obj(m.string[1:]), key

    return build


def _age_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    n = m["n"]
    if n.isdigit() and not 1 <= int(n) <= 120:
        return None
    return f"用户{m.groupdict().get('t') or ''}{n}岁", "age"


def _family_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    rest = m["rest"]
    if re.match(r"^(?:说|觉得|认为|以为|问)", rest):
        return None  # reported speech: "我妈说我…" is the mother's opinion
    states = re.match(
        rf"^(?:今年|现在|已经|刚)?满?{_ZNUM}(?:周)?岁|^(?:叫|名叫|名字叫|的名字是|的名字叫)", rest
    )
    key = f"family.{_ZREL_KEY[m['rel']]}{_RANK.get(m['mod'] or '', '')}" if states else None
    return f"用户的{m['mod'] or ''}{m['rel']}{_zh_obj(rest)}", key


def _time_zh(m: re.Match[str]) -> tuple[str, str | None] | None:
    x = m["x"]
    if (not m["v"] and not re.match(_LIFE_ZH, x)) or _NOT_INTENT_ZH.match(x):
        return None
    return f"用户{m['t1'] or m['t2']}{m['v'] or ''}{_zh_obj(x)}", None


ZH_RULES: list[_Rule] = _rules(
    0,
    ("age", rf"^我(?P<t>今年|现在|目前|已经|已)?(?:已经|已)?满?(?P<n>{_ZNUM})周?岁(?!的时候|时|那年|以前|之前|以后|之后)", _age_zh),
    ("age", r"^我(?P<t>今年|现在)(?P<n>\d{1,3})了?$", _age_zh),
    ("age", rf"^我的年龄是(?P<n>{_ZNUM})周?岁?$", _age_zh),
    ("name", r"^我(?:的名字是|的名字叫|名叫|叫)(?P<x>[^\s你他她了车外]{1,4})$", _zh_whole("name")),
    ("health", rf"^我{_ZADV}对(?P<x>.+?)过敏", _zh_whole()),
    ("intent", rf"^我{_ZADV}对(?P<x>.+?)(?:很|非常|比较|特别|挺)?感兴趣", _zh_whole()),
    ("marital_status", r"^我(?:已经)?(?:结婚了|已婚|未婚|单身|离婚了|离异|订婚了|结婚\d+年)", _zh_whole("marital_status")),
    ("family", r"^我有(?:一个|一|两个|两|三个|三|\d+个|几个)[^，,]{0,8}?(?:女儿|儿子|孩子|小孩|宝宝)", _zh_whole("family.children")),
    ("family", rf"^我的?(?P<mod>大|小|二)?(?P<rel>{_ZREL})(?P<rest>.+)$", _family_zh),
    ("preference", rf"^我{_ZADV}(?:更喜欢|最喜欢|不太喜欢|不喜欢|喜欢|爱吃|爱喝|爱看|爱听|爱玩|热爱|偏好|偏爱|倾向于|讨厌|受不了|习惯)(?P<x>.+)$", _zh_whole(check=lambda m: not _VAGUE_ZH.match(m["x"]))),
    ("education", r"^我是?(?:本科|硕士|博士|研究生|大专|专科|高中|中专)(?:学历|毕业)", _zh_whole("education")),
    ("education", rf"^我{_ZADV}(?:本科|硕士|博士|研究生)?毕业于(?P<x>.+)$", _zh_whole("education")),
    ("education", r"^我(?:本科|硕士|博士|研究生)?是?在?[^，,]{2,15}?(?:大学|学院)(?:本科|硕士|博士|研究生)?毕业", _zh_whole("education")),
    ("education", rf"^我{_ZADV}在[^，,]{{2,15}}?(?:大学|学院|中学|高中)(?:读|上学|念|学习|留学)", _zh_whole("education")),
    ("intent", rf"^(?:(?P<t1>{_TIME_ZH})我|我(?P<t2>{_TIME_ZH}))(?P<v>就要|将要|要|会|将|准备|打算|计划|想|得|需要)?(?P<x>.+)$", _time_zh),
    ("intent", rf"^我{_ZADV}(?:正在|在)?考虑(?P<x>.+)$", _zh_whole()),
    ("employer", rf"^我{_ZADV}在(?P<x>[^，,]+?)(?:工作|上班|任职|就职|实习)", _zh_whole("employer", lambda m: not re.match(r"^(?:找|换|考虑|准备|想|忙|学|做|打算|犹豫|纠结|家里找)", m["x"]))),
    ("occupation", rf"^我{_ZADV}(?:是|当|做)(?:一名|一位)(?P<x>.{{1,15}})$", _zh_whole("occupation")),
    ("origin", r"^我是(?P<x>[^\d，,的个名位一]{2,6})人$", _zh_whole("origin")),
    ("occupation", rf"^我{_ZADV}是(?P<x>[^，,你他她]{{1,10}})$", _zh_whole("occupation", lambda m: bool(_JOB_ZH.search(m["x"])) and m["x"] not in ("新手", "小白"))),
    ("occupation", rf"^我{_ZADV}(?:从事|是做)(?P<x>.+?)(?:的|行业|工作)$", _zh_whole("occupation")),
    ("occupation", r"^我(?:已经)?退休了?$", _zh_whole("occupation")),
    ("location", rf"^我{_ZADV}(?:住在|生活在|定居在|定居于|居住在|常住在?|住)(?P<x>.+)$", _zh_whole("location", lambda m: len(m["x"]) >= 2 and not re.match(r"^(?:院|了|过|得|不|着|的|宿舍|一|几|酒店|宾馆|这|那)", m["x"]))),
    ("location", rf"^我{_ZADV}(?:搬到了|搬到|搬去了|搬去|搬家到|移居到?|迁居到?)(?P<x>.+)$", _zh_whole("location")),
    ("location", rf"^我{_ZADV}在(?P<x>[^，,]+?)(?:生活|定居|居住)", _zh_whole("location")),
    ("origin", rf"^我{_ZADV}在(?P<x>[^，,]+?)长大", _zh_whole("origin")),
    ("intent", rf"^我{_ZADV}(?:打算|计划|准备|决定|希望|将要|即将)(?P<x>.+)$", _zh_whole(check=lambda m: not _NOT_INTENT_ZH.match(m["x"]))),
    ("intent", rf"^我{_ZADV}(?:想要?|要)(?P<x>{_LIFE_ZH}.*)$", _zh_whole()),
)  # fmt: skip

# "Remember that…" is read at the sentence level: what follows may hold commas.
_REMEMBER_EN = re.compile(
    r"^(?:please\s+|pls\s+|also\s+|and\s+)*(?:remember|keep\s+in\s+mind|don't\s+forget|"
    r"never\s+forget|make\s+a\s+note|note\s+down)(?:\s+(?:that|this))?\s*[:,]?\s+(?P<x>.+)$",
    _I | re.S,
)
_REMEMBER_ZH = re.compile(
    r"^(?:请|麻烦)?你?(?:帮我|要)?(?:记住|记一下|记下|记好|记得|别忘了|别忘记|不要忘了|不要忘记|千万别忘了)"
    r"了?[：:，,\s]*(?P<x>.+)$",
    re.S,
)

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
_EN_COMMA = re.compile(
    r",\s*(?=(?:I|and\s+I|but\s+I|so\s+I|my|can|could|do|does|did|is|are|am|what|how|why|where|"
    r"when|which|who|would|should|will|please|thanks|we|you|it|that|this|because|since|although|"
    r"though|if|unless|as|while|whether)\b)",
    _I,
)
_EN_AND = re.compile(r"\s+(?:and|but|so)\s+(?=(?:I\b|(?:also\s+)?(?:live|work|moved|prefer|like|love|hate|enjoy|plan|have)\b))", _I)  # fmt: skip
_ZH_SPLIT = re.compile(r"[，,；;]")
_EN_LEAD = re.compile(
    r"^(?:(?:well|oh|also|btw|by\s+the\s+way|actually|so|and|but|now|fyi|just\s+so\s+you\s+know|"
    r"for\s+context|for\s+the\s+record|ok|okay|yes|yeah|no|hi|hello|hey|um|uh|anyway|fun\s+fact|"
    r"plus)\b[,:!]?\s*)+",
    _I,
)
_ZH_LEAD = re.compile(
    r"^(?:(?:另外|还有就是|还有|而且|并且|但是|不过|可是|其实|顺便说一下|顺便|对了|嗯|哦|噢|好的|是的|"
    r"然后|所以|因为|说实话|实际上|老实说|补充一下|但)[，,：:\s]*)+"
)
_CONTRACTIONS = [
    (re.compile(r"\bi\b"), "I"), (re.compile(r"\bim\b", _I), "I'm"), (re.compile(r"\bI\s+am\b", _I), "I'm"),
    (re.compile(r"\bI\s+will\b", _I), "I'll"), (re.compile(r"\bI\s+have\b", _I), "I've"),
    (re.compile(r"\bdo\s+not\b", _I), "don't"), (re.compile(r"\bcan\s*not\b", _I), "can't"),
]  # fmt: skip
_Q_EN = re.compile(
    r"^(?:am|do|does|did|is|are|was|were|can|could|should|would|will|shall|have|has|may|might|"
    r"must|how|what|why|when|where|which|who|whom|whose)\b",
    _I,
)
_Q_ZH = re.compile(r"[吗呢么嘛][？?]?$|什么|怎么|为什么|为啥|哪|谁|多少|是否|是不是|能不能|可不可以|要不要|有没有|会不会|该不该|几岁|多大")  # fmt: skip
_HYPO_EN = re.compile(
    r"\b(?:if|unless|suppose|supposing|imagine|imagining|assuming|assume|pretend|hypothetically|"
    r"let's\s+say|in\s+case|wish|whether|wonder|would(?!\s+like)|could|might)\b",
    _I,
)
_HYPO_ZH = re.compile(
    r"如果|假如|假设|要是|万一|倘若|若是|假使|的话|设想|想象|希望我|但愿|如若|要不是|是否|不知道"
)
_REPORTED_EN = re.compile(
    r"\b(?:he|she|they|someone|somebody|people|you|my\s+\w+|his|her|the\s+\w+)\s+(?:said|says|"
    r"told\s+me|tells\s+me|thinks|thought|claims|claimed|believes|asked|wrote)\b",
    _I,
)
_REPORTED_ZH = re.compile(
    r"(?:他|她|他们|她们|别人|有人|朋友|同事|老板|你)(?:说|觉得|认为|以为|问)"
)
_SELF_ZH = re.compile(rf"^我(?!们)(?!的?(?:大|小|二)?(?:{_ZREL}))")
_SUBJECT_ZH = re.compile(r"^(?:我|你|他|她|它|咱|大家|别人|有人|这|那|[A-Za-z0-9\ue000])")
_TRIM = " \t.!?。！？,，;；:：~～…、"


def dedupe_key(text: str) -> str:
    """``text`` folded for duplicate detection: NFKC (full width → half width), case,
    punctuation and whitespace removed. "User likes Tea." and "user likes tea" agree."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c)[0] in "LN")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_MODALS = frozenset(
    ("will", "would", "can", "could", "should", "shall", "may", "might", "must", "was", "were",
     "went", "had", "did", "got", "made", "took", "came", "saw", "said", "left", "bought", "met",
     "lost", "won", "felt", "kept", "knew", "thought", "told", "found", "gave", "ran", "ate",
     "drove", "wrote", "spoke", "flew", "began", "became", "paid", "sold", "sent", "spent", "built")
)  # fmt: skip
_FREQUENCY = frozenset(
    ("never", "always", "usually", "often", "sometimes", "rarely", "also", "still", "only")
)
_IRREGULAR = {"don't": "doesn't", "do": "does", "have": "has", "am": "is", "go": "goes"}


def _third_person(rest: str) -> str:
    """``rest`` after "I" with its verb in the third person ("don't speak" → "doesn't speak")."""
    words = rest.split(" ")
    i = 1 if len(words) > 1 and words[0].lower() in _FREQUENCY else 0
    verb = words[i]
    low = verb.lower()
    if (not low.isalpha() and low != "don't") or low in _MODALS or low.endswith("ed"):
        return rest
    if low in _IRREGULAR:
        words[i] = _IRREGULAR[low]
    elif low.endswith(("s", "sh", "ch", "x", "z", "o")):
        words[i] = verb + "es"
    elif low.endswith("y") and low[-2:-1] not in ("a", "e", "i", "o", "u"):
        words[i] = verb[:-1] + "ies"
    else:
        words[i] = verb + "s"
    return " ".join(words)


def _en_statement(x: str) -> str:
    """A first-person English statement in the third person ("my flight is…" → "User's flight is…")."""
    m = re.match(r"^(I'm|I've|I'll|I'd|I|my)\b(.*)$", x, _I | re.S)
    if m:
        head = {"i'm": "User is", "i've": "User has", "i'll": "User will", "i'd": "User would",
                "i": "User", "my": "User's"}[m[1].lower()]  # fmt: skip
        rest = _en_obj(m[2])
        return f"{head} {_third_person(rest) if m[1].lower() == 'i' and rest else rest}".strip()
    if x.lower().startswith("to "):
        return f"User asked to be reminded {_en_obj(x)}"
    x = _en_obj(x)
    return x[:1].upper() + x[1:]


def _zh_statement(x: str) -> str:
    if x.startswith("我的"):
        return "用户的" + _zh_obj(x[2:])
    if x.startswith("我") and not x.startswith("我们"):
        return "用户" + _zh_obj(x[1:])
    return _zh_obj(x)


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


# -- LLM extraction ------------------------------------------------------------------

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
