"""Stored JSON is standard JSON: a NaN or an infinity anywhere in a user's value is refused.

Python's json writes ``float("nan")`` as ``NaN`` (not JSON) and reads ``NaN``,
``Infinity`` and ``1e400`` as floats. Every path where a user's value becomes
stored JSON refuses such a number before anything is written, naming the path to
it (``metadata['a'][2]``), on every backend; finite values read back exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, InvalidMessageError, Message, ToolCallPart
from contextwright.knowledge import open_knowledge_store
from contextwright.memory import Scope, open_memory_store
from contextwright.model._checks import dump_json, load_json
from contextwright.model._native import ProviderPart
from contextwright.stores import Summary
from tests.store_backends import store_db

from .conftest import OpenBackend, sync

__all__ = ["store_db"]  # the fixture, imported for pytest

# NUL included: JSON text holds "\u0000" (PostgreSQL's jsonb would not: no store casts to it)
TEXT = st.characters(exclude_categories=("Cs",))
KEYS = st.text(TEXT, max_size=6)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | st.integers() | FINITE | st.text(TEXT, max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=10,
)
METADATA = st.dictionaries(KEYS, JSON, max_size=4)
NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def poisoned(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """Metadata holding one non-finite float somewhere among finite values, and its path
    as errors name it (``['key'][index]...``)."""
    steps: list[str | int] = [draw(KEYS)]  # metadata is a mapping: a key first
    steps += draw(st.lists(KEYS | st.integers(0, 3), max_size=3))
    value: Any = draw(NOT_FINITE)
    for step in reversed(steps):
        if isinstance(step, str):
            holder: Any = draw(st.dictionaries(KEYS, JSON, max_size=3))
            holder[step] = value
        else:
            holder = draw(st.lists(JSON, min_size=step, max_size=step + 2))
            holder.insert(step, value)
        value = holder
    return value, "".join(f"[{s!r}]" for s in steps)


def same(stored: Any, given: Any) -> bool:
    """Equal, and equal as JSON text (so 1 is not 1.0 and -0.0 keeps its sign)."""
    return bool(stored == given) and dump_json(stored, "stored") == dump_json(given, "given")


# -- the message model -----------------------------------------------------------------------


@given(poisoned())
def test_a_message_refuses_a_non_finite_number_in_metadata_and_tool_arguments(
    case: tuple[dict[str, Any], str],
) -> None:
    meta, path = case
    with pytest.raises(InvalidMessageError) as err:
        Message.user("hi", metadata=meta)
    assert err.value.where == f"metadata{path}"
    assert "standard JSON cannot hold" in err.value.problem
    text = json.dumps(meta)  # Python writes NaN and Infinity: what a client might send
    with pytest.raises(InvalidMessageError) as err:
        Message("assistant", (ToolCallPart("c1", "f", text),))
    assert err.value.where == f"parts[0].arguments{path}"
    with pytest.raises(InvalidMessageError) as err:
        ProviderPart.of("anthropic", "document", meta)
    assert err.value.where == f"payload{path}"
    with pytest.raises(InvalidMessageError) as err:
        Message("user", (ProviderPart("anthropic", "document", text),))
    assert err.value.where == f"parts[0].payload{path}"


@given(METADATA)
def test_finite_metadata_and_arguments_are_kept(meta: dict[str, Any]) -> None:
    msg = Message("assistant", (ToolCallPart("c1", "f", json.dumps(meta)),), metadata=meta)
    assert same(dict(msg.metadata), meta)
    assert same(msg.tool_calls[0].input, meta)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"x": 1e400}', "parts[0].arguments['x']"),  # valid syntax, but no double holds it
        ('{"x": [-1e999]}', "parts[0].arguments['x'][0]"),
        ('{"x": {"y": -Infinity}}', "parts[0].arguments['x']['y']"),
        ('{"x": NaN, "y": }', "parts[0].arguments"),  # the syntax error is still reported
    ],
)
def test_tool_arguments_that_are_not_standard_json(text: str, where: str) -> None:
    with pytest.raises(InvalidMessageError) as err:
        Message("assistant", (ToolCallPart("c1", "f", text),))
    assert err.value.where == where


def test_load_and_dump_json_name_keys_and_leave_finite_values_alone() -> None:
    with pytest.raises(InvalidMessageError, match=r"^meta key nan: is not a finite number"):
        dump_json({math.nan: 1}, "meta")
    with pytest.raises(InvalidMessageError, match=r"^created_at: .*finite.*got inf"):
        Message.user("hi", created_at=math.inf)
    assert load_json('{"a": [1.5, 2e300, -0.0]}', "x") == {"a": [1.5, 2e300, -0.0]}
    assert dump_json({"b": 1, "a": "中"}, "x") == '{"a":"中","b":1}'


# -- every backend ---------------------------------------------------------------------------


def test_every_backend_refuses_a_non_finite_number_and_keeps_finite_ones(
    tmp_path: Path, backend: OpenBackend
) -> None:
    b = backend(tmp_path / "s.db")
    log, work = sync(b.conversations), sync(b.working)
    sums, receipts = sync(b.summaries), sync(b.receipts)
    ids = itertools.count()

    @settings(max_examples=25)
    @given(poisoned(), METADATA)
    def check(case: tuple[dict[str, Any], str], good: dict[str, Any]) -> None:
        bad, path = case
        c = f"c{next(ids)}"

        def refused(where: str, call: Any, *args: Any, **kw: Any) -> None:
            with pytest.raises(InvalidMessageError) as err:
                call(*args, tenant="t", **kw)
            assert err.value.where == where
            assert "standard JSON cannot hold" in err.value.problem

        refused(f"metadata{path}", log.ensure_conversation, c, user="u", metadata=bad)
        smuggled = Message.user("hi")  # a message whose metadata changed after it was built
        object.__setattr__(smuggled, "metadata", bad)
        refused(f"messages[0].metadata{path}", log.append, c, [smuggled], user="u")
        assert log.get_conversation(c, tenant="t") is None
        assert log.version(c, tenant="t") == 0

        log.ensure_conversation(c, tenant="t", user="u", metadata=good)
        log.append(c, [Message.user("hi", metadata=good)], tenant="t", user="u")
        version = log.version(c, tenant="t")
        refused(f"meta{path}", work.put_working, c, "k", "v", ttl=60, meta=bad)
        refused(f"receipt{path}", receipts.record_receipt, c, bad)
        refused(f"summary.meta{path}", sums.save_summary, Summary(c, 0, 1, 1, "s", meta=bad))
        assert log.version(c, tenant="t") == version
        assert work.get_working(c, "k", tenant="t") is None
        assert receipts.receipts(c, tenant="t") == []
        assert sums.summaries(c, tenant="t") == []

        info = log.get_conversation(c, tenant="t")
        assert info is not None
        assert same(dict(info.metadata), good)
        assert same(dict(log.read(c, tenant="t")[0].metadata), good)
        work.put_working(c, "k", "v", tenant="t", ttl=60, meta=good)
        item = work.get_working(c, "k", tenant="t")
        assert item is not None
        assert same(dict(item.meta), good)
        receipts.record_receipt(c, good, tenant="t")
        assert same(receipts.receipts(c, tenant="t")[0].receipt, good)
        sums.save_summary(Summary(c, 0, 1, 1, "s", meta=good), tenant="t")
        assert same(dict(sums.summaries(c, tenant="t")[0].meta), good)

    try:
        check()
    finally:
        asyncio.run(b.aclose())


def test_an_escaped_nul_in_stored_json_reads_back_on_every_backend(
    tmp_path: Path, backend: OpenBackend
) -> None:
    # JSON text holds "\u0000"; PostgreSQL's jsonb does not, so no store may cast to it
    # on read (get_working once did, and the item could no longer be read).
    b = backend(tmp_path / "s.db")
    log, work = sync(b.conversations), sync(b.working)
    meta = {"note": "a\x00b", "nested": ["\x00"]}
    try:
        log.append("c", [Message.user("hi", metadata=meta)], tenant="t", user="u")
        work.put_working("c", "k", "v", tenant="t", ttl=60, meta=meta)
        item = work.get_working("c", "k", tenant="t")
        assert item is not None
        assert item.content == "v"
        assert dict(item.meta) == meta
        assert dict(log.read("c", tenant="t")[0].metadata) == meta
        assert work.get_working("c", "k", tenant="other") is None  # another tenant: nothing
    finally:
        asyncio.run(b.aclose())


# -- memory and knowledge stores (SQLite, PostgreSQL) ----------------------------------------


def test_memory_and_knowledge_meta_refuse_non_finite_numbers(store_db: Any) -> None:
    scope = Scope("t", "u")
    with open_memory_store(store_db) as memory, open_knowledge_store(store_db) as knowledge:

        @settings(max_examples=25)
        @given(poisoned(), METADATA)
        def check(case: tuple[dict[str, Any], str], good: dict[str, Any]) -> None:
            bad, path = case
            n = memory.count(scope)
            with pytest.raises(
                ConfigError, match=rf"^meta{re.escape(path)}: is -?(nan|inf), which"
            ):
                memory.add(scope, "likes tea", meta=bad)
            with pytest.raises(ConfigError, match=rf"^items\[1\]\.meta{re.escape(path)}: is"):
                memory.add_many(scope, ["likes tea", {"content": "drinks coffee", "meta": bad}])
            assert memory.count(scope) == n
            with pytest.raises(
                ConfigError, match=rf"^meta{re.escape(path)}: is -?(nan|inf), which"
            ):
                knowledge.add("alpha bravo", source="faq", meta=bad)
            with pytest.raises(ConfigError, match=rf"^meta{re.escape(path)}: is"):
                knowledge.ingest("# Guide\n\nalpha charlie", source="guide.md", meta=bad)
            assert knowledge.sources() == []

            kept = memory.add(scope, "likes tea", meta=good)
            got = memory.get(scope, kept.id)
            assert got is not None
            assert same(dict(got.meta), good)
            memory.forget(scope, kept.id)
            good.pop("index", None)  # a passage's meta also says its chunk index
            knowledge.add("alpha bravo", source="faq", meta=good)
            hit = knowledge.search_sync("alpha")[0]
            assert same({k: v for k, v in hit.passage.meta.items() if k != "index"}, good)
            knowledge.remove("faq")

        check()
