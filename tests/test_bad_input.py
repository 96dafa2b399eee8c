"""Bad input is refused where it enters, with a typed error naming the field.

A lone surrogate ("\\ud800", what JSON's escape of half a pair decodes to) is a
valid Python string that UTF-8 cannot encode: accepted, it failed much later as a
raw UnicodeEncodeError (appending to the store, encoding the request, the CLI).
A rejected call writes nothing, so it can be retried.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import (
    Block,
    BudgetError,
    ConfigError,
    ContextEngine,
    Conversations,
    HeuristicCounter,
    ImagePart,
    InvalidMessageError,
    Message,
    Priority,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from contextwright.interfaces.cli._main import main
from contextwright.knowledge import SQLiteKnowledgeStore
from contextwright.memory import Scope, SQLiteMemoryStore
from contextwright.sources import SourceBase
from contextwright.stores import SQLiteStore

BAD = "ok \ud800 then"  # a lone high surrogate
H = HeuristicCounter()


# -- messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Message.user(BAD), "parts[0].text"),
        (lambda: Message("user", (TextPart("fine"), TextPart(BAD))), "parts[1].text"),
        (lambda: Message.user("x", id=BAD), "id"),
        (lambda: Message.user("x", name=BAD), "name"),
        (lambda: Message.user("x", metadata={"k": BAD}), "metadata['k']"),
        (lambda: Message.user("x", metadata={"k": [1, {"z": BAD}]}), "metadata['k'][1]['z']"),
        (lambda: Message.user("x", metadata={BAD: 1}), "metadata key"),
        (lambda: Message("user", (ImagePart(url="https://x/" + BAD),)), "parts[0].url"),
        (lambda: Message("user", (ImagePart(data="AAAA", media_type=BAD),)), "parts[0].media_type"),
        (lambda: Message.assistant(tool_calls=[ToolCallPart(BAD, "f")]), "parts[0].id"),
        (lambda: Message.assistant(tool_calls=[ToolCallPart("c", BAD)]), "parts[0].name"),
        (
            lambda: Message.assistant(tool_calls=[ToolCallPart("c", "f", '{"q": "' + BAD + '"}')]),
            "parts[0].arguments",
        ),
        # the JSON escape is ASCII text, but it decodes to a lone surrogate
        (
            lambda: Message.assistant(tool_calls=[ToolCallPart("c", "f", '{"q": "\\ud800"}')]),
            "parts[0].arguments['q']",
        ),
        (lambda: Message.tool(BAD, "result"), "parts[0].call_id"),
        (lambda: Message.tool("c", BAD), "parts[0].content"),
        (lambda: Message.tool("c", "r", tool_name=BAD), "parts[0].name"),
        (
            lambda: Message("tool", (ToolResultPart("c", (TextPart("a"), TextPart(BAD))),)),
            "parts[0].content[1].text",
        ),
    ],
)
def test_a_lone_surrogate_is_refused_where_the_message_is_built(make, where):
    with pytest.raises(InvalidMessageError) as info:
        make()
    assert info.value.where.startswith(where)
    assert "lone surrogate U+D800" in info.value.problem


def test_metadata_that_holds_itself_is_refused_not_a_recursion_error():
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(InvalidMessageError, match=r"^metadata: is nested more than"):
        Message.user("x", metadata={"c": cycle})


def test_text_that_is_valid_unicode_is_accepted():
    # astral characters (a proper surrogate pair in JSON), CJK, combining marks
    for text in ["😀", json.loads('"\\ud83d\\ude00"'), "我们讨论", "e\u0301", "\u200d"]:
        m = Message.user(text, metadata={"k": text}, name="n")
        assert m.text == text
    call = ToolCallPart("c", "f", '{"q": "\\ud83d\\ude00 \\u00e9"}')
    assert Message.assistant(tool_calls=[call]).tool_calls[0].input == {"q": "😀 é"}


# Any code point, with lone surrogates (rare among all of them) drawn often.
ANY_TEXT = st.lists(
    st.one_of(
        st.characters(codec=None, exclude_categories=()),
        st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"]),
    ),
    min_size=1,
    max_size=20,
).map("".join)


@given(ANY_TEXT)
def test_a_message_either_is_refused_or_can_be_stored_and_sent(text):
    """Every accepted message survives the store and each provider's JSON encoding."""
    try:
        m = Message.user(text)
    except InvalidMessageError as exc:
        assert exc.where == "parts[0].text"
        with pytest.raises(UnicodeEncodeError):
            text.encode("utf-8")
        return
    built = ContextEngine(budget=4000, counter=H).build_sync(m)
    for provider in ("openai", "responses", "anthropic"):
        json.dumps(built.render(provider), ensure_ascii=False).encode("utf-8")
    with SQLiteStore(":memory:") as store:
        store.append("c", [m], tenant="t")
        assert store.read("c", tenant="t")[0].text == text


# -- stores -----------------------------------------------------------------------------


def test_store_names_with_a_lone_surrogate_are_refused_and_nothing_is_written():
    with SQLiteStore(":memory:") as store:
        for kw, label in [
            ({"conversation": BAD, "tenant": "t"}, "conversation"),
            ({"conversation": "c", "tenant": BAD}, "tenant"),
            ({"conversation": "c", "tenant": "t", "user": BAD}, "user"),
        ]:
            conv = kw.pop("conversation")
            with pytest.raises(ConfigError, match=f"^{label} holds a lone surrogate"):
                store.append(conv, [Message.user("hello")], **kw)
        assert store.list_conversations(tenant="t") == []
        # reads with such a name: a typed error, not a UnicodeEncodeError
        with pytest.raises(InvalidMessageError):
            store.read(BAD, tenant="t")
        with pytest.raises(InvalidMessageError):
            store.get_conversation(BAD, tenant="t")


def test_memory_and_knowledge_refuse_a_lone_surrogate():
    with SQLiteMemoryStore(":memory:") as memory:
        scope = Scope("t", "u")
        with pytest.raises(InvalidMessageError, match=r"^content: holds a lone surrogate"):
            memory.add(scope, BAD)
        with pytest.raises(InvalidMessageError, match="content: holds a lone surrogate"):
            memory.add_many(scope, ["fine", {"content": BAD}])
        with pytest.raises(ConfigError, match="key holds a lone surrogate"):
            memory.add(scope, "likes tea", key=BAD)
        with pytest.raises(ConfigError, match=r"^meta\['note'\]: holds a lone surrogate"):
            memory.add(scope, "likes tea", meta={"note": BAD})
        for field in ("tenant", "user", "namespace"):
            with pytest.raises(ConfigError, match=f"Scope.{field} holds a lone surrogate"):
                Scope(**{"tenant": "t", "user": "u", field: BAD})
        assert memory.count(scope) == 0
    with SQLiteKnowledgeStore(":memory:") as knowledge:
        with pytest.raises(InvalidMessageError, match=r"^text: holds a lone surrogate"):
            knowledge.ingest(f"# Guide\n\n{BAD}", source="guide.md")
        with pytest.raises(ConfigError, match=r"^source holds a lone surrogate"):
            knowledge.ingest("# Guide\n\nfine", source=BAD)
        with pytest.raises(ConfigError, match=r"^meta\['by'\]: holds a lone surrogate"):
            knowledge.ingest("# Guide\n\nfine", source="guide.md", meta={"by": BAD})
        with pytest.raises(InvalidMessageError, match=r"^content: holds a lone surrogate"):
            knowledge.add(BAD, source="faq")
        assert knowledge.count(include_inactive=True) == 0
    with pytest.raises(ConfigError, match=r"^tenant holds a lone surrogate"):
        SQLiteKnowledgeStore(":memory:", tenant=BAD)


def test_a_block_with_a_lone_surrogate_is_refused():
    with pytest.raises(ConfigError, match="content holds a lone surrogate"):
        Block("note", BAD)
    with pytest.raises(ConfigError, match="attribute 'source' holds a lone surrogate"):
        Block("note", "fine", attrs={"source": BAD})


# -- the engine -------------------------------------------------------------------------


def test_build_names_the_bad_field():
    engine = ContextEngine(budget=2000, counter=H)
    with pytest.raises(InvalidMessageError, match=r"^message: holds a lone surrogate"):
        engine.build_sync(BAD)
    with pytest.raises(InvalidMessageError, match=r"^summary: holds a lone surrogate"):
        engine.build_sync("hi", summary=BAD)
    for field in ("tenant", "user", "conversation"):
        with pytest.raises(ConfigError, match=f"^{field} holds a lone surrogate"):
            engine.build_sync("hi", **{field: BAD})
        with pytest.raises(ConfigError, match=f"^{field} must not be empty"):
            engine.build_sync("hi", **{field: ""})


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_a_non_message_anywhere_in_history_is_named(position):
    history: list[object] = [
        Message.user("a"),
        Message.assistant("b"),
        Message.user("c"),
        Message.assistant("d"),
    ]
    history[position] = {"role": "user", "content": "a dict, not a Message"}
    engine = ContextEngine(budget=2000, counter=H)
    with pytest.raises(InvalidMessageError, match=rf"^history\[{position}\]: must be a Message"):
        engine.build_sync("hi", history=history)  # type: ignore[arg-type]


class CountingHistory(Sequence[Message]):
    """A history that records which positions were read."""

    def __init__(self, items: list[Message]) -> None:
        self.items = items
        self.read: set[int] = set()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            self.read.update(range(*i.indices(len(self.items))))
        else:
            self.read.add(i if i >= 0 else len(self.items) + i)
        return self.items[i]


def test_history_is_checked_incrementally_as_it_grows():
    """Growing a history by one message checks that message, not the whole history."""
    items = [
        Message.user(f"q{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(3000)
    ]
    engine = ContextEngine(budget=400, counter=H, restate_goal=False)
    engine.build_sync("first", history=CountingHistory(items))
    items.append(Message.user("q3000"))
    grown = CountingHistory(items)
    built = engine.build_sync("second", history=grown)
    assert built.report.history_total == 3001
    assert min(grown.read) > 2000  # only the window's end and the new message were read
    # the memo only skips what it has seen: a bad new item is still caught
    items.append("not a message")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match=r"^history\[3001\]"):
        engine.build_sync("third", history=CountingHistory(items))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"model": ""}, "model must not be empty"),
        ({"model": 3, "budget": 100}, "model must be a string"),
        ({"budget": 0}, "Budget total must be a positive integer"),
        ({"budget": -1}, "Budget total must be a positive integer"),
        ({"budget": 1.5}, "budget must be a Budget, an int or None"),
        ({"system_prompt": BAD}, "system_prompt holds a lone surrogate"),
        ({"pinned": [BAD]}, r"pinned\[0\] holds a lone surrogate"),
        ({"pinned": [3]}, r"pinned\[0\] must be a string"),
        ({"pinned": "be brief"}, "pinned must be a sequence"),
        ({"sources": None}, "sources must be a sequence"),
        ({"counter": 3}, "counter must be a TokenCounter"),
        ({"cache": {}}, "cache must be a Cache"),
        ({"locale": ""}, "locale must not be empty"),
        ({"restate_goal": "no"}, "restate_goal must be a bool"),
        ({"goal_chars": 0}, "goal_chars must be a positive integer"),
        ({"max_message_tokens": 8}, "max_message_tokens must be an integer of at least 16"),
        ({"max_message_tokens": "many"}, "max_message_tokens must be an integer of at least 16"),
        ({"overhead": 3}, "overhead must be a MessageOverhead"),
        ({"clock": 3}, "clock must be a callable"),
        ({"templates": {"tail.header": BAD}}, r"templates\['tail.header'\] holds a lone"),
        ({"task_status": "done"}, "task_status must be a callable"),
    ],
)
def test_engine_settings_are_checked(kw, match):
    with pytest.raises(ConfigError, match=match):
        ContextEngine(**{"budget": 1000, **kw})


# -- stateful builds write nothing when they fail ------------------------------------


class BigP0(SourceBase):
    """A source whose P0 block alone exceeds a small budget (found only by fetching)."""

    name = "big_p0"
    priority = Priority.P0

    async def fetch(self, turn, allowance):
        return Block(self.name, "remember this " * 400, Priority.P0)


def _stored(store: SQLiteStore, conversation: str = "c") -> list[str]:
    if store.get_conversation(conversation, tenant="default") is None:
        return []
    return [m.text for m in store.read(conversation, tenant="default")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_rejected_build_stores_nothing_and_a_retry_stores_once(mode):
    store = SQLiteStore(":memory:")
    engine = ContextEngine(system_prompt="You help.", budget=1000, counter=H)
    convs = Conversations(engine, store)
    message = Message.user("What did we decide?")

    def build(**kw):
        if mode == "sync":
            return convs.build_sync("c", message, **kw)
        return asyncio.run(convs.build("c", message, **kw))

    with pytest.raises(BudgetError):
        build(budget=5)  # the protected zone alone is over
    with pytest.raises(ConfigError):
        build(budget="lots")
    with pytest.raises(ConfigError):
        build(provider="not-a-provider")  # fails after the build, still before the write
    assert _stored(store) == []
    build(budget=1000)
    assert _stored(store) == ["What did we decide?"]
    convs.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_budget_error_found_while_fetching_stores_nothing(mode):
    store = SQLiteStore(":memory:")
    engine = ContextEngine(sources=[BigP0()], budget=300, counter=H)
    convs = Conversations(engine, store)
    build = (
        (lambda: convs.build_sync("c", "hello"))
        if mode == "sync"
        else (lambda: asyncio.run(convs.build("c", "hello")))
    )
    with pytest.raises(BudgetError):
        build()
    assert _stored(store) == []
    convs.close()


# -- the command line -----------------------------------------------------------------


def _surrogate_file(tmp_path):
    path = tmp_path / "conv.json"
    # the JSON escape of half a surrogate pair: valid JSON, invalid Unicode
    path.write_text('[{"role": "user", "content": "hello \\ud800 there"}]', encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["build", "import"])
def test_cli_refuses_a_lone_surrogate_in_one_line_with_status_2(command, tmp_path, capsys):
    path = _surrogate_file(tmp_path)
    db = tmp_path / "cw.db"
    argv = (
        ["build", str(path), "--budget", "2000"]
        if command == "build"
        else ["import", str(path), "--conversation", "c1", "--db", str(db)]
    )
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("contextwright: error: ")
    assert "messages[0]" in lines[0]
    assert "lone surrogate U+D800" in lines[0]
    if command == "import" and db.exists():
        with SQLiteStore(db) as store:
            assert store.get_conversation("c1", tenant="default") is None


def test_cli_surrogate_exit_status_in_a_real_process(tmp_path):
    """No traceback reaches the terminal: one line on stderr and status 2."""
    path = _surrogate_file(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "contextwright", "build", str(path), "--budget", "2000"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
