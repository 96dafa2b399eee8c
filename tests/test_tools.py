"""Tool-result compression: per-tool strategies, offload with a pointer, read-back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import ConfigError, HeuristicCounter, TiktokenCounter
from contextwright.history import (
    READBACK_TOOL,
    ToolPolicy,
    ToolResultCompressor,
    readback_page,
    readback_tool,
)

C = TiktokenCounter("cl100k_base")


def search_result(n: int) -> str:
    return json.dumps(
        {
            "query": "visa",
            "results": [{"id": i, "title": f"Doc {i}", "excerpt": "text " * 30} for i in range(n)],
        }
    )


def test_small_results_are_untouched():
    comp = ToolResultCompressor(C)
    out = comp.compress("ok, 3 rows", tool="sql", key="tool:1")
    assert out.text == "ok, 3 rows"
    assert not out.changed
    assert out.offload_key is None


def test_json_list_keeps_first_items_and_counts_the_rest():
    comp = ToolResultCompressor(
        C, default=ToolPolicy(max_tokens=600, list_items=3, offload_above=None)
    )
    out = comp.compress(search_result(40), tool="search", key="tool:1")
    assert out.strategy == "json_list"
    view = json.loads(out.text)
    assert [r["id"] for r in view["results"][:3]] == [0, 1, 2]
    assert view["results"][-1] == "… 37 more item(s) of 40 not shown"
    assert out.tokens_after <= 600
    assert out.offload_key is None


def test_skeleton_when_items_are_too_big():
    big_items = json.dumps([{"blob": "x" * 5000, "n": i} for i in range(3)])
    comp = ToolResultCompressor(
        C, default=ToolPolicy(strategy="json_skeleton", max_tokens=100, offload_above=None)
    )
    out = comp.compress(big_items, tool="t")
    assert out.strategy == "json_skeleton"
    assert "×3" in out.text
    assert out.tokens_after <= 100


def test_head_and_tail_for_text():
    log = "\n".join(f"line {i}" for i in range(3000)) + "\nERROR: disk full"
    comp = ToolResultCompressor(C, default=ToolPolicy(max_tokens=200, offload_above=None))
    out = comp.compress(log, tool="sh")
    assert out.strategy == "head_tail"
    assert out.text.startswith("line 0")
    assert out.text.endswith("ERROR: disk full")
    assert out.tokens_after <= 200


def test_offload_adds_a_pointer_and_keeps_the_original():
    comp = ToolResultCompressor(C, default=ToolPolicy(max_tokens=300, offload_above=1000))
    original = search_result(80)
    out = comp.compress(original, tool="search", key="tool:call_9")
    assert out.offload_key == "tool:call_9"
    assert out.original == original
    assert READBACK_TOOL in out.text
    assert "tool:call_9" in out.text
    assert out.tokens_after <= 300


def test_readback_output_is_never_offloaded_again():
    comp = ToolResultCompressor(C, default=ToolPolicy(max_tokens=100, offload_above=200))
    page = readback_page(search_result(80), 1, C)
    out = comp.compress(page, tool=READBACK_TOOL, key="tool:call_10")
    assert out.text == page
    assert out.offload_key is None


@given(st.text(min_size=1, max_size=3000), st.integers(1, 400))
def test_pages_cover_the_original_exactly(text, page_tokens):
    h = HeuristicCounter()
    first = readback_page(text, 1, h, page_tokens=page_tokens)
    total = int(first.split(" of ", 1)[1].split("]", 1)[0])
    pages = [
        readback_page(text, p, h, page_tokens=page_tokens).split("\n", 1)[1]
        for p in range(1, total + 1)
    ]
    assert "".join(pages) == text
    assert "does not exist" in readback_page(text, total + 1, h, page_tokens=page_tokens)


def test_readback_tool_definitions():
    openai_tool = readback_tool("openai")
    assert openai_tool["function"]["name"] == READBACK_TOOL
    assert openai_tool["function"]["parameters"]["required"] == ["key"]
    anthropic_tool = readback_tool("anthropic")
    assert anthropic_tool["input_schema"]["properties"]["page"]["type"] == "integer"
    assert readback_tool("responses")["name"] == READBACK_TOOL
    with pytest.raises(ConfigError):
        readback_tool("gemini")  # type: ignore[arg-type]


def test_tool_definitions_match_the_sdk_types():
    from openai.types.chat import ChatCompletionToolParam
    from pydantic import ConfigDict, TypeAdapter

    strict = ConfigDict(extra="forbid")
    TypeAdapter(list[ChatCompletionToolParam], config=strict).validate_python(
        [readback_tool("openai")]
    )
    from anthropic.types import ToolParam

    TypeAdapter(list[ToolParam], config=strict).validate_python([readback_tool("anthropic")])
    with pytest.raises(ValueError, match="extra"):
        TypeAdapter(list[ToolParam], config=strict).validate_python(
            [{**readback_tool("anthropic"), "input_schma": {}}]
        )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategy": "zip"},
        {"max_tokens": 5},
        {"list_items": -1},
        {"max_tokens": 500, "offload_above": 100},
    ],
)
def test_bad_policies(kwargs):
    with pytest.raises(ConfigError):
        ToolPolicy(**kwargs)


# -- counting only what enters the prompt -------------------------------------------------

_TEXTS = st.one_of(
    st.text(max_size=3000),
    st.text(alphabet="ab \n{}[]\",:0123456789", max_size=6000),
    st.text(alphabet="上海工作我们 the refund", max_size=3000),
    st.builds(lambda n, w: (w + " ") * n, st.integers(0, 1500), st.sampled_from(["a", "hello", " ", "…", "🙂", "上海"])),
    st.builds(lambda n: search_result(n), st.integers(0, 60)),
)  # fmt: skip


@given(_TEXTS, st.integers(16, 1200), st.sampled_from([None, 1.0, 2.0]))
def test_property_a_kept_result_always_fits_by_the_exact_count(text, max_tokens, offload):
    # The cheap decisions (UTF-8 size, a counted sample) may only ever send a result
    # that would fit to compression, never keep one that does not; and the view,
    # pointer included, is counted exactly and fits.
    above = None if offload is None else int(max_tokens * offload)
    comp = ToolResultCompressor(C, default=ToolPolicy(max_tokens=max_tokens, offload_above=above))
    out = comp.compress(text, tool="t", key="tool:1")
    exact = C.count(text)
    if not out.changed:
        assert out.text == text
        assert out.tokens_before == out.tokens_after == exact <= max_tokens
        assert not out.estimated
    else:
        assert exact > max_tokens or out.estimated
        assert out.tokens_after == C.count(out.text)
        if out.offload_key is None or max_tokens >= 64:  # else the pointer alone may not fit
            assert out.tokens_after <= max_tokens
        if not out.estimated:
            assert out.tokens_before == exact


def test_a_large_result_is_never_counted_whole():
    from contextwright import CachedCounter

    counter = CachedCounter(C)
    comp = ToolResultCompressor(counter, default=ToolPolicy(max_tokens=300, offload_above=1000))
    original = search_result(400)  # about 100,000 characters
    out = comp.compress(original, tool="search", key="tool:call_7")
    counted = list(counter._cache)
    assert original not in counted
    assert max(map(len, counted)) < 2_000  # the sample, the pointer and the views
    assert out.estimated
    assert out.offload_key == "tool:call_7"
    assert "about " in out.text  # the pointer says the size is an estimate
    exact = C.count(original)
    assert 0.8 * exact < out.tokens_before < 1.25 * exact
    assert out.tokens_after == C.count(out.text) <= 300


def test_small_results_by_bytes_are_kept_and_counted_once():
    from contextwright import CachedCounter

    counter = CachedCounter(C)
    comp = ToolResultCompressor(counter, default=ToolPolicy(max_tokens=64))
    out = comp.compress("ok, 3 rows: " + "x" * 40, tool="sql", key="tool:1")
    assert not out.changed
    assert out.tokens_before == C.count(out.text)
    assert counter.misses == 1


@given(st.text(min_size=1, max_size=4000), st.integers(8, 300))
def test_property_head_and_tail_matches_truncate_to_tokens(text, room):
    from contextwright import truncate_to_tokens

    comp = ToolResultCompressor(C)
    exact = C.count(text)
    if exact <= room:
        return  # the compressor only cuts results that do not fit
    marker = "\n…[{omitted} characters of this tool result not shown]…\n"
    expected = truncate_to_tokens(text, room, C, keep="both", marker=marker)
    got = comp._head_tail(text, room, exact)
    assert C.count(got) <= room
    if len(text) <= room * 32:  # the search never looks further than that
        assert got == expected


def _reference_largest(value, path=()):
    """The original depth-first search (every node visited, first 50 items of a list)."""
    best = None
    if isinstance(value, list):
        best = (value, path)
        items = [((*path, i), v) for i, v in enumerate(value[:50])]
    elif isinstance(value, dict):
        items = [((*path, k), v) for k, v in value.items()]
    else:
        return None
    for sub_path, sub in items:
        found = _reference_largest(sub, sub_path)
        if found is not None and (best is None or len(found[0]) > len(best[0])):
            best = found
    return best


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=3), inner, max_size=5)
    ),
    max_leaves=40,
)


@given(_JSON, st.integers(0, 6))
def test_property_the_largest_list_and_its_cut_match_the_full_search(value, keep):
    from contextwright.history._tools import _cut_list, _largest_list

    found, expected = _largest_list(value), _reference_largest(value)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert found[0] is expected[0]
    assert found[1] == expected[1]
    if len(found[0]) > keep:
        before = json.dumps(value)
        cut = _cut_list(value, found[1], keep)
        target = cut
        for k in found[1]:
            target = target[k]
        assert target[:keep] == found[0][:keep]
        assert target[keep].endswith(f"of {len(found[0])} not shown")
        assert json.dumps(value) == before  # the input is left as it was (shared, not cut)
