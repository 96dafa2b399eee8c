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
