"""How close the tokenizer-free estimate comes to the exact OpenAI token counts.

Compares `contextwright._heuristic.estimate_tokens` (what `HeuristicCounter` counts
with) and, for reference, the naive per-character estimator of seed document 004
(1.5 per CJK ideograph, 1.0 per CJK punctuation mark, 0.25 per space/newline/tab,
0.3 per other character, rounded up) with the exact cl100k_base and o200k_base
counts, on three corpora read from ``../shared`` (next to the repository; the data
is licensed for evaluation only and stays out of the repository):

* every turn ``text`` of the LoCoMo conversations (``data/locomo/*.json``);
* the seed documents (``seeds/*.txt``, Chinese prose with TypeScript, Rust and
  Python code) split into blank-line separated paragraphs;
* the same documents, every non-empty line on its own.

For each corpus and tokenizer (and "max", the larger of the two counts per text,
which is what the heuristic must never fall below) it prints the number of texts,
exact and estimated tokens, the total over-count (sum of estimates / sum of exact
counts - 1), the share of texts underestimated and the worst underestimate, then the
throughput of the heuristic and of tiktoken.

    /work/.venv/bin/python bench/bench_heuristic.py                 # a few seconds
    /work/.venv/bin/python bench/bench_heuristic.py --data DIR --seeds DIR
    /work/.venv/bin/python bench/bench_heuristic.py --tables        # + re-derive the
                                                                   #   character tables

``--tables`` tokenizes every Unicode character (and runs of the packed characters)
with both encodings, derives the tables of `_heuristic` again and says whether they
match (about 20 s). Needs the ``tiktoken`` extra. Exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from contextwright import _heuristic  # noqa: E402
from contextwright._heuristic import estimate_tokens  # noqa: E402
from contextwright._tokens import TiktokenCounter  # noqa: E402

SHARED = REPO.parent / "shared"


# -- corpora ---------------------------------------------------------------------------


def load_locomo(data_dir: Path) -> list[str]:
    """Every turn text of every LoCoMo conversation file in ``data_dir``."""
    texts: list[str] = []
    for path in sorted(data_dir.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        conv = doc.get("conversation", doc)
        sessions = [k for k in conv if re.fullmatch(r"session_\d+", k)]
        for key in sorted(sessions, key=lambda k: int(k.split("_")[1])):
            texts.extend(t["text"] for t in conv[key] if isinstance(t, dict) and t.get("text"))
    return texts


def load_seeds(seeds_dir: Path) -> tuple[list[str], list[str]]:
    """(paragraphs, lines) of the seed documents."""
    paragraphs: list[str] = []
    lines: list[str] = []
    for path in sorted(seeds_dir.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        paragraphs += [p for p in re.split(r"\n[ \t]*\n", text) if p.strip()]
        lines += [line for line in text.split("\n") if line]
    return paragraphs, lines


# -- the reference estimator -----------------------------------------------------------


def naive_estimate(text: str) -> int:
    """Seed 004's estimator (compactor.rs), character by character."""
    tokens = 0.0
    for ch in text:
        code = ord(ch)
        if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF:
            tokens += 1.5
        elif 0x3000 <= code <= 0x303F:
            tokens += 1.0
        elif ch in " \n\t":
            tokens += 0.25
        else:
            tokens += 0.3
    return math.ceil(tokens)


# -- measurement -----------------------------------------------------------------------


def score(estimates: Sequence[int], exact: Sequence[int]) -> dict[str, float]:
    under = [x - e for e, x in zip(estimates, exact, strict=True) if e < x]
    total_e, total_x = sum(estimates), sum(exact)
    return {
        "texts": len(exact),
        "exact": total_x,
        "estimate": total_e,
        "over_pct": 100.0 * (total_e / total_x - 1.0) if total_x else 0.0,
        "under_pct": 100.0 * len(under) / len(exact) if exact else 0.0,
        "worst_under": max(under, default=0),
    }


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def blob(texts: Sequence[str], size: int = 1 << 20) -> str:
    """About ``size`` bytes of the texts joined by blank lines."""
    out: list[str] = []
    n = 0
    while n < size:
        for t in texts:
            out.append(t)
            n += len(t.encode("utf-8")) + 2
            if n >= size:
                break
    return "\n\n".join(out)


def print_table(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1
) -> None:
    """A table with ``left`` left-aligned text columns, the rest right-aligned."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        print(f"\n{title}")
        print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
        for r in rows:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        return
    table = Table(title=title, title_justify="left")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i < left else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=160).print(table)


# -- re-deriving the tables ------------------------------------------------------------


def derive_tables(encodings: Sequence[object]) -> dict[str, object]:
    """The character tables of `_heuristic`, computed from the vocabularies."""

    def cost(s: str) -> int:
        return max(len(e.encode_ordinary(s)) for e in encodings)  # type: ignore[attr-defined]

    costs: dict[int, int] = {}
    for cp in range(0x80, 0x110000):
        if not 0xD800 <= cp < 0xE000:
            costs[cp] = cost(chr(cp))
    size = {cp: (2 if cp < 0x800 else 3 if cp < 0x10000 else 4) for cp in costs}
    one_2b = "".join(chr(cp) for cp, n in costs.items() if size[cp] == 2 and n == 1)
    one = "".join(chr(cp) for cp, n in costs.items() if size[cp] - n >= 2)
    blocks: dict[int, list[int]] = {}
    for cp, n in costs.items():
        blocks.setdefault(cp >> 6, []).append(size[cp] - n)
    d1 = [b for b, v in blocks.items() if len(v) == 64 and min(v) >= 1]
    plus2 = []
    free: dict[int, list[bool]] = {}
    for cp, n in costs.items():
        if cp > 0x2FFFF:
            break
        extra = cost(" " + chr(cp)) - n
        if extra >= 2:
            plus2.append(chr(cp))
        free.setdefault(cp >> 4, []).append(extra <= 0)
    free16 = [b for b, v in free.items() if len(v) == 16 and all(v)]
    packed = {}
    for ch in _heuristic._PACK:
        lengths = [*range(3 if ch < "\x80" else 2, 140), 255, 256, 257, 300, 511, 512, 513]
        worst = {}
        for n in lengths:
            run = ch * n
            w = 0
            for pre in ("", "a", "x "):
                for suf in ("", "a", "\n", " "):
                    e = (
                        cost(pre + run + suf)
                        - (cost(pre) if pre else 0)
                        - (cost(suf) if suf else 0)
                    )
                    w = max(w, e - pre.endswith(" "))
            worst[n] = w
        best = None
        for every in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64):
            extra = max(worst[n] - n // every for n in lengths)
            total = sum(n // every + extra for n in (3, 4, 5, 8, 16, 32, 64))
            if best is None or total < best[0]:
                best = (total, every, extra)
        assert best is not None
        packed[ch] = best[1:]
    return {
        "_ONE_TOKEN_2B": one_2b,
        "_ONE_TOKEN": one,
        "_SPACE_PLUS2": "".join(plus2),
        "_D1_BLOCKS64": sorted(d1),
        "_SPACE_FREE_BLOCKS16": sorted(free16),
        "_PACK": packed,
    }


def _blocks(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split():
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo, 16), int(hi or lo, 16) + 1))
    return out


def check_tables(encodings: Sequence[object]) -> None:
    t = time.perf_counter()
    derived = derive_tables(encodings)
    current = {
        "_ONE_TOKEN_2B": _heuristic._ONE_TOKEN_2B,
        "_ONE_TOKEN": _heuristic._ONE_TOKEN,
        "_SPACE_PLUS2": _heuristic._SPACE_PLUS2,
        "_D1_BLOCKS64": _blocks(_heuristic._D1_BLOCKS64),
        "_SPACE_FREE_BLOCKS16": _blocks(_heuristic._SPACE_FREE_BLOCKS16),
        "_PACK": _heuristic._PACK,
    }
    print(f"\nCharacter tables re-derived in {time.perf_counter() - t:.0f} s:")
    for name, value in derived.items():
        same = value == current[name]
        size = len(value)  # type: ignore[arg-type]
        print(f"  {name:22s} {size:6d} entries  {'matches' if same else 'DIFFERS'}")
        if not same:
            print(f"    derived: {value!r}"[:2000])


# -- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED / "data" / "locomo", help="LoCoMo folder")
    ap.add_argument("--seeds", type=Path, default=SHARED / "seeds", help="seed documents folder")
    ap.add_argument("--tables", action="store_true", help="re-derive the character tables")
    args = ap.parse_args(argv)

    corpora: dict[str, list[str]] = {}
    if args.data.is_dir():
        corpora["LoCoMo turns"] = load_locomo(args.data)
    else:
        print(f"no LoCoMo data at {args.data}; skipped")
    if args.seeds.is_dir():
        corpora["seed paragraphs"], corpora["seed lines"] = load_seeds(args.seeds)
    else:
        print(f"no seed documents at {args.seeds}; skipped")
    corpora = {k: v for k, v in corpora.items() if v}

    counters = {name: TiktokenCounter(name) for name in ("cl100k_base", "o200k_base")}
    headers = ["estimator", "corpus", "tokenizer", "texts", "exact", "estimated", "over-count",
               "texts under", "worst under"]  # fmt: skip
    rows: list[list[str]] = []
    estimators: dict[str, Callable[[str], int]] = {
        "heuristic": estimate_tokens,
        "naive (seed 004)": naive_estimate,
    }
    for est_name, estimate in estimators.items():
        for corpus, texts in corpora.items():
            exact = {name: [c.count(t) for t in texts] for name, c in counters.items()}
            exact["max"] = [max(a, b) for a, b in zip(*exact.values(), strict=True)]
            estimates = [estimate(t) for t in texts]
            for tok, counts in exact.items():
                s = score(estimates, counts)
                rows.append([
                    est_name, corpus, tok.replace("_base", ""), f"{s['texts']:,}",
                    f"{s['exact']:,}", f"{s['estimate']:,}", f"{s['over_pct']:+.1f}%",
                    f"{s['under_pct']:.1f}%", f"{s['worst_under']:,}",
                ])  # fmt: skip
    print_table("Estimate vs exact token counts", headers, rows, left=3)

    # Throughput: short texts one call each, and ~1 MB blobs.
    enc = counters["cl100k_base"].encoding
    trows: list[list[str]] = []
    workloads: list[tuple[str, list[str]]] = []
    if "LoCoMo turns" in corpora:
        turns = corpora["LoCoMo turns"]
        workloads.append(("LoCoMo turns, one call each", turns))
        workloads.append(("1 MB of LoCoMo (English)", [blob(turns)]))
    if "seed paragraphs" in corpora:
        workloads.append(("1 MB of seeds (Chinese + code)", [blob(corpora["seed paragraphs"])]))
    for name, texts in workloads:
        mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        th = best_time(lambda texts=texts: [estimate_tokens(t) for t in texts])
        tt = best_time(lambda texts=texts: [enc.encode_ordinary(t) for t in texts])
        trows.append([name, f"{mb:.2f}", f"{mb / th:.1f}", f"{mb / tt:.1f}", f"{tt / th:.1f}x"])
    print_table(
        "Throughput (MB/s, best of 3, one thread)",
        ["workload", "MB", "heuristic", "tiktoken cl100k", "speed-up"],
        trows,
    )

    if args.tables:
        check_tables([c.encoding for c in counters.values()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
