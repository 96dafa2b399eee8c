"""What the active-task tracker reads in a message: acknowledgements, follow-ups,
tool calls and results, findings.

The tracker (`_task`) decides what a message does to the task; this module holds
the patterns and the small readers it uses to decide: whether a user message is a
mere acknowledgement (``_ACK``) or a follow-up (``_FOLLOW_UP``), how a tool call's
arguments read in one line (`_arguments`), what a tool result amounts to
(`_outcome`: "returned 12 items", "error: timeout"), and which sentences of an
assistant reply state a result worth recording (`_findings`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_ACK_WORD = (
    r"(?:ok(?:ay)?|k|thanks?(?:\s+you)?(?:\s+(?:so\s+much|a\s+lot|very\s+much))?|thx|ty|got\s+it|"
    r"great|cool|nice|perfect|sure|yes|yep|yeah|no|nope|alright|all\s+right|fine|good|awesome|"
    r"sounds\s+good|makes\s+sense|i\s+see|understood|noted|好的?|好吧|谢谢(?:你|您|啦)?|多谢|感谢|"
    r"嗯+|哦+|噢+|收到|明白(?:了)?|知道了|懂了|可以|行|对|是的|没问题|👍|🙏|😊)"
)
_ACK = re.compile(rf"^(?:{_ACK_WORD}[\s!.,。！，~～…]*)+$", re.IGNORECASE)
_FOLLOW_UP = re.compile(
    r"^(?:(?:and\s+also|oh\s+and|and|also|additionally|plus|one\s+more\s+thing|as\s+well)\b"
    r"[,:]?\s*|(?:另外|还有|顺便|同时|并且|而且|此外|还要|再)[，,：:]?\s*)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n+")
_CODE = re.compile(r"```.*?(?:```|\Z)", re.S)
_QUESTION = re.compile(r"[?？]\s*$")
_FILLER = re.compile(
    r"^(?:let\s+me|let's|i'll|i\s+will|i'm\s+going\s+to|sure|okay|ok|great|thanks|hi|hello|"
    r"one\s+moment|give\s+me|好的|让我|我来|我先|稍等|收到|你好|请稍候)",
    re.IGNORECASE,
)
# Words of a sentence that reports a result (a finding worth recording).
_RESULT = re.compile(
    r"\d|\b(?:found|returned|returns|shows?|showed|is|are|was|were|means|result|results|total|"
    r"costs?|because|therefore|so|answer|recommend|should|contains?|no\s+\w+\s+found)\b|"
    r"发现|结果|共|总共|一共|是|需要|建议|因此|所以|显示|包含|找到",
    re.IGNORECASE,
)
_LISTS = ("results", "items", "data", "hits", "documents", "rows", "entries", "matches")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def _arguments(raw: str, limit: int) -> str:
    """``q='tokio', limit=5`` from a JSON arguments object, cut to ``limit`` characters."""
    try:
        parsed: Any = json.loads(raw or "{}")
    except ValueError:
        return _clip(raw, limit)
    if not isinstance(parsed, dict):
        return _clip(raw, limit)
    parts = []
    for k, v in parsed.items():
        value = (
            f"'{_clip(v, 40)}'"
            if isinstance(v, str)
            else _clip(json.dumps(v, ensure_ascii=False), 40)
        )
        parts.append(f"{k}={value}")
    return _clip(", ".join(parts), limit)


def _outcome(text: str, is_error: bool) -> str:
    """What a tool result amounts to: "returned 12 items", "error: …", "returned: …"."""
    head = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if is_error or re.match(r"^(?:error|exception|traceback|failed)\b", head, re.IGNORECASE):
        head = re.sub(r"^error\b[:\s]*", "", head, flags=re.IGNORECASE)
        return f"error: {_clip(head, 80)}" if head else "error"
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, list):
        return f"returned {len(parsed)} items"
    if isinstance(parsed, dict):
        for name in _LISTS:
            if isinstance(parsed.get(name), list):
                return f"returned {len(parsed[name])} items"
        return f"returned {{{_clip(', '.join(map(str, parsed)), 60)}}}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "returned nothing"
    if len(lines) >= 3:
        return f"returned {len(lines)} lines: {_clip(head, 60)}"
    return f"returned: {_clip(text, 80)}"


def _findings(text: str, limit: int, per_message: int = 2) -> list[str]:
    """Up to ``per_message`` sentences of an assistant reply that state a result."""
    scored: list[tuple[int, int, str]] = []
    for i, sentence in enumerate(_SENTENCE_END.split(_CODE.sub("\n", text))):
        sentence = re.sub(r"^(?:[-*+•>]\s+|\d+[.)]\s+|#{1,6}\s+)+", "", sentence.strip())
        sentence = sentence.replace("**", "").strip()
        short = len(sentence) < (6 if _CJK.search(sentence) else 15)
        if (
            short
            or _QUESTION.search(sentence)
            or _FILLER.match(sentence)
            or sentence.endswith((":", "："))
        ):
            continue
        score = len(_RESULT.findall(sentence)) + 2 * bool(re.search(r"\d", sentence))
        if score:
            scored.append((score, i, sentence))
    best = sorted(scored, key=lambda s: (-s[0], s[1]))[:per_message]
    return [_clip(s, limit) for _, _, s in sorted(best, key=lambda s: s[1])]
