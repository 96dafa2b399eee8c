"""Retrieved passages as prompt text, with source and similarity, under a budget.

    Source: Guide › Eligibility (similarity: 0.92)
    > Applicants must hold a bachelor's degree from one of the world's top 100
    > universities and have three years of work experience.

or, for ``locale="zh"``, ``来源:高才通计划申请指南 (相似度: 0.92)`` and the same
quoted lines. Passages are separated by a blank line. The text never exceeds the
budget by the given counter: passages are added best first while they fit whole;
the first that does not fit is cut to its header and as many lines (the last one
truncated) as fit, and nothing follows it.

The source templates (`contextwright.sources`) write the same two lines; they are
repeated here because knowledge sits below sources in the layering (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tokens._count import TokenCounter
from ..tokens._truncate import truncate_to_tokens
from ._knowledge import KnowledgeHit

__all__ = ["render_passages"]

_TEMPLATES = {
    "en": ("Source: {source} (similarity: {score:.2f})", "> {line}"),
    "zh": ("来源:{source} (相似度: {score:.2f})", "> {line}"),
}


def _entry(hit: KnowledgeHit, locale: str) -> tuple[str, list[str]]:
    header, line = _TEMPLATES["zh" if locale.lower().startswith("zh") else "en"]
    head = header.format(source=hit.passage.title, score=hit.score)
    return head, [line.format(line=x) for x in hit.passage.content.splitlines() if x.strip()]


def render_passages(
    hits: Sequence[KnowledgeHit], budget_tokens: int, counter: TokenCounter, *, locale: str = "en"
) -> str:
    """The passages as prompt text, within ``budget_tokens`` (module docstring)."""
    out: list[str] = []

    def fits(parts: list[str]) -> bool:
        return counter.count("\n\n".join(parts)) <= budget_tokens

    for hit in hits:
        head, lines = _entry(hit, locale)
        whole = "\n".join([head, *lines])
        if fits([*out, whole]):
            out.append(whole)
            continue
        kept = [head]
        for line in lines:
            if fits([*out, "\n".join([*kept, line])]):
                kept.append(line)
                continue
            spare = budget_tokens - counter.count("\n\n".join([*out, "\n".join(kept)]) + "\n")
            cut = truncate_to_tokens(line, max(spare, 0), counter, marker="…")
            if cut.strip() not in ("", ">", "…") and fits([*out, "\n".join([*kept, cut])]):
                kept.append(cut)
            break
        if len(kept) > 1:
            out.append("\n".join(kept))
        break
    return "\n\n".join(out)
