"""The ``eval`` command: ``contextwright eval locomo DIR [--budget …] [--embedder auto|none|static|minilm] [--cv
[--grid KNOB=V1,V2 …]] [--json]``.

Parses the budgets and the files, runs `evaluate_locomo` (or, with ``--cv``,
`cross_validate`), and prints the report as tables (rich) or as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..._errors import UserError
from ...history._rank import default_weights
from ._locomo import CATEGORIES, evaluate_locomo, resolve_embedder
from ._locomo_cv import cross_validate, parse_grid

__all__ = ["add_parsers", "run"]


def add_parsers(sub: Any) -> None:
    ev = sub.add_parser("eval", help="measure recall on a benchmark")
    which = ev.add_subparsers(dest="benchmark", required=True)
    lo = which.add_parser(
        "locomo", help="LoCoMo conversations: recall of evidence turns per budget"
    )
    lo.add_argument("dir", type=Path, help="a directory of LoCoMo *.json files, or one file")
    _common(lo)
    zh = which.add_parser(
        "zh", help="a generated Chinese set in LoCoMo's format (deterministic by --seed)"
    )
    zh.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    zh.add_argument("--conversations", type=int, default=5, help="how many (default 5)")
    zh.add_argument("--write", type=Path, metavar="DIR", help="keep the generated files in DIR")
    _common(zh)


def _common(lo: Any) -> None:
    lo.add_argument("--budget", dest="budgets", default="1000,2000,4000,8000",
                    help="comma-separated token budgets besides system prompt and question")  # fmt: skip
    lo.add_argument("--embedder", choices=["auto", "none", "static", "minilm"], default="auto",
                    help="vector evidence: auto (static where it pays, if installed), none, static "
                    "(WordLlama, the static extra), minilm (all-MiniLM-L6-v2, the embeddings "
                    "extra)")  # fmt: skip
    lo.add_argument("--cv", action="store_true",
                    help="add a leave-one-conversation-out summary over the --grid candidates")  # fmt: skip
    lo.add_argument("--grid", action="append", default=[], metavar="KNOB=V1,V2",
                    help="ranker knob values to choose among under --cv (repeatable: product)")  # fmt: skip
    lo.add_argument("--json", action="store_true", help="print the raw report as JSON")


def _budgets(raw: str) -> list[int]:
    try:
        out = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--budget must be comma-separated integers, got {raw!r}") from None
    if not out or any(b <= 0 for b in out):
        raise UserError(f"--budget must be positive integers, got {raw!r}")
    return out


def _files(where: Path) -> list[Path]:
    if where.is_file():
        return [where]
    if not where.is_dir():
        raise UserError(f"{where}: no such directory")
    files = sorted(where.glob("*.json"))
    if not files:
        raise UserError(f"{where}: no *.json files")
    return files


def _zh_report(args: argparse.Namespace, measure: Any) -> dict[str, Any]:
    """``measure(files)`` on the Chinese set, written to ``--write`` or to a temporary directory."""
    import tempfile

    from ._zh import write_set

    if args.conversations < 1:
        raise UserError(f"--conversations must be at least 1, got {args.conversations}")
    if args.write is not None:
        return dict(measure(write_set(args.write, args.seed, args.conversations)))
    with tempfile.TemporaryDirectory(prefix="contextwright-zh-") as d:
        return dict(measure(write_set(Path(d), args.seed, args.conversations)))


def run(args: argparse.Namespace, out: Any) -> int:
    """``eval locomo`` / ``eval zh``: the report as a table, or as JSON with ``--json``; returns 0."""
    budgets = _budgets(args.budgets)
    if args.grid and not args.cv:
        raise UserError("--grid needs --cv")
    zh = args.benchmark == "zh"
    locale = "zh" if zh else "en"
    files = [] if zh else _files(args.dir)
    embedder: Any = None
    if args.embedder == "minilm":
        from ...memory import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    elif args.embedder == "static":
        from ...memory import StaticEmbedder

        embedder = StaticEmbedder()
    elif args.embedder == "auto":
        embedder = resolve_embedder("auto", locale)
    # the candidates vary the defaults of the embedder evaluated
    grid = parse_grid(args.grid, default_weights(embedder))

    def measure(files: list[Path]) -> dict[str, Any]:
        if args.cv:
            return cross_validate(files, budgets, grid, embedder=embedder, locale=locale)
        return evaluate_locomo(files, budgets, embedder=embedder, locale=locale)

    report = _zh_report(args, measure) if zh else measure(files)
    report["set"] = "Chinese (generated)" if zh else "LoCoMo"
    if args.json:
        out.write(json.dumps(report, indent=1) + "\n")
    else:
        _table(report, out)
    return 0


def _table(report: dict[str, Any], out: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    cats = sorted({c for b in report["budgets"].values() for c in b["per_category"]})
    table = Table(title=f"{report.get('set', 'LoCoMo')} recall · embedder {report['embedder']} · "
                  f"{report['questions']} questions · cl100k", title_justify="left")  # fmt: skip
    for col in ("budget", "recall", *(f"{c} {CATEGORIES.get(int(c), '?')}" for c in cats),
                "tokens mean", "max", "over", "p50 ms", "p95 ms"):  # fmt: skip
        table.add_column(col, justify="right")
    for b, r in report["budgets"].items():
        table.add_row(
            b, f"{r['recall']:.3f}", *(f"{r['per_category'].get(c, 0):.3f}" for c in cats),
            f"{r['tokens_mean']:.0f}", str(r["tokens_max"]), str(r["over_budget"]),
            f"{r['latency_ms']['p50']:.1f}", f"{r['latency_ms']['p95']:.1f}",
        )  # fmt: skip
    console = Console(file=out, width=140)
    console.print(table)
    per = Table(title="per conversation (recall by budget)", title_justify="left")
    per.add_column("file")
    for b in report["budgets"]:
        per.add_column(b, justify="right")
    for name, c in report["conversations"].items():
        per.add_row(name, *(f"{c['budgets'][b]['recall']:.3f}" for b in report["budgets"]))
    for key, label in (("mean", "mean"), ("sd", "sd"), ("min", "min"), ("max", "max")):
        per.add_row(label, *(f"{report['spread'][b][key]:.3f}" for b in report["budgets"]))
    console.print(per)
    if "cv" in report:
        _cv_table(report["cv"], console)
    console.print(
        f"unresolved evidence ids skipped: {report['unresolved_evidence']} · questions "
        f"without usable evidence skipped: {report['questions_skipped']} · {report['seconds']} s"
    )


def _cv_table(cv: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    n = len(cv["candidates"])
    title = (f"leave-one-conversation-out · {n} candidates" if cv["tuned"] else
             "leave-one-conversation-out · default engine only: nothing is chosen, CV = in-sample")  # fmt: skip
    table = Table(title=title, title_justify="left")
    for col in ("budget", "default", "best in-sample", "CV recall", "held-out mean ± sd",
                "min", "max", "picked"):  # fmt: skip
        table.add_column(col, justify="right")
    for b, r in cv["budgets"].items():
        s = r["held_out_spread"]
        picks = sorted(set(r["picked"].values()))
        table.add_row(
            b, f"{r['default']:.3f}",
            f"{r['best_in_sample']['recall']:.3f} ({r['best_in_sample']['candidate']})",
            f"{r['cv_recall']:.3f}", f"{s['mean']:.3f} ± {s['sd']:.3f}",
            f"{s['min']:.3f}", f"{s['max']:.3f}", "; ".join(picks),
        )  # fmt: skip
    console.print(table)
