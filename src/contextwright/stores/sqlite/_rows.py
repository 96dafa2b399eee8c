"""Records to rows and rows to records for the SQLite store, with the input checks.

Everything here runs outside transactions: a store checks and serialises its
input first (so bad input raises having written nothing) and decodes rows after.
JSON is written by `dumps` (`dump_json`): compact, with ``ensure_ascii=False``
(Chinese stays readable and a third of the size), sorted keys (equal metadata
gives equal text, which is how an idempotent re-append is recognised), and
standard: a NaN or infinite number is refused before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any

from ..._errors import ConfigError, InvalidMessageError
from ...model._checks import dump_json, unicode_problem
from ...model._messages import Message
from ...model._parts import ImagePart, TextPart, ToolResultPart, _part_to_dict
from .._records import CompactionEntry, ConversationInfo, MessageOutline, Summary
from ._fts import index_text

MAX_SEQ = 2**63 - 1
# Passed as the tenant of the one operation that spans tenants (expiring working
# memory), so that every other call must name a real tenant.
EVERY_TENANT = object()
CONV_COLUMNS = (
    "tenant, id, user, created_at, updated_at, last_seq, message_count, token_total, metadata, "
    "version, first_version"
)
MSG_COLUMNS = "m.seq, m.tokens, m.counter, m.id, m.role, m.created_at, m.name, m.metadata, m.parts"
# How an image is charged when estimating an uncounted message: the allowance
# MessageOverhead gives an image (the largest either OpenAI or Anthropic charges).
_IMAGE_ESTIMATE = 1600


# The string scanner json itself uses (its C one where there is one); typeshed does
# not declare it on json.decoder.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
# How `parts_json` writes a message of one text part; `outline` reads it back directly.
_ONE_TEXT_HEAD = '[{"text":'
_ONE_TEXT_TAIL = ',"type":"text"}]'

# Every store writes a user's value (metadata, receipts, job payloads) with this one
# encoder: standard JSON, a NaN or infinity refused naming its path (see dump_json).
dumps = dump_json


def parts_json(msg: Message, where: str) -> str:
    """The stored ``parts`` column: `dumps` of the parts of `Message.to_dict`.

    A message of one text part (most of a conversation) is written directly, with
    the string encoder `dumps` itself uses, so the text is the same to the byte
    (an idempotent re-append compares it).
    """
    parts = msg.parts
    if len(parts) == 1 and type(parts[0]) is TextPart and parts[0].native is None:
        return _ONE_TEXT_HEAD + encode_basestring(parts[0].text) + _ONE_TEXT_TAIL
    return dumps([_part_to_dict(p) for p in parts], where)


def name(value: object, label: str) -> str:
    """``value`` if it is a non-empty string (a tenant, user, conversation or key)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{label} must be a non-empty string, got {value!r}")
    if not value.isascii() and (problem := unicode_problem(value)) is not None:
        raise ConfigError(f"{label} {problem}")
    return value


def count(value: object, where: str, *, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidMessageError(where, f"must be an integer >= {minimum}, got {value!r}")
    return value


def bump(conn: sqlite3.Connection, cid: int) -> int:
    """Add one to conversation ``cid``'s version (in the caller's write transaction); return it."""
    conn.execute("UPDATE conversations SET version = version + 1 WHERE cid = ?", (cid,))
    (version,) = conn.execute("SELECT version FROM conversations WHERE cid = ?", (cid,)).fetchone()
    return int(version)


def resolve(conn: sqlite3.Connection, tenant: str, conversation: str) -> tuple[int, int]:
    """(cid, last_seq) of an existing conversation; a missing one is the caller's error."""
    row = conn.execute(
        "SELECT cid, last_seq FROM conversations WHERE tenant = ? AND id = ?",
        (tenant, conversation),
    ).fetchone()
    if row is None:
        raise InvalidMessageError(
            "conversation",
            f"no conversation {conversation!r} in tenant {tenant!r}; "
            "create it with ensure_conversation or append",
        )
    return row[0], row[1]


# An uncounted tool result may be shown compressed: a pointer and a few lines can
# stand for megabytes, so its size says nothing about its prompt cost.
TOOL_ESTIMATE_CAP = 32


def estimate(tokens: int | None, size: int, role: str = "") -> int:
    """What `read_tail` charges a message that has no count by the caller's counter.

    Deliberately low — three quarters of another counter's count, else a token per
    four characters (at most `TOOL_ESTIMATE_CAP` for a tool result) — so that the
    tail errs towards returning more, which the caller trims after recounting,
    rather than less, which would need another read. Never zero, so the walk
    always ends.
    """
    if tokens is not None:
        return max(1, tokens * 3 // 4)
    if role == "tool":
        return min(size // 4 + 1, TOOL_ESTIMATE_CAP)
    return size // 4 + 1


# -- decoding ---------------------------------------------------------------------------


def conversation_info(row: Sequence[Any]) -> ConversationInfo:
    tenant, conversation, user, created, updated, last, n, total, meta, version, first = row
    return ConversationInfo(
        conversation, tenant, user, created, updated, last, n, total, json.loads(meta), version,
        first,
    )  # fmt: skip


def message(row: Sequence[Any]) -> Message:
    """The `Message` of a row selected with `MSG_COLUMNS`."""
    seq, tokens, counter, mid, role, created_at, label, meta, parts = row
    data = {"role": role, "parts": json.loads(parts), "id": mid, "created_at": created_at}
    data.update(seq=seq, name=label, metadata=json.loads(meta) if meta else None)
    msg = Message.from_dict(data)
    if tokens is not None and counter:
        # The stored count is what count_message(counter, msg) returned; priming its
        # cache makes a recount free for every message counted by that counter.
        msg._token_cache[counter] = tokens
    return msg


# The outline's columns: the parts only where the text is wanted (not tool results).
OUTLINE_COLUMNS = (
    "m.seq, m.role, m.tokens, m.counter, m.size, m.name, m.created_at, "
    "CASE WHEN m.role = 'tool' THEN NULL ELSE m.parts END"
)


# MessageOutline's slot setters, by field. Building a row's outline through them skips
# the frozen dataclass's __init__, which sets each field through object.__setattr__:
# 0.6 µs instead of 1.1 (a compaction reads 1,000 outlines, recall's index load every
# message). A field added to MessageOutline must be added here too: the check below
# fails the import until it is.
_OUTLINE_SET = {
    f.name: getattr(MessageOutline, f.name).__set__ for f in dataclasses.fields(MessageOutline)
}
_OUTLINE_FIELDS = [
    "seq", "role", "tokens", "counter", "size", "text", "tool_calls", "name", "created_at"
]  # fmt: skip
if list(_OUTLINE_SET) != _OUTLINE_FIELDS:
    raise ImportError(f"_rows does not know MessageOutline's fields {list(_OUTLINE_SET)}")
_set_seq, _set_role, _set_tokens, _set_counter, _set_size = (
    _OUTLINE_SET["seq"], _OUTLINE_SET["role"], _OUTLINE_SET["tokens"], _OUTLINE_SET["counter"],
    _OUTLINE_SET["size"],
)  # fmt: skip
_set_text, _set_calls, _set_name, _set_created = (
    _OUTLINE_SET["text"], _OUTLINE_SET["tool_calls"], _OUTLINE_SET["name"],
    _OUTLINE_SET["created_at"],
)  # fmt: skip
_new = object.__new__


def _make_outline(
    seq: int, role: Any, tokens: int | None, counter: str, size: int, text: str,
    tool_calls: tuple[str, ...], name: str | None, created_at: float | None,
) -> MessageOutline:  # fmt: skip
    """``MessageOutline(...)`` of a decoded row, built through its slots (see above).

    MessageOutline has no ``__post_init__`` to skip; tests/test_storage.py checks that
    this gives what the constructor gives.
    """
    o = _new(MessageOutline)
    _set_seq(o, seq)
    _set_role(o, role)
    _set_tokens(o, tokens)
    _set_counter(o, counter)
    _set_size(o, size)
    _set_text(o, text)
    _set_calls(o, tool_calls)
    _set_name(o, name)
    _set_created(o, created_at)
    return o


def outline(row: Sequence[Any]) -> MessageOutline:
    """The `MessageOutline` of a row selected with `OUTLINE_COLUMNS`.

    Only the text and tool-call parts are read, as plain JSON: no `Message` is
    built. The text is joined as `Message.text` joins it (images left out). A
    message of one text part, as `parts_json` writes it, has its text read with
    the JSON string scanner alone (no list and dict to build).
    """
    seq, role, tokens, counter, size, name, created_at, parts = row
    if parts is None:
        return _make_outline(seq, role, tokens, counter, size, "", (), name, created_at)
    if parts.startswith(_ONE_TEXT_HEAD + '"') and parts.endswith(_ONE_TEXT_TAIL):
        text, end = _scanstring(parts, len(_ONE_TEXT_HEAD) + 1)
        if end == len(parts) - len(_ONE_TEXT_TAIL):
            return _make_outline(seq, role, tokens, counter, size, text, (), name, created_at)
    texts: list[str] = []
    calls: list[str] = []
    for p in json.loads(parts):
        kind = p.get("type")
        if kind == "text":
            texts.append(p["text"])
        elif kind == "tool_call":
            calls.append(p["name"])
    return _make_outline(
        seq, role, tokens, counter, size, "\n".join(texts), tuple(calls), name, created_at
    )


def summary(conversation: str, row: Sequence[Any]) -> Summary:
    version, from_seq, upto_seq, content, tokens, method, created_at, meta = row
    return Summary(
        conversation, version, from_seq, upto_seq, content, tokens, method, created_at,
        json.loads(meta),
    )  # fmt: skip


def compaction(conversation: str, row: Sequence[Any]) -> CompactionEntry:
    entry_id, at, urgency, applied, before, after, version, upto, strategies, detail = row
    return CompactionEntry(
        entry_id, conversation, at, urgency, bool(applied), before, after, version, upto,
        tuple(json.loads(strategies)), json.loads(detail),
    )  # fmt: skip


# -- encoding ---------------------------------------------------------------------------


class PreparedMessage:
    """A message checked and serialised for insertion."""

    __slots__ = ("message", "meta", "parts", "size", "tokens")

    def __init__(self, msg: Message, tokens: int | None, where: str) -> None:
        self.message = msg
        self.tokens = tokens
        self.parts = parts_json(msg, f"{where}.parts")
        self.meta = dumps(dict(msg.metadata), f"{where}.metadata") if msg.metadata else None
        text = index_text(msg)  # the searchable text (indexed when first searched)
        # size is in characters (see estimate); an image (only user messages hold
        # image parts) counts as the characters its token allowance is worth.
        self.size = len(text)
        if msg.role == "user":
            self.size += sum(isinstance(p, ImagePart) for p in msg.parts) * _IMAGE_ESTIMATE * 4

    def same_content(self, row: Sequence[Any]) -> bool:
        """Whether a stored row (`MSG_COLUMNS`) holds this message's role, parts, name, metadata."""
        m = self.message
        return (m.role, m.name, self.meta, self.parts) == (row[4], row[6], row[7], row[8])


def prepare_messages(
    messages: Sequence[Message], tokens: Sequence[int] | None
) -> list[PreparedMessage]:
    if isinstance(messages, (Message, str)) or not isinstance(messages, Sequence):
        raise InvalidMessageError("messages", "must be a sequence of Message (wrap one in a list)")
    counts: list[int | None] = [None] * len(messages)
    if tokens is not None:
        if isinstance(tokens, (str, bytes)) or len(tokens) != len(messages):
            raise InvalidMessageError(
                "tokens", f"must hold one count per message ({len(messages)})"
            )
        counts = [count(n, f"tokens[{i}]") for i, n in enumerate(tokens)]
    out = []
    for i, (msg, n) in enumerate(zip(messages, counts, strict=True)):
        if not isinstance(msg, Message):
            raise InvalidMessageError(
                f"messages[{i}]", f"must be a Message, got {type(msg).__name__}"
            )
        out.append(PreparedMessage(msg, n, f"messages[{i}]"))
    return out


def readback_refs(
    readback: Sequence[tuple[int, str, str, float]], batch: Sequence[PreparedMessage]
) -> list[tuple[int, str, str, float]]:
    """Checked ``(i, call_id, key, ttl)`` of `SQLiteStore.append` (``readback=``).

    Each must name a tool message of the batch holding a text result of that call.
    """
    out = []
    for j, ref in enumerate(readback):
        where = f"readback[{j}]"
        if not isinstance(ref, tuple) or len(ref) != 4:
            raise InvalidMessageError(where, "must be a tuple (index, call_id, key, ttl)")
        i, call_id, key, ttl = ref
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(batch):
            raise InvalidMessageError(where, f"index {i!r} is not a message of the batch")
        name(key, "key")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
            raise ConfigError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if not any(
            isinstance(p, ToolResultPart) and p.call_id == call_id and isinstance(p.content, str)
            for p in batch[i].message.parts
        ):
            raise InvalidMessageError(where, f"messages[{i}] holds no text result of {call_id!r}")
        out.append((i, call_id, key, float(ttl)))
    return out


def summary_row(s: Summary) -> tuple[int, int, int, int, str, str]:
    """(version, from_seq, upto_seq, tokens, method, meta JSON) of a summary to save."""
    if not isinstance(s, Summary):
        raise InvalidMessageError("summary", f"must be a Summary, got {type(s).__name__}")
    name(s.conversation, "summary.conversation")
    from_seq = count(s.from_seq, "summary.from_seq", minimum=1)
    upto = count(s.upto_seq, "summary.upto_seq", minimum=from_seq)
    if not isinstance(s.content, str) or not isinstance(s.method, str):
        raise InvalidMessageError("summary.content", "content and method must be strings")
    if isinstance(s.created_at, bool) or not isinstance(s.created_at, (int, float)):
        raise InvalidMessageError("summary.created_at", "must be seconds since the epoch")
    version, tokens = count(s.version, "summary.version"), count(s.tokens, "summary.tokens")
    return version, from_seq, upto, tokens, s.method, dumps(dict(s.meta), "summary.meta")


def same_conversation(s: Summary, e: CompactionEntry) -> None:
    """A compaction's summary and log entry must be of one conversation."""
    if e.conversation != s.conversation:
        raise InvalidMessageError(
            "entry.conversation",
            f"is {e.conversation!r} but the summary is of {s.conversation!r}",
        )


def compaction_row(e: CompactionEntry) -> tuple[Any, ...]:
    """The compactions columns after ``cid`` (at … detail) of an entry to log."""
    if not isinstance(e, CompactionEntry):
        raise InvalidMessageError("entry", f"must be a CompactionEntry, got {type(e).__name__}")
    name(e.conversation, "entry.conversation")
    if not isinstance(e.urgency, str) or not isinstance(e.applied, bool):
        raise InvalidMessageError("entry.urgency", "urgency must be a string and applied a bool")
    if isinstance(e.at, bool) or not isinstance(e.at, (int, float)):
        raise InvalidMessageError("entry.at", "must be seconds since the epoch")
    if isinstance(e.strategies, str) or not all(isinstance(x, str) for x in e.strategies):
        raise InvalidMessageError("entry.strategies", "must be a tuple of strings")
    if e.summary_version is not None:
        count(e.summary_version, "entry.summary_version", minimum=1)
    return (
        e.at, e.urgency, e.applied, count(e.tokens_before, "entry.tokens_before"),
        count(e.tokens_after, "entry.tokens_after"), e.summary_version,
        count(e.upto_seq, "entry.upto_seq"), dumps(list(e.strategies), "entry.strategies"),
        dumps(dict(e.detail), "entry.detail"),
    )  # fmt: skip
