"""Fitting blocks into an allowance: P0 always, P1 truncated to fit, P2 dropped first.

Pure logic, no I/O. `fit_blocks` takes candidate blocks (already rendered and
counted) and an allowance and decides, for each, included / truncated / dropped,
with the reason. Blocks are considered in priority order (lower number first; ties
keep the order the sources were given in), so when space is short the less
important ones are the ones that go:

* priority <= 0 (P0): always included — the caller has already paid for them in
  the protected zone;
* 0 < priority < 2 (P1): included whole if it fits, otherwise its content is cut to
  the space left (with a marker), if at least ``min_truncated`` tokens are left;
* priority >= 2 (P2 and beyond): included whole or dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..model._blocks import Block, escape_attribute, escape_content, render_block
from ..tokens._count import TokenCounter
from ..tokens._truncate import truncate_to_tokens

__all__ = ["Candidate", "Decision", "fit_blocks", "render_cost", "truncate_block"]

# Blocks are joined with a blank line; the join costs at most one token per block.
JOIN = "\n\n"
JOIN_TOKENS = 1


@dataclass
class Candidate:
    """A fetched block, rendered and counted, with where it came from."""

    block: Block
    source: str
    text: str
    tokens: int  # of ``text`` plus the join
    cached: bool = False
    fetch_ms: float | None = None
    order: int = 0


@dataclass
class Decision:
    candidate: Candidate
    status: Literal["included", "truncated", "dropped"]
    text: str = ""
    tokens: int = 0
    reason: str = ""


def render_cost(block: Block, counter: TokenCounter) -> tuple[str, int]:
    text = render_block(block)
    return text, counter.count(text) + JOIN_TOKENS


def truncate_block(block: Block, max_tokens: int, counter: TokenCounter) -> tuple[str, int] | None:
    """The block rendered with its content cut so the whole costs <= ``max_tokens``."""
    attrs = "".join(f' {k}="{escape_attribute(str(v))}"' for k, v in block.attrs.items())
    head, tail = f"<{block.name}{attrs}>\n", f"\n</{block.name}>"
    frame = counter.count(head + tail) + JOIN_TOKENS + 2  # +2: merges at the seams
    body = block.content if block.raw else escape_content(block.content)
    room = max_tokens - frame
    for _ in range(4):
        if room <= 0:
            return None
        cut = truncate_to_tokens(body, room, counter, marker="…[truncated to fit the budget]")
        if not cut:
            return None
        text = head + cut + tail
        cost = counter.count(text) + JOIN_TOKENS
        if cost <= max_tokens:
            return text, cost
        room -= cost - max_tokens
    return None


def fit_blocks(
    candidates: Sequence[Candidate],
    allowance: int,
    counter: TokenCounter,
    *,
    min_truncated: int = 24,
) -> tuple[list[Decision], int]:
    """Decide every non-P0 candidate against ``allowance``; returns decisions and tokens used."""
    decisions: list[Decision] = []
    left = allowance
    for c in sorted(candidates, key=lambda c: (c.block.priority, c.order)):
        p = c.block.priority
        if p <= 0:
            decisions.append(Decision(c, "included", c.text, c.tokens, "P0: always included"))
            left -= c.tokens
            continue
        if c.tokens <= left:
            decisions.append(Decision(c, "included", c.text, c.tokens, "fits"))
            left -= c.tokens
            continue
        if p < 2 and left >= min_truncated:
            cut = truncate_block(c.block, left, counter)
            if cut is not None:
                text, cost = cut
                decisions.append(
                    Decision(
                        c, "truncated", text, cost, f"cut from {c.tokens} to {cost} tokens to fit"
                    )
                )
                left -= cost
                continue
        why = "P2: dropped first when space is short" if p >= 2 else "no room left to truncate into"
        decisions.append(
            Decision(c, "dropped", "", 0, f"needs {c.tokens}, {max(left, 0)} left; {why}")
        )
    return decisions, allowance - left
