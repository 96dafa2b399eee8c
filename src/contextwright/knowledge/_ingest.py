"""Documents into chunks: by headings, then paragraphs, then sentences, with overlap.

`chunk_document` cuts a markdown or plain-text document into `Chunk`s of at most
``max_tokens`` tokens by the given counter (the heuristic one by default), each
knowing its source and its heading path (``("Guide", "Eligibility")``):

1. **Sections.** Markdown ATX headings (``#`` … ``######``) and setext headings
   (a line underlined with ``===`` or ``---``) open sections; a heading inside a
   fenced code block is code, not a heading. A chunk never spans two sections, so
   every chunk has one heading path. Plain text is one section without headings.
2. **Paragraphs.** A section's text splits at blank lines (a fenced code block is
   one paragraph, blank lines and all) and paragraphs are packed greedily into
   chunks up to the limit.
3. **Sentences.** A paragraph over the limit splits into sentences (after ``.!?``
   and a space, or after ``。！？；``), and a sentence still over it into words (CJK:
   characters), packed the same way.
4. **Overlap.** Each chunk after the first of a section starts with the end of the
   previous one — whole sentences or paragraphs while they fit ``overlap_tokens``,
   else the tail words of the last one — so a statement cut at a boundary is still
   whole in one of the two chunks. The overlap counts against ``max_tokens``.

Every chunk is counted whole by the counter before it is accepted (token counts are
not additive across joins), so ``counter.count(chunk.content) <= max_tokens``
holds for every chunk; a property test checks it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError, InvalidMessageError
from .._tokens import HeuristicCounter, TokenCounter, truncate_to_tokens

__all__ = ["Chunk", "chunk_document"]

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_CJK_CHAR = "\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f"
_PIECE = re.compile(f"[{_CJK_CHAR}]|[^\\s{_CJK_CHAR}]+\\s*|\\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document, ready to index: text, source, headings, position."""

    content: str
    source: str
    heading_path: tuple[str, ...] = ()
    index: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class _Section:
    path: tuple[str, ...]
    paragraphs: list[tuple[str, int]] = field(default_factory=list)  # (text, first line)


def _sections(text: str, markdown: bool) -> list[_Section]:
    sections = [_Section(())]
    stack: list[tuple[int, str]] = []
    para: list[str] = []
    para_line = 0
    fence: str | None = None

    def flush() -> None:
        nonlocal para
        body = "\n".join(para).strip("\n")
        if body.strip():
            sections[-1].paragraphs.append((body, para_line))
        para = []

    def open_section(level: int, title: str) -> None:
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        sections.append(_Section(tuple(t for _, t in stack)))

    for n, line in enumerate(text.splitlines(), 1):
        if markdown:
            m = _FENCE.match(line)
            if fence is not None:
                para.append(line)
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                    fence = None
                continue
            if m:
                if not para:
                    para_line = n
                fence = m.group(1)
                para.append(line)
                continue
            heading = _ATX.match(line)
            if heading:
                open_section(len(heading.group(1)), (heading.group(2) or "").strip())
                continue
            underline = _SETEXT.match(line)
            if underline and len(para) == 1 and para[0].strip():
                title = para.pop().strip()
                open_section(1 if underline.group(1)[0] == "=" else 2, title)
                continue
        if not line.strip():
            flush()
            continue
        if not para:
            para_line = n
        para.append(line)
    flush()
    return [s for s in sections if s.paragraphs]


def _pieces(text: str, limit: int, counter: TokenCounter) -> Iterator[str]:
    """Cut one over-long sentence into runs of words (CJK: characters) within ``limit``."""
    run: list[str] = []
    spent = 0
    for piece in _PIECE.findall(text):
        cost = counter.count(piece)
        if cost > limit:  # one "word" over the limit (a URL, a base64 blob): cut it up
            if run:
                yield "".join(run)
                run, spent = [], 0
            rest = piece
            while rest:
                head = truncate_to_tokens(rest, limit, counter, marker="")
                if not head:
                    head = rest[0]  # a single character over the limit: it goes alone
                yield head
                rest = rest[len(head) :]
            continue
        if run and spent + cost > limit * 0.9 and counter.count("".join([*run, piece])) > limit:
            yield "".join(run)
            run, spent = [], 0
        run.append(piece)
        spent += cost
    if run:
        yield "".join(run)


def _units(paragraph: str, limit: int, counter: TokenCounter) -> list[tuple[str, str]]:
    """(separator before it, text) units of a paragraph, each within ``limit`` if possible."""
    if counter.count(paragraph) <= limit:
        return [("\n\n", paragraph)]
    out: list[tuple[str, str]] = []
    for sentence in (s for s in _SENTENCE_END.split(paragraph) if s.strip()):
        parts = (
            [sentence]
            if counter.count(sentence) <= limit
            else list(_pieces(sentence, limit, counter))
        )
        for part in parts:
            glue = "\n\n" if not out else ("" if re.match(f"[{_CJK_CHAR}]", part) else " ")
            out.append((glue, part.strip() if glue == " " else part))
    return out


def _join(units: list[tuple[str, str]]) -> str:
    return "".join(glue + text for glue, text in units).lstrip()


def _tail(
    units: list[tuple[str, str]], budget: int, counter: TokenCounter
) -> list[tuple[str, str]]:
    """The last units of a chunk that fit ``budget`` (or the last one's tail words)."""
    if budget <= 0 or not units:
        return []
    kept: list[tuple[str, str]] = []
    for unit in reversed(units):
        if counter.count(_join([unit, *kept])) > budget:
            break
        kept.insert(0, unit)
    if kept:
        return kept
    tail = truncate_to_tokens(units[-1][1], budget, counter, keep="tail", marker="")
    if " " in tail.strip():  # start at a word, not inside one
        tail = tail[tail.index(" ") + 1 :]
    return [("\n\n", tail.strip())] if tail.strip() else []


def _chunk(
    units: list[tuple[str, str]], fresh: int, line: int, source: str, section: _Section, index: int
) -> Chunk:
    meta = {"line": line, "overlap_units": len(units) - fresh}
    return Chunk(_join(units), source, section.path, index, meta)


def chunk_document(
    text: str,
    *,
    source: str,
    format: Literal["markdown", "text"] = "markdown",
    max_tokens: int = 300,
    overlap_tokens: int = 40,
    counter: TokenCounter | None = None,
) -> list[Chunk]:
    """``text`` cut into chunks of at most ``max_tokens`` (see the module docstring)."""
    if not isinstance(text, str):
        raise InvalidMessageError("text", f"must be a string, got {type(text).__name__}")
    if not isinstance(source, str) or not source:
        raise ConfigError(f"source must be a non-empty string, got {source!r}")
    if format not in ("markdown", "text"):
        raise ConfigError(f"format must be 'markdown' or 'text', got {format!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 8:
        raise ConfigError(f"max_tokens must be an int >= 8, got {max_tokens!r}")
    if isinstance(overlap_tokens, bool) or not isinstance(overlap_tokens, int):
        raise ConfigError(f"overlap_tokens must be an int, got {overlap_tokens!r}")
    if not 0 <= overlap_tokens <= max_tokens // 2:
        raise ConfigError(
            f"overlap_tokens must be within 0..max_tokens/2 ({max_tokens // 2}), got {overlap_tokens}"
        )
    counter = counter or HeuristicCounter()
    chunks: list[Chunk] = []
    for section in _sections(text, format == "markdown"):
        # Units are cut to fit beside a full overlap, so every chunk can carry one.
        units = [
            (u, line)
            for paragraph, line in section.paragraphs
            for u in _units(paragraph, max_tokens - overlap_tokens, counter)
        ]
        current: list[tuple[str, str]] = []
        fresh, first_line = (
            0,
            0,
        )  # units not carried over from the previous chunk; line of the first
        for unit, line in units:
            candidate = [*current, unit]
            if current and counter.count(_join(candidate)) > max_tokens:
                if fresh:
                    chunks.append(_chunk(current, fresh, first_line, source, section, len(chunks)))
                    current, fresh = _tail(current, overlap_tokens, counter), 0
                candidate = [*current, unit]
                if current and counter.count(_join(candidate)) > max_tokens:
                    candidate = [unit]  # the overlap does not fit beside this unit
            if not fresh:
                first_line = line
            current = candidate
            fresh += 1
        if fresh:
            chunks.append(_chunk(current, fresh, first_line, source, section, len(chunks)))
    return chunks
