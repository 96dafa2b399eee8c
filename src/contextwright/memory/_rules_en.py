"""The English extraction rules: patterns, their builders, and how a sentence is read.

`EN_RULES` is the table of (kind, pattern, builder) the rule extractor tries on each
clause, in order; a builder turns a match into ``(statement, key)`` in the third
person, or None when the match says nothing lasting. The rest is what the extractor
needs to read an English sentence: the clause splitters, the lead-ins it strips, the
contractions it normalises, the question / hypothetical / reported-speech guards, and
the third-person rewriting of an explicit "remember that…".
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._extracted import _I, _RANK, _Build, _Rule, _rules


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

# "Remember that…" is read at the sentence level: what follows may hold commas.
_REMEMBER_EN = re.compile(
    r"^(?:please\s+|pls\s+|also\s+|and\s+)*(?:remember|keep\s+in\s+mind|don't\s+forget|"
    r"never\s+forget|make\s+a\s+note|note\s+down)(?:\s+(?:that|this))?\s*[:,]?\s+(?P<x>.+)$",
    _I | re.S,
)

_EN_COMMA = re.compile(
    r",\s*(?=(?:I|and\s+I|but\s+I|so\s+I|my|can|could|do|does|did|is|are|am|what|how|why|where|"
    r"when|which|who|would|should|will|please|thanks|we|you|it|that|this|because|since|although|"
    r"though|if|unless|as|while|whether)\b)",
    _I,
)
_EN_AND = re.compile(r"\s+(?:and|but|so)\s+(?=(?:I\b|(?:also\s+)?(?:live|work|moved|prefer|like|love|hate|enjoy|plan|have)\b))", _I)  # fmt: skip
_EN_LEAD = re.compile(
    r"^(?:(?:well|oh|also|btw|by\s+the\s+way|actually|so|and|but|now|fyi|just\s+so\s+you\s+know|"
    r"for\s+context|for\s+the\s+record|ok|okay|yes|yeah|no|hi|hello|hey|um|uh|anyway|fun\s+fact|"
    r"plus)\b[,:!]?\s*)+",
    _I,
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
_HYPO_EN = re.compile(
    r"\b(?:if|unless|suppose|supposing|imagine|imagining|assuming|assume|pretend|hypothetically|"
    r"let's\s+say|in\s+case|wish|whether|wonder|would(?!\s+like)|could|might)\b",
    _I,
)
_REPORTED_EN = re.compile(
    r"\b(?:he|she|they|someone|somebody|people|you|my\s+\w+|his|her|the\s+\w+)\s+(?:said|says|"
    r"told\s+me|tells\s+me|thinks|thought|claims|claimed|believes|asked|wrote)\b",
    _I,
)


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
