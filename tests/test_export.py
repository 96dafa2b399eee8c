"""Reading back what was stored: `Conversations.messages` and `contextwright export`."""

from __future__ import annotations

import json

import pytest

from contextwright import ContextEngine, Conversations, InvalidMessageError, Message, ToolCallPart
from contextwright.adapters import read_messages
from contextwright.interfaces.cli._main import main


def thread(n_turns: int) -> list[Message]:
    """User questions, a tool call with a large result every third turn, answers."""
    out: list[Message] = []
    for i in range(n_turns):
        out.append(Message.user(f"Question {i}: what about service {i % 7}? 第{i}个问题。"))
        if i % 3 == 0:
            call = ToolCallPart(f"call{i}", "grep_logs", json.dumps({"service": i % 7}))
            out.append(Message.assistant("", tool_calls=[call]))
            log = "\n".join(
                f"2026-11-2{k % 9} ERROR {k} timeout in service {i % 7}" for k in range(300)
            )
            out.append(Message.tool(call.id, log, tool_name="grep_logs"))
        out.append(Message.assistant(f"Service {i % 7} is fine. 服务正常。"))
    return out


def shape(m: Message) -> tuple[object, ...]:
    """What a message says, without the ids and times a store adds."""
    return (
        m.role,
        m.text,
        tuple((c.id, c.name, c.arguments) for c in m.tool_calls),
        tuple((r.call_id, r.text) for r in m.tool_results),
    )


@pytest.fixture
def convs(tmp_path, backend):
    """Conversations on SQLite and in memory: `messages` reads any backend alike."""
    c = Conversations(ContextEngine(budget=4000), backend(tmp_path / "s.db"))
    yield c
    c.close()


async def test_messages_yields_every_stored_original_in_order_across_pages(convs):
    msgs = thread(40)
    await convs.import_messages("c", msgs, user="u1")
    got = [m async for m in convs.messages("c", user="u1", page_size=7)]
    assert [shape(m) for m in got] == [shape(m) for m in msgs]
    assert [m.seq for m in got] == list(range(1, len(msgs) + 1))
    # large tool results come back whole, not as the prompt's compressed view
    big = [m for m in got if m.role == "tool"]
    assert big
    assert all(len(m.tool_results[0].text.splitlines()) == 300 for m in big)
    later = [m async for m in convs.messages("c", user="u1", after_seq=10, page_size=4)]
    assert [m.seq for m in later] == list(range(11, len(msgs) + 1))


async def test_messages_include_what_compaction_summarised(convs):
    msgs = thread(30)
    await convs.import_messages("c", msgs, user="u1")
    result = await convs.compact("c", user="u1", force=True)
    assert result.applied
    got = [m async for m in convs.messages("c", user="u1")]
    assert len(got) == len(msgs)  # nothing deleted by the summary


async def test_messages_are_the_owner_s_only(convs):
    await convs.append("c", [Message.user("my secret plan")], user="u1")
    with pytest.raises(InvalidMessageError) as err:
        _ = [m async for m in convs.messages("c", user="u2")]
    assert err.value.where == "user"
    assert [m async for m in convs.messages("nobody", user="u2")] == []


async def test_messages_refuse_bad_arguments(convs):
    await convs.append("c", [Message.user("hi")], user="u1")
    with pytest.raises(InvalidMessageError) as err:
        _ = [m async for m in convs.messages("c", user="u1", after_seq=-1)]
    assert err.value.where == "after_seq"
    with pytest.raises(Exception, match="page_size"):
        _ = [m async for m in convs.messages("c", user="u1", page_size=0)]


def test_messages_sync_is_the_same_list(tmp_path):
    c = Conversations(ContextEngine(budget=4000), str(tmp_path / "s.db"))
    try:
        msgs = thread(12)
        c.import_sync("c", msgs, user="u1")
        got = c.messages_sync("c", user="u1")
        assert [shape(m) for m in got] == [shape(m) for m in msgs]
    finally:
        c.close()


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["jsonl", "openai", "anthropic", "responses"])
def test_export_reads_back_as_what_was_stored(tmp_path, capsys, fmt):
    msgs = thread(9)
    db = str(tmp_path / "s.db")
    c = Conversations(ContextEngine(budget=4000), db)
    c.import_sync("c", msgs, user="u1")
    c.close()
    out_file = tmp_path / f"export.{fmt}"
    code, _, err = run(
        ["export", "c", "--db", db, "--format", fmt, "--output", str(out_file)], capsys
    )
    assert code == 0, err
    # the export imports again as the same conversation
    code, out, err = run(
        ["import", str(out_file), "--conversation", "copy", "--user", "u1", "--db", db, "--json"],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["imported"] == len(msgs)
    c = Conversations(ContextEngine(budget=4000), db)
    try:
        assert [shape(m) for m in c.messages_sync("copy", user="u1")] == [shape(m) for m in msgs]
    finally:
        c.close()


def test_export_jsonl_carries_seq_and_reads_as_messages(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    c = Conversations(ContextEngine(budget=4000), db)
    c.import_sync("c", thread(4), user="u1")
    c.close()
    code, out, err = run(["export", "c", "--db", db], capsys)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [d["seq"] for d in lines] == list(range(1, len(lines) + 1))
    assert [m.seq for m in read_messages(lines)] == [d["seq"] for d in lines]


def test_export_refuses_another_user_and_a_missing_conversation(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    c = Conversations(ContextEngine(budget=4000), db)
    c.append_sync("c", [Message.user("my secret plan")], user="u1")
    c.close()
    code, out, err = run(["export", "c", "--db", db, "--user", "u2"], capsys)
    assert code == 2
    assert "secret" not in out
    assert err.startswith("contextwright: error: user:")
    assert err.count("\n") == 1
    code, out, err = run(["export", "missing", "--db", db], capsys)
    assert code == 2
    assert err.startswith("contextwright: error: no conversation 'missing'")
