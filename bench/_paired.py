"""What the ratio benchmarks share: paired ratios with their spread, and the goals table.

A ratio goal is measured side by side: both contenders run in the same round,
one right after the other (in alternating order), so load that comes and goes on a
shared machine hits both. Each round gives one ratio; the table prints the median of
those ratios and their interquartile range, with the medians of both sides beside.
A goal that was not measured in this run (a size left out by ``--quick`` or by the
caller) prints SKIP, so the table always has the same rows.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

__all__ = ["Goal", "Ratio", "goal_table", "paired", "quartiles", "rotate"]


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75); one value is its own spread."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass(frozen=True)
class Ratio:
    """``slow / fast`` per round: median, interquartile range, and each side's median."""

    median: float
    p25: float
    p75: float
    slow_median: float
    fast_median: float
    rounds: int

    def spread(self) -> str:
        return f"{self.p25:.2f}-{self.p75:.2f}"


def paired(slow: Sequence[float], fast: Sequence[float]) -> Ratio:
    """The per-round ratio ``slow[i] / fast[i]`` of two equally long series."""
    if len(slow) != len(fast) or not slow:
        raise ValueError(f"paired series differ in length or are empty: {len(slow)}, {len(fast)}")
    ratios = [s / max(f, 1e-9) for s, f in zip(slow, fast, strict=True)]
    p25, med, p75 = quartiles(ratios)
    return Ratio(med, p25, p75, statistics.median(slow), statistics.median(fast), len(ratios))


def rotate(items: Sequence[str], k: int) -> list[str]:
    """``items`` started at position ``k`` (mod their number): each round starts elsewhere."""
    k %= len(items)
    return [*items[k:], *items[:k]]


@dataclass(frozen=True)
class Goal:
    """One goal: ``ratio`` must be >= ``target`` (or <= when ``at_most``); None: not run.

    A goal that is a count rather than a ratio (zero stale builds) gives ``check``:
    what was measured, and whether that meets the goal; ``target`` is then its text.
    """

    name: str
    target: float | str
    ratio: Ratio | None
    at_most: bool = False
    unit: str = "ms"
    note: str = ""
    check: tuple[str, bool] | None = None

    @property
    def verdict(self) -> str:
        if self.check is not None:
            return "PASS" if self.check[1] else "MISS"
        if self.ratio is None or isinstance(self.target, str):
            return "SKIP"
        r = self.ratio.median
        return "PASS" if (r <= self.target if self.at_most else r >= self.target) else "MISS"


def goal_table(console: Console, title: str, goals: Sequence[Goal], sides: str) -> None:
    """Print ``goals`` as one table; ``sides`` names the two medians' columns' meaning."""
    tab = Table(title=title)
    for col, just in (
        ("goal", "left"),
        ("target", "right"),
        ("measured (median)", "right"),
        ("IQR", "right"),
        ("rounds", "right"),
        (sides, "right"),
        ("result", "left"),
        ("note", "left"),
    ):
        tab.add_column(col, justify=just)  # type: ignore[arg-type]
    for g in goals:
        r = g.ratio
        colour = {"PASS": "green", "MISS": "red", "SKIP": "yellow"}[g.verdict]
        if isinstance(g.target, str):
            target = g.target
        else:
            target = f"{'<=' if g.at_most else '>='} {g.target:g}x"
        measured = g.check[0] if g.check else f"{r.median:.2f}x" if r else "-"
        tab.add_row(
            g.name,
            target,
            measured,
            r.spread() if r else "-",
            str(r.rounds) if r else "-",
            f"{r.slow_median:.3g} / {r.fast_median:.3g} {g.unit}" if r else "-",
            f"[{colour}]{g.verdict}[/]",
            g.note if r or g.check else (g.note or "not run"),
        )
    console.print(tab)
    counts = {v: sum(g.verdict == v for g in goals) for v in ("PASS", "MISS", "SKIP")}
    console.print(
        f"goals: {counts['PASS']} PASS, {counts['MISS']} MISS, {counts['SKIP']} SKIP "
        f"(of {len(goals)})"
    )
