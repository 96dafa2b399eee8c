"""The message model: validation with named positions, JSON round trip, units."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given

from contextwright import (
    ImagePart,
    InvalidMessageError,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    group_units,
)
from contextwright.model._units import iter_units_backwards

from .conftest import conversations


def test_string_parts_become_one_text_part():
    m = Message("user", "hi")  # type: ignore[arg-type]
    assert m.parts == (TextPart("hi"),)
    assert m.text == "hi"


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Message("robot", "x"), "role"),  # type: ignore[arg-type]
        (lambda: Message("user", (ToolCallPart("c", "f"),)), "parts[0]"),
        (lambda: Message("tool", ()), "parts"),
        (lambda: Message("assistant", (TextPart("a"), ToolCallPart("", "f"))), "parts[1].id"),
        (lambda: Message("assistant", (ToolCallPart("c", "f", "[1]"),)), "parts[0].arguments"),
        (lambda: Message("assistant", (ToolCallPart("c", "f", "{bad"),)), "parts[0].arguments"),
        (lambda: Message("user", (ImagePart(),)), "parts[0]"),
        (lambda: Message("user", (ImagePart(data="AAAA"),)), "parts[0].media_type"),
        (lambda: Message("tool", (ToolResultPart("", "x"),)), "parts[0].call_id"),
        (lambda: Message("user", "x", id=""), "id"),
        (lambda: Message("user", "x", seq=-1), "seq"),
        (lambda: Message("user", "x", metadata=[1]), "metadata"),  # type: ignore[arg-type]
        (lambda: Message("user", (TextPart(3),)), "parts[0].text"),  # type: ignore[arg-type]
    ],
)
def test_validation_names_the_field(make, where):
    with pytest.raises(InvalidMessageError) as info:
        make()
    assert info.value.where == where
    assert where in str(info.value)


def test_from_dict_names_the_path():
    with pytest.raises(InvalidMessageError) as info:
        Message.from_dict(
            {"role": "assistant", "parts": [{"type": "tool_call", "name": "f"}]}, "messages[4]"
        )
    assert info.value.where == "messages[4].parts[0].id"
    with pytest.raises(InvalidMessageError) as info:
        Message.from_dict({"role": "user", "parts": [{"type": "video"}]}, "m")
    assert info.value.where == "m.parts[0].type"


@given(conversations(broken=True))
def test_neutral_json_round_trip(msgs):
    for m in msgs:
        again = Message.from_dict(m.to_dict())
        assert again == m


def test_tool_call_unit_holds_all_results():
    call1, call2 = ToolCallPart("a", "f"), ToolCallPart("b", "g")
    msgs = [
        Message.user("q"),
        Message.assistant("", tool_calls=[call1, call2]),
        Message.tool("a", "ra"),
        Message.tool("b", "rb"),
        Message.assistant("done"),
    ]
    units = group_units(msgs)
    assert [(u.start, u.end, u.kind) for u in units] == [
        (0, 1, "message"),
        (1, 4, "tool_call"),
        (4, 5, "message"),
    ]


def test_broken_units_are_flagged():
    msgs = [
        Message.tool("x", "orphan"),
        Message.assistant("", tool_calls=[ToolCallPart("a", "f"), ToolCallPart("b", "f")]),
        Message.tool("a", "only one"),
        Message.user("next"),
    ]
    kinds = [u.kind for u in group_units(msgs)]
    assert kinds == ["orphan_result", "incomplete_call", "message"]
    assert not group_units(msgs)[0].ok


@given(conversations(broken=True))
def test_backwards_iteration_matches_grouping(msgs):
    forward = group_units(msgs)
    backward = list(iter_units_backwards(msgs))
    assert list(reversed(backward)) == forward


@given(conversations())
def test_well_formed_conversations_have_no_broken_units(msgs):
    units = group_units(msgs)
    assert all(u.ok for u in units)
    assert sum(len(u) for u in units) == len(msgs)


@given(conversations())
def test_stamped_copy_equals_replace(msgs):
    # The store's unchecked copy must stay field-for-field what replace() makes: a
    # field added to Message without adding it to _stamped fails here.
    import dataclasses

    for i, m in enumerate(msgs):
        m._token_cache["x"] = 1
        fast, slow = m._stamped(i + 1, 1700.5), m.replace(seq=i + 1, created_at=1700.5)
        for f in dataclasses.fields(Message):
            assert getattr(fast, f.name) == getattr(slow, f.name), f.name
        assert fast == slow
        assert fast._token_cache == {}


def test_default_ids_are_distinct_version_4_uuids():
    ids = [Message.user("x").id for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for i in ids[:2000]:
        u = uuid.UUID(hex=i)
        assert (u.version, u.variant, u.hex) == (4, uuid.RFC_4122, i)
