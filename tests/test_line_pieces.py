"""`CachedCounter` splits a long text at the line cuts its tokenizer never merges across.

`line_pieces` finds those cuts from the text's line breaks instead of running the
look-behind regex over every character; it must cut exactly where the regex does,
for every character that can follow a line break and for any mix of breaks,
whitespace (Unicode's too) and slashes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import CachedCounter, TiktokenCounter
from contextwright.tokens._count import _LINE_CUTS, line_pieces

TRICKY = "\n\n /\t\r\x0b\x0c\x1c\x85\xa0\u2028\u3000…中ab"


@given(st.text(alphabet=st.sampled_from(TRICKY), max_size=60) | st.text(max_size=60))
@settings(max_examples=400, deadline=None)
def test_line_pieces_cut_where_the_regex_cuts(text: str) -> None:
    assert line_pieces(text) == _LINE_CUTS.split(text)


def test_every_character_after_a_line_break() -> None:
    for cp in range(0x110000):
        text = f"a\n{chr(cp)}b\n"
        assert line_pieces(text) == _LINE_CUTS.split(text), hex(cp)


def test_a_long_text_counts_as_its_pieces_sum() -> None:
    inner = TiktokenCounter("cl100k_base")
    text = "\n".join(f"- point {i}: /path and  indented\n  more {i}" for i in range(60))
    assert len(line_pieces(text)) > 1
    assert CachedCounter(inner).count(text) == inner.count(text)
