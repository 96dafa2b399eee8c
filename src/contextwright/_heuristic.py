"""A tokenizer-free token estimate that errs on the high side.

Placeholder: one token per CJK character, one per 3 other characters, plus one.
Replaced by the tuned estimator (see bench/bench_heuristic.py).
"""

from __future__ import annotations

import re

__all__ = ["estimate_tokens"]

_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    return 1 + cjk * 2 + (len(text) - cjk + 2) // 3
