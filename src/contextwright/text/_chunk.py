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
   and a space, or after ``。！？；``), and a sentence still over it is cut at the
   limit, back at the last space when there is one (CJK: at any character).
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
from ..model._checks import check_unicode, unicode_problem
from ..tokens._count import HeuristicCounter, TokenCounter
from ..tokens._truncate import truncate_to_tokens

__all__ = ["Chunk", "chunk_document"]

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_CJK_CHAR = "\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f"


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
    """Cut one over-long sentence into runs within ``limit``, at a space where there is one.

    Each cut is `truncate_to_tokens`' binary search (a few counts), not a count per word.
    """
    rest = text
    while rest.strip():
        if counter.count(rest) <= limit:
            yield rest
            return
        head = truncate_to_tokens(rest, limit, counter, marker="")
        cut = len(head)
        space = head.rfind(" ")
        if space > cut // 2:  # end at a word (CJK text has no spaces and may end anywhere)
            cut = space + 1
        cut = max(cut, 1)  # a single character over the limit goes alone
        yield rest[:cut]
        rest = rest[cut:]


def _units(paragraph: str, limit: int, counter: TokenCounter) -> list[tuple[str, str]]:
    """(separator before it, text) units of a paragraph, each within ``limit`` if possible."""
    if counter.count(paragraph) <= limit:
        return [("\n\n", paragraph)]
    out: list[tuple[str, str]] = []
    # Measured as emitted: without the spaces around it (the glue stands in for them);
    # counts are not additive, and a space can make a run count less than without it.
    for sentence in (s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()):
        parts = (
            [sentence]
            if counter.count(sentence) <= limit
            else list(_pieces(sentence, limit, counter))
        )
        for k, part in enumerate(parts):
            if not out:
                glue = "\n\n"
            elif k and not parts[k - 1][-1:].isspace():
                glue = ""  # `_pieces` cut inside a word (no space to cut at): nothing between
            else:
                glue = "" if re.match(f"[{_CJK_CHAR}]", part) else " "
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


_GLUE = 2  # what joining two units may add (a paragraph break), in the running estimate


def _pack(
    units: list[tuple[tuple[str, str], int]],
    costs: list[int],
    max_tokens: int,
    overlap_tokens: int,
    counter: TokenCounter,
    *,
    sure: float,
) -> list[tuple[list[tuple[str, str]], int, int]]:
    """Greedy packing: (units of a chunk, how many are not overlap, line of the first new one).

    The running size is an estimate (unit counts plus glue) until it passes ``sure`` of
    the limit; from there each step counts the joined chunk. Counting the whole chunk
    at every step costs O(n²) counts per section; this costs about one per unit.
    """
    out: list[tuple[list[tuple[str, str]], int, int]] = []
    current: list[tuple[str, str]] = []
    fresh = spent = first_line = 0
    i = 0
    while i < len(units):
        (unit, line), cost = units[i], costs[i]
        exact: int | None = None
        if current and spent + cost + _GLUE > max_tokens * sure:
            exact = counter.count(_join([*current, unit]))
            if exact > max_tokens:
                if fresh:
                    out.append((current, fresh, first_line))
                    current, fresh = _tail(current, overlap_tokens, counter), 0
                    spent = counter.count(_join(current)) if current else 0
                    continue  # the same unit again, now after the overlap
                current, spent, exact = [], 0, None  # the overlap does not fit beside it
        if not fresh:
            first_line = line
        current = [*current, unit]
        spent = exact if exact is not None else spent + cost + _GLUE
        fresh += 1
        i += 1
    if fresh:
        out.append((current, fresh, first_line))
    return out


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
    check_unicode(text, "text")
    if not isinstance(source, str) or not source:
        raise ConfigError(f"source must be a non-empty string, got {source!r}")
    if (problem := unicode_problem(source)) is not None:
        raise ConfigError(f"source {problem}")
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
        costs = [counter.count(text) for (_, text), _ in units]
        packed = _pack(units, costs, max_tokens, overlap_tokens, counter, sure=0.85)
        if any(counter.count(_join(c)) > max_tokens for c, _, _ in packed):
            # the estimate undercounted somewhere (counts are not additive): count every step
            packed = _pack(units, costs, max_tokens, overlap_tokens, counter, sure=0.0)
        for content, fresh, line in packed:
            chunks.append(_chunk(content, fresh, line, source, section, len(chunks)))
    return chunks
