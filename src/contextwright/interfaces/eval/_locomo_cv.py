"""Leave-one-conversation-out cross-validation of the ranker's knobs on LoCoMo.

A figure measured on the conversations a knob was chosen on flatters it. Here
every candidate configuration (a `RankWeights`, named by what it changes) is
evaluated on every conversation once (`evaluate_locomo`); then, for each
budget and each conversation held out in turn, the candidate with the best
pooled recall on the *other* conversations is picked (ties to the default,
then to the earlier candidate), and its recall on the held-out one is what
counts. The cross-validated recall pools those held-out results over evidence
turns, as the in-sample figure pools the default's.

The report (``cross_validate``) gives per budget: the default's in-sample
recall, the best candidate's in-sample recall (chosen on all conversations,
which is what tuning to the test looks like), the cross-validated recall, the
per-conversation held-out recalls with their mean and spread, and which
candidate each fold picked. With one candidate (the default engine, no
``--grid``) there is nothing to choose: the cross-validated figure *is* the
in-sample one, and the report says so (``tuned: false``).

``grid`` parsing (``KNOB=V1,V2``, the cartesian product of several) lives here
too, so that the command and tests share it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._errors import UserError
from ...history._rank import RankWeights, default_weights
from ._locomo import evaluate_locomo, resolve_embedder, spread
from ._locomo_data import load_locomo

__all__ = ["DEFAULT", "cross_validate", "parse_grid"]

DEFAULT = "default"


def parse_grid(specs: Sequence[str], base: RankWeights | None = None) -> dict[str, RankWeights]:
    """Candidates from ``KNOB=V1,V2`` specs (knobs of `RankWeights`), the default first.

    Each candidate is ``base`` (default `RankWeights()`; `default_weights` of the
    embedder evaluated) with the knobs named changed. Several specs give their
    cartesian product. A bad knob or value raises `UserError` naming it.
    """
    base = base or RankWeights()
    fields = {f.name: f for f in dataclasses.fields(RankWeights)}
    axes: list[list[tuple[str, Any]]] = []
    for spec in specs:
        knob, sep, raw = spec.partition("=")
        knob = knob.strip()
        if not sep or knob not in fields:
            raise UserError(
                f"--grid {spec!r}: expected KNOB=V1,V2 with KNOB one of {', '.join(fields)}"
            )
        kind = type(getattr(RankWeights(), knob))
        values: list[tuple[str, Any]] = []
        for v in raw.split(","):
            try:
                values.append((knob, _read(kind, v.strip())))
            except ValueError:
                raise UserError(
                    f"--grid {spec!r}: {v.strip()!r} is not a {kind.__name__}"
                ) from None
        if not values:
            raise UserError(f"--grid {spec!r}: no values")
        axes.append(values)
    out: dict[str, RankWeights] = {DEFAULT: base}
    for combo in itertools.product(*axes):
        weights = dataclasses.replace(base, **dict(combo))
        if weights != base:
            out.setdefault(",".join(f"{k}={v}" for k, v in combo), weights)
    return out


def _read(kind: type, raw: str) -> Any:
    if kind is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(raw)
        return raw.lower() in ("true", "1")
    return kind(raw)


def _pooled(per_conv: Mapping[str, Any], names: Sequence[str], budget: str) -> float:
    hits = sum(per_conv[n]["budgets"][budget]["hits"] for n in names)
    total = sum(per_conv[n]["budgets"][budget]["evidence"] for n in names)
    return hits / total if total else 0.0


def _best(per: Mapping[str, Any], order: Sequence[str], on: Sequence[str], budget: str) -> str:
    """The candidate with the highest pooled recall on ``on``; ties to the earlier one."""
    return max(order, key=lambda c: (_pooled(per[c], on, budget), -order.index(c)))


def cross_validate(
    paths: Sequence[Path],
    budgets: Sequence[int],
    grid: Mapping[str, RankWeights] | None = None,
    *,
    embedder: Any = "auto",
    locale: str = "en",
) -> dict[str, Any]:
    """The default's full report plus a ``cv`` section (see the module docstring).

    ``grid`` maps candidate names to weights (`parse_grid`); the default engine
    is always a candidate, named ``"default"``.
    """
    embedder = resolve_embedder(embedder, locale)  # once: every candidate shares its vectors
    candidates = {DEFAULT: default_weights(embedder), **(grid or {})}
    convs = [c for p in paths for c in load_locomo(p)]
    reports = {
        name: evaluate_locomo(
            paths, budgets, embedder=embedder, weights=w, conversations=convs, locale=locale
        )
        for name, w in candidates.items()
    }
    report = reports[DEFAULT]
    names = list(report["conversations"])
    order = list(candidates)
    cv: dict[str, Any] = {}
    for b in map(str, budgets):
        per = {c: reports[c]["conversations"] for c in order}
        picked: dict[str, str] = {}
        held: dict[str, float] = {}
        hits = total = 0
        for out in names:
            rest = [n for n in names if n != out] or [out]
            choice = _best(per, order, rest, b)
            r = per[choice][out]["budgets"][b]
            picked[out], held[out] = choice, r["recall"]
            hits += r["hits"]
            total += r["evidence"]
        chosen = _best(per, order, names, b)
        cv[b] = {
            "default": reports[DEFAULT]["budgets"][b]["recall"],
            "best_in_sample": {"candidate": chosen, "recall": reports[chosen]["budgets"][b]["recall"]},
            "cv_recall": hits / total if total else 0.0,
            "held_out": held, "held_out_spread": spread(list(held.values())), "picked": picked,
            "candidates": {c: reports[c]["budgets"][b]["recall"] for c in order},
            "per_conversation": {c: {n: per[c][n]["budgets"][b]["recall"] for n in names}
                                 for c in order},
        }  # fmt: skip
    report["cv"] = {
        "tuned": len(candidates) > 1,
        # each candidate as its changes to the default (whose own to `RankWeights()` follow)
        "candidates": {c: _changes(w, candidates[DEFAULT]) for c, w in candidates.items()},
        "default_weights": _changes(candidates[DEFAULT], RankWeights()),
        "budgets": cv,
    }  # fmt: skip
    return report


def _changes(weights: RankWeights, base: RankWeights) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(weights).items() if v != getattr(base, k)}
