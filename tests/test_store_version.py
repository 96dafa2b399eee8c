"""The per-conversation version: every write moves it by exactly one, nothing else does.

Run against real SQLite files; the cross-connection and cross-process cases use
two stores on one file and a second Python process.
"""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from contextwright import InvalidMessageError, Message, ToolCallPart
from contextwright._errors import ConfigError, SummaryConflictError
from contextwright.stores import CompactionEntry, SQLiteStore, Summary

T = "t"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock):
    with SQLiteStore(tmp_path / "v.db", clock=clock) as s:
        yield s


def _seeded(store: SQLiteStore) -> None:
    store.append("c", [Message.user(f"m{i}") for i in range(4)], tenant=T, user="u")


def _summary(upto: int, version: int = 0) -> Summary:
    return Summary("c", version, 1, upto, f"up to {upto}")


def _entry(upto: int) -> CompactionEntry:
    return CompactionEntry(0, "c", 1.0, "soft", True, 100, 10, upto_seq=upto)


# Each write of the Store protocol, on a conversation seeded with 4 messages.
WRITES: dict[str, Callable[[SQLiteStore], object]] = {
    "append": lambda s: s.append("c", [Message.user("new")], tenant=T, user="u"),
    "append_batch": lambda s: s.append(
        "c", [Message.user(f"n{i}") for i in range(50)], tenant=T, user="u"
    ),
    "append_with_readback": lambda s: s.append(
        "c",
        [
            Message.assistant("", tool_calls=[ToolCallPart("k1", "f")]),
            Message.tool("k1", "result"),
        ],
        tenant=T,
        user="u",
        readback=[(1, "k1", "key", 60.0)],
    ),
    "set_message_tokens": lambda s: s.set_message_tokens(
        "c", tenant=T, counts={1: 5, 2: 6}, counter="x"
    ),
    "save_summary": lambda s: s.save_summary(_summary(2), tenant=T),
    "log_compaction": lambda s: s.log_compaction(_entry(2), tenant=T),
    "save_compaction": lambda s: s.save_compaction(_summary(3), _entry(3), tenant=T),
    "put_working": lambda s: s.put_working("c", "k", "v", tenant=T, ttl=60),
    "pin": lambda s: s.pin("c", "remember", tenant=T),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_bumps_the_version_exactly_once(store: SQLiteStore, write: str) -> None:
    _seeded(store)
    before = store.version("c", tenant=T)
    WRITES[write](store)
    assert store.version("c", tenant=T) == before + 1
    info = store.get_conversation("c", tenant=T)
    assert info is not None
    assert info.version == before + 1


def test_creation_counts_as_one_write(store: SQLiteStore) -> None:
    assert store.version("c", tenant=T) == 0  # unknown conversation
    info = store.ensure_conversation("c", tenant=T, user="u")
    assert info.version == 1 == store.version("c", tenant=T)
    assert store.ensure_conversation("c", tenant=T, user="u").version == 1  # exists: no write
    # creating and appending in one call is one write
    store.append("d", [Message.user("a"), Message.user("b")], tenant=T, user="u")
    assert store.version("d", tenant=T) == 1
    store.append("e", [], tenant=T, user="u")  # creates it, stores nothing
    assert store.version("e", tenant=T) == 1


def test_unpin_bumps_only_when_it_removes(store: SQLiteStore) -> None:
    _seeded(store)
    pin = store.pin("c", "x", tenant=T)
    v = store.version("c", tenant=T)
    assert store.unpin("c", pin.id + 100, tenant=T) is False
    assert store.version("c", tenant=T) == v
    assert store.unpin("c", pin.id, tenant=T) is True
    assert store.version("c", tenant=T) == v + 1
    assert store.unpin("nobody", pin.id, tenant=T) is False
    assert store.version("nobody", tenant=T) == 0


def test_a_retry_of_stored_messages_writes_nothing_and_keeps_the_version(
    store: SQLiteStore,
) -> None:
    msgs = [Message.user("a", id="m-a"), Message.user("b", id="m-b")]
    store.append("c", msgs, tenant=T, user="u")
    v = store.version("c", tenant=T)
    store.append("c", msgs, tenant=T, user="u")
    assert store.version("c", tenant=T) == v
    # one new among retried ones: one write
    store.append("c", [*msgs, Message.user("c", id="m-c")], tenant=T, user="u")
    assert store.version("c", tenant=T) == v + 1


def test_expiring_working_memory_is_a_write_of_the_conversations_it_touches(
    store: SQLiteStore, clock: Clock
) -> None:
    _seeded(store)
    store.append("other", [Message.user("x")], tenant=T, user="u")
    store.put_working("c", "short", "v", tenant=T, ttl=10)
    store.put_working("c", "long", "v", tenant=T, ttl=math.inf)
    v, w = store.version("c", tenant=T), store.version("other", tenant=T)
    clock.now += 11
    assert store.collect_working() == 1
    assert (store.version("c", tenant=T), store.version("other", tenant=T)) == (v + 1, w)
    assert store.collect_working() == 0
    assert store.version("c", tenant=T) == v + 1


REJECTED: dict[str, tuple[Callable[[SQLiteStore], object], type[Exception]]] = {
    "append by another user": (
        lambda s: s.append("c", [Message.user("x")], tenant=T, user="intruder"),
        InvalidMessageError,
    ),
    "append of a non-message": (
        lambda s: s.append("c", ["text"], tenant=T, user="u"),  # type: ignore[list-item]
        InvalidMessageError,
    ),
    "append with a conflicting id": (
        lambda s: s.append("c", [Message.user("other", id="fixed")], tenant=T, user="u"),
        InvalidMessageError,
    ),
    "counts for an unknown seq": (
        lambda s: s.set_message_tokens("c", tenant=T, counts={99: 1}, counter="x"),
        InvalidMessageError,
    ),
    "summary beyond the last seq": (
        lambda s: s.save_summary(_summary(99), tenant=T),
        InvalidMessageError,
    ),
    "summary covering nothing new": (
        lambda s: s.save_summary(_summary(2), tenant=T),
        SummaryConflictError,
    ),
    "summary expecting an older version": (
        lambda s: s.save_summary_versioned(_summary(4), tenant=T, expected=0),
        SummaryConflictError,
    ),
    "compaction with a missing summary version": (
        lambda s: s.log_compaction(
            CompactionEntry(0, "c", 1.0, "soft", True, 1, 1, summary_version=9), tenant=T
        ),
        InvalidMessageError,
    ),
    "compaction whose summary conflicts": (
        lambda s: s.save_compaction(_summary(1), _entry(1), tenant=T),
        SummaryConflictError,
    ),
    "working memory with a bad ttl": (
        lambda s: s.put_working("c", "k", "v", tenant=T, ttl=0),
        ConfigError,
    ),
    "pin of a non-string": (
        lambda s: s.pin("c", 5, tenant=T),  # type: ignore[arg-type]
        InvalidMessageError,
    ),
    "pin in another tenant": (
        lambda s: s.pin("c", "x", tenant="elsewhere"),
        InvalidMessageError,
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_a_rejected_write_leaves_the_version(store: SQLiteStore, case: str) -> None:
    _seeded(store)
    store.append("c", [Message.user("fixed", id="fixed")], tenant=T, user="u")
    store.save_summary(_summary(2), tenant=T)
    v = store.version("c", tenant=T)
    write, error = REJECTED[case]
    with pytest.raises(error):
        write(store)
    assert store.version("c", tenant=T) == v
    assert store.version("c", tenant="elsewhere") == 0


def test_versioned_writes_return_the_version_they_wrote(store: SQLiteStore) -> None:
    _seeded(store)
    v = store.version("c", tenant=T)
    _, v1 = store.put_working_versioned("c", "k", "v", tenant=T, ttl=5)
    _, v2 = store.pin_versioned("c", "p", tenant=T)
    _, v3 = store.save_summary_versioned(_summary(2), tenant=T, expected=0)
    _, _, v4 = store.save_compaction_versioned(_summary(3), _entry(3), tenant=T, expected=1)
    _, v5 = store.log_compaction_versioned(_entry(4), tenant=T)
    v6 = store.set_message_tokens("c", tenant=T, counts={4: 2}, counter="x")
    saved, v7 = store.append_versioned("c", [Message.user("x", id="x")], tenant=T, user="u")
    assert [m.seq for m in saved] == [5]
    _, v8 = store.unpin_versioned("c", 1, tenant=T)
    assert [v1, v2, v3, v4, v5, v6, v7, v8] == [v + i for i in range(1, 9)]
    assert store.version("c", tenant=T) == v + 8
    assert store.append_versioned("c", [Message.user("x", id="x")], tenant=T, user="u")[1] == v7 + 1


def test_the_version_is_per_conversation_and_per_tenant(store: SQLiteStore) -> None:
    store.append("c", [Message.user("a")], tenant="t1", user="u")
    store.append("c", [Message.user("a")], tenant="t1", user="u")
    store.append("c", [Message.user("a")], tenant="t2", user="u")
    store.append("d", [Message.user("a")], tenant="t1", user="u")
    assert store.version("c", tenant="t1") == 2
    assert store.version("c", tenant="t2") == 1
    assert store.version("d", tenant="t1") == 1


def test_two_connections_see_each_others_bumps(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with SQLiteStore(db) as a, SQLiteStore(db) as b:
        a.append("c", [Message.user("from a")], tenant=T, user="u")
        assert b.version("c", tenant=T) == 1
        b.append("c", [Message.user("from b")], tenant=T, user="u")
        assert a.version("c", tenant=T) == 2
        b.pin("c", "pinned by b", tenant=T)
        info = a.get_conversation("c", tenant=T)
        assert info is not None
        assert info.version == 3


_CHILD = """
import sys
from contextwright import Message
from contextwright.stores import SQLiteStore
with SQLiteStore(sys.argv[1]) as s:
    for i in range(int(sys.argv[2])):
        s.append("c", [Message.user(f"child {i}")], tenant="t", user="u")
    print(s.version("c", tenant="t"))
"""


def test_another_process_s_writes_move_the_version(tmp_path: Path) -> None:
    db = tmp_path / "procs.db"
    with SQLiteStore(db) as s:
        s.append("c", [Message.user("parent")], tenant=T, user="u")
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(db), "5"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert int(out) == 6 == s.version("c", tenant=T)


def test_the_migration_gives_existing_conversations_a_version(tmp_path: Path) -> None:
    """A file made before m008 (simulated by dropping the column) gets non-zero versions."""
    db = tmp_path / "old.db"
    with SQLiteStore(db) as s:
        s.append("c", [Message.user("a"), Message.user("b")], tenant=T, user="u")
        s.ensure_conversation("empty", tenant=T, user="u")
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE conversations DROP COLUMN version")
    conn.execute("DELETE FROM _migrations WHERE name = 'm008_conversation_version'")
    conn.commit()
    conn.close()
    with SQLiteStore(db) as s:
        assert s.applied_migrations == ["m008_conversation_version"]
        assert s.version("c", tenant=T) == 3
        assert s.version("empty", tenant=T) == 1
        s.append("c", [Message.user("c")], tenant=T, user="u")
        assert s.version("c", tenant=T) == 4
