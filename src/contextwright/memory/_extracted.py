"""What memory extraction produces, and the plumbing its rule tables share.

`Extracted` is one statement worth remembering, before it is stored; `Extractor` is
the protocol every extractor meets (rules in `_extract`, a model in `_extract_llm`);
`dedupe_key` folds a statement for duplicate detection. The rule tables of both
languages (`_rules_en`, `_rules_zh`) build on the rule types and the family-rank
suffixes defined at the end.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..model._messages import Message


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


def dedupe_key(text: str) -> str:
    """``text`` folded for duplicate detection: NFKC (full width → half width), case,
    punctuation and whitespace removed. "User likes Tea." and "user likes tea" agree."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c)[0] in "LN")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# -- shared by the English and Chinese rule tables ---------------------------------

_Build = Callable[[re.Match[str]], tuple[str, str | None] | None]
_Rule = tuple[str, re.Pattern[str], _Build]
_I = re.IGNORECASE


def _rules(lang_flags: int, *specs: tuple[str, str, _Build]) -> list[_Rule]:
    return [(kind, re.compile(pattern, lang_flags), build) for kind, pattern, build in specs]


_RANK = {"大": ".eldest", "小": ".youngest", "二": ".second", "older": ".eldest", "elder": ".eldest",
         "eldest": ".eldest", "oldest": ".eldest", "big": ".eldest", "younger": ".youngest",
         "youngest": ".youngest", "little": ".youngest", "baby": ".youngest"}  # fmt: skip
