"""Reading LoCoMo files: the turns to ingest and the questions to score.

A file holds one conversation object, or a list of ``{"conversation": …, "qa": …}``
samples as in the original ``locomo10.json``. A conversation has two speakers
(``speaker_a`` is the user, anyone else the assistant, the speaker's name the
message name), dated sessions ``session_N`` of turns with ids (``D3:12``) whose
date (``"1:56 pm on 8 May, 2023"``, read as UTC) is each message's
``created_at``, and questions that list the ids of the turns holding their answer
(``evidence``). A shared photo's caption is part of what was said, so it is
appended to the text as ``[shares a photo of …]``; the turn id goes to the message
metadata, for scoring only.

Evidence ids are read leniently: ``"D8:6; D9:17"`` holds two ids and
``"D:11:26"`` means ``D11:26``. An id that names no turn of the file is counted
(``unresolved_evidence``); a question left with no resolvable evidence is skipped
and counted (``questions_skipped``). A `Question` holds the question's text and
nothing else: it is all the builder ever sees of a QA item.
"""

from __future__ import annotations

import calendar
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..._errors import UserError
from ...model._messages import Message, Role

__all__ = ["LocomoConversation", "Question", "load_locomo"]

_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Question:
    """A question as the builder sees it: its text and nothing else."""

    text: str


@dataclass
class _Scored:
    question: Question
    evidence: list[str]  # resolved turn ids
    category: int


@dataclass
class LocomoConversation:
    """One LoCoMo file: the messages to ingest and the questions to score."""

    name: str
    messages: list[Message]
    items: list[_Scored]
    texts: dict[str, str]  # turn id -> text, for scoring
    unresolved_evidence: int = 0
    questions_skipped: int = 0


def _when(raw: Any, where: str) -> float:
    if not isinstance(raw, str):
        raise UserError(f"{where}: missing or not a string")
    text = " ".join(raw.split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y", "%d %B %Y"):
        try:
            return float(calendar.timegm(datetime.strptime(text, fmt).timetuple()))
        except ValueError:
            continue
    raise UserError(f"{where}: cannot read the date {raw!r}")


def load_locomo(path: Path) -> list[LocomoConversation]:
    """The conversations of one LoCoMo file; raises `UserError` (one line) if it holds none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        return [
            _parse(
                {**d["conversation"], "qa": d.get("qa")}
                if isinstance(d.get("conversation"), dict)
                else d,
                f"{path.stem}#{d.get('sample_id', i)}",
                f"{path}[{i}]",
            )
            for i, d in enumerate(data)
        ]
    return [_parse(data, path.stem, str(path))]


def _parse(data: Any, name: str, path: str) -> LocomoConversation:
    """One conversation object (see the module docstring for what is read, and how)."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a LoCoMo conversation (expected a JSON object)")
    for key in ("speaker_a", "speaker_b"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UserError(f"{path}: not a LoCoMo conversation (no {key!r} string)")
    if not isinstance(data.get("qa"), list):
        raise UserError(f"{path}: not a LoCoMo conversation (no 'qa' list)")
    sessions = sorted(int(m.group(1)) for k in data if (m := _SESSION.fullmatch(k)))
    if not sessions:
        raise UserError(f"{path}: not a LoCoMo conversation (no 'session_N' lists)")
    speaker_a = data["speaker_a"]
    messages: list[Message] = []
    texts: dict[str, str] = {}
    for n in sessions:
        turns = data[f"session_{n}"]
        if not isinstance(turns, list):
            raise UserError(f"{path}: session_{n} is not a list of turns")
        at = _when(data.get(f"session_{n}_date_time"), f"{path}: session_{n}_date_time")
        for i, t in enumerate(turns):
            where = f"{path}: session_{n}[{i}]"
            if not isinstance(t, dict) or not all(
                isinstance(t.get(k), str) for k in ("speaker", "dia_id", "text")
            ):
                raise UserError(f"{where}: a turn needs 'speaker', 'dia_id' and 'text' strings")
            text = t["text"]
            caption = t.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} [shares {caption.strip()}]"
            role: Role = "user" if t["speaker"] == speaker_a else "assistant"
            messages.append(Message(
                role, text, created_at=at, name=t["speaker"], metadata={"dia_id": t["dia_id"]},
            ))  # fmt: skip
            texts[t["dia_id"]] = t["text"]
    conv = LocomoConversation(name, messages, [], texts)
    for i, qa in enumerate(data["qa"]):
        if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
            raise UserError(f"{path}: qa[{i}] needs a 'question' string")
        ids: list[str] = []
        for raw in qa.get("evidence") or []:
            found = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(str(raw))]
            conv.unresolved_evidence += sum(1 for e in found if e not in texts) + (not found)
            ids += [e for e in found if e in texts]
        ids = list(dict.fromkeys(ids))
        if not ids:
            conv.questions_skipped += 1
            continue
        category = qa.get("category")
        conv.items.append(
            _Scored(Question(qa["question"]), ids, category if isinstance(category, int) else 0)
        )
    return conv
