"""The background memory writer over the real stores (SQLite and PostgreSQL: ``store_db``).

What it promises: `submit` never makes the caller wait (measured while the extractor
sleeps); exact and near duplicates are not written twice; a new value of a keyed fact
supersedes the old one, which stays in the history; ``on_write`` fires per scope that
changed; `flush` is the compaction hook and returns the count; a failing extraction
never stops the worker. And end to end: a fact said in one turn is in the next turn's
context once the writer has finished — while no build ever waited for it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message, Scope, UserError
from contextwright.memory import Extracted, RuleExtractor, SQLiteMemoryStore, open_memory_store
from contextwright.service._memory_writer import (
    MemoryWriter,
    MemoryWriterStore,
    WriterStats,
    invalidate_user_memory,
)
from contextwright.sources import UserMemorySource
from contextwright.stores import SQLiteStore
from tests.store_backends import store_db

__all__ = ["store_db"]  # the fixture, imported for pytest

SCOPE = Scope("acme", "alice")


class SlowRules(RuleExtractor):
    """The rules, after ``delay`` seconds of (async) thinking — a stand-in for an LLM."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.name = "slow-rules"

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        await asyncio.sleep(self.delay)
        return self.extract_sync(messages, locale=locale)


class GatedRules(RuleExtractor):
    """The rules, once ``gate`` is set: an extractor that is busy until the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.name = "gated-rules"

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        # a minute at most, so a test whose caller wrongly waits fails instead of hanging
        await asyncio.to_thread(self.gate.wait, 60)
        return self.extract_sync(messages, locale=locale)


class Fixed:
    """An extractor that returns the given items (to drive the merge precisely)."""

    name = "fixed"

    def __init__(self, *items: Extracted) -> None:
        self.items = list(items)

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        return self.items


class Broken:
    name = "broken"

    def __init__(self) -> None:
        self.calls = 0

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the extractor fell over")
        return [Extracted("User likes jazz", "preference", 60, None, ())]


@pytest.fixture
def store(store_db: Any) -> Iterator[SQLiteMemoryStore]:
    s = open_memory_store(store_db)  # SQLite or PostgreSQL (tests/store_backends.py)
    yield s  # type: ignore[misc]
    s.close()


def live(store: SQLiteMemoryStore, scope: Scope = SCOPE) -> list[str]:
    return [m.content for m in store.history(scope) if m.superseded_by is None]


def test_the_real_store_is_a_writer_store(store: SQLiteMemoryStore) -> None:
    assert isinstance(store, MemoryWriterStore)


def test_submit_returns_at_once_while_the_extractor_is_slow(store: SQLiteMemoryStore) -> None:
    extractor = GatedRules()
    writer = MemoryWriter(store, extractor)
    writer.submit(SCOPE, [Message.user("I'm 35.")])  # starts the worker, which now waits
    for i in range(20):
        batch = [Message.user(f"I live in City{i}."), Message.assistant("Nice!")]
        writer.submit(SCOPE, batch)  # had it waited for the extractor, it would never return
    assert writer.stats.processed == 0  # nothing done yet: the caller did not wait for it
    extractor.gate.set()
    writer.close(timeout=0, drain=False)


def test_exact_duplicates_are_not_written_twice(store: SQLiteMemoryStore) -> None:
    with MemoryWriter(store) as writer:
        writer.submit(
            SCOPE, [Message.user("I love green tea. I LOVE GREEN TEA!")]
        )  # within a batch
        writer.submit(
            SCOPE, [Message.user("ｉ ｌｏｖｅ ｇｒｅｅｎ ｔｅａ！")]
        )  # full width, another batch
        assert writer.wait_idle(10)
        stats = writer.stats
    assert live(store) == ["User loves green tea"]
    assert (stats.written, stats.deduplicated) == (
        1,
        1,
    )  # the in-batch repeat is folded by the rules


def test_near_duplicates_are_not_written_and_raise_importance(store: SQLiteMemoryStore) -> None:
    first = Extracted("User prefers window seats on long flights", "preference", 60, None, ("m1",))
    near = Extracted(
        "User prefers window seats on long flights too", "preference", 80, None, ("m2",)
    )
    other = Extracted("User prefers aisle seats on short hops", "preference", 60, None, ("m3",))
    with MemoryWriter(store, Fixed(first)) as writer:
        writer.submit(SCOPE, [Message.user("x")])
        writer.wait_idle(10)
        writer.extractor = Fixed(near, other)
        writer.submit(SCOPE, [Message.user("y")])
        writer.wait_idle(10)
        stats = writer.stats
    assert live(store) == [first.content, other.content]
    assert (stats.written, stats.deduplicated) == (2, 1)
    (kept,) = [m for m in store.history(SCOPE) if m.content == first.content]
    assert kept.importance == 80  # restating it never makes it less important
    assert kept.source_message_ids == ("m1",)


def test_a_new_value_of_a_keyed_fact_supersedes_the_old(store: SQLiteMemoryStore) -> None:
    calls: list[Scope] = []
    with MemoryWriter(store, on_write=calls.append) as writer:
        writer.submit(SCOPE, [Message.user("I'm 35 and I live in Berlin.", id="t1")])
        writer.submit(SCOPE, [Message.user("I'm 36 now.", id="t2")])
        writer.submit(SCOPE, [Message.user("I am 36 years old", id="t3")])  # the same again
        assert writer.wait_idle(10)
        stats = writer.stats
    ages = store.history(SCOPE, key="age")
    assert [(m.content, m.source_message_ids) for m in ages] == [
        ("User is 35 years old", ("t1",)),
        ("User is 36 years old", ("t2",)),
    ]
    assert ages[0].superseded_by == ages[1].id
    assert ages[1].superseded_by is None
    assert live(store) == ["User lives in Berlin", "User is 36 years old"]
    assert (stats.written, stats.superseded, stats.deduplicated) == (3, 1, 1)
    assert calls == [SCOPE, SCOPE]  # the third batch changed nothing: no invalidation


def test_on_write_is_called_per_scope(store: SQLiteMemoryStore) -> None:
    bob = Scope("acme", "bob")
    calls: list[Scope] = []
    with MemoryWriter(store, on_write=calls.append) as writer:
        writer.submit(SCOPE, [Message.user("I work at Acme.")])
        writer.submit(bob, [Message.user("I work at Initech.")])
        writer.submit(bob, [Message.user("ok thanks")])  # nothing to write
        writer.wait_idle(10)
    assert calls == [SCOPE, bob]
    assert live(store, SCOPE) == ["User works at Acme"]
    assert live(store, bob) == ["User works at Initech"]


async def test_flush_returns_the_count_and_jumps_the_queue(store: SQLiteMemoryStore) -> None:
    writer = MemoryWriter(store, SlowRules(0.2))
    for i in range(4):
        writer.submit(Scope("acme", f"user{i}"), [Message.user(f"I live in City{i}.")])
    flushed = await writer.flush(
        "acme",
        "alice",
        "conv-1",
        [Message.user("I'm 35. I work at Acme."), Message.assistant("ok")],
    )
    assert flushed == 2
    assert writer.stats.processed <= 2  # done before most of the queue
    assert live(store) == ["User is 35 years old", "User works at Acme"]
    assert await writer.flush("acme", "alice", "conv-1", [Message.user("I'm 35!")]) == 0
    assert await writer.wait_idle_async(10)
    writer.close()


def test_flush_is_the_compaction_hook() -> None:
    db = SQLiteStore(":memory:")
    memory = SQLiteMemoryStore(db)
    writer = MemoryWriter(memory)
    engine = ContextEngine(counter=HeuristicCounter(), budget=3000)
    convs = Conversations(engine, db, memory_flush=writer.flush)
    turns: list[Message] = []
    for i in range(15):
        turns += [
            Message.user(f"Turn {i}: I'm planning to visit city number {i} soon."),
            Message.assistant("Noted. " * 20),
        ]
    turns[0] = Message.user("I'm 35 and I work at Acme.")
    convs.append_sync("c", turns, tenant="acme", user="alice")
    result = convs.compact_sync("c", tenant="acme", user="alice")
    assert result.flushed_memories >= 2
    assert "User is 35 years old" in live(memory)
    convs.close()
    writer.close()
    memory.close()


def test_a_failing_extraction_does_not_stop_the_worker(store: SQLiteMemoryStore) -> None:
    with MemoryWriter(store, Broken()) as writer:
        writer.submit(SCOPE, [Message.user("a")])
        writer.submit(SCOPE, [Message.user("b")])
        writer.wait_idle(10)
        stats = writer.stats
    assert (stats.processed, stats.failed, stats.written) == (2, 1, 1)
    assert stats.last_error is not None
    assert "the extractor fell over" in stats.last_error
    assert live(store) == ["User likes jazz"]


async def test_a_failing_flush_raises_for_its_caller(store: SQLiteMemoryStore) -> None:
    writer = MemoryWriter(store, Broken())
    with pytest.raises(RuntimeError, match="fell over"):
        await writer.flush("acme", "alice", "c", [Message.user("x")])
    assert await writer.flush("acme", "alice", "c", [Message.user("x")]) == 1
    writer.close()


def test_a_failing_on_write_keeps_the_memories(store: SQLiteMemoryStore) -> None:
    def boom(scope: Scope) -> None:
        raise ValueError("cache is down")

    with MemoryWriter(store, on_write=boom) as writer:
        writer.submit(SCOPE, [Message.user("I live in Oslo.")])
        writer.wait_idle(10)
        stats = writer.stats
    assert live(store) == ["User lives in Oslo"]
    assert stats.failed == 0
    assert "on_write: ValueError: cache is down" in (stats.last_error or "")


def test_a_full_queue_drops_instead_of_blocking(store: SQLiteMemoryStore) -> None:
    extractor = GatedRules()
    writer = MemoryWriter(store, extractor, max_queue=2)
    for i in range(6):
        writer.submit(SCOPE, [Message.user(f"I live in City{i}.")])
    stats = writer.stats
    assert stats.submitted == 6
    assert stats.dropped >= 3  # at most one taken by the busy worker and two queued
    extractor.gate.set()
    writer.close(timeout=0, drain=False)


def test_close_drains_and_then_refuses(store: SQLiteMemoryStore) -> None:
    writer = MemoryWriter(store, SlowRules(0.05))
    for i in range(3):
        writer.submit(SCOPE, [Message.user(f"I'm a nurse{'!' * i}")])
    writer.close()
    assert writer.stats == WriterStats(
        submitted=3, processed=3, extracted=3, written=1, deduplicated=2
    )
    with pytest.raises(UserError):
        writer.submit(SCOPE, [Message.user("I'm 35")])


# -- end to end: turn N's facts in turn N+1, no build waiting ----------------------------------


def _context(built: object) -> str:
    return "\n".join(m.text for m in built.messages)  # type: ignore[attr-defined]


@pytest.mark.parametrize("wired", [True, False])
def test_a_fact_written_after_a_turn_is_in_the_next_turns_context(
    store: SQLiteMemoryStore, wired: bool
) -> None:
    store.add(SCOPE, "User likes tea", category="preference", importance=60)
    engine = ContextEngine(counter=HeuristicCounter(), sources=[UserMemorySource(store=store)])
    extractor = GatedRules()
    writer = MemoryWriter(
        store, extractor, on_write=invalidate_user_memory(engine) if wired else None
    )
    who = {"tenant": "acme", "user": "alice", "budget": 2000}

    # Turn N: the user says something worth remembering; the build does not wait for it.
    said = Message.user("I'm 35 and I live in Berlin.")
    turn_n = engine.build_sync(said, conversation="c", **who)
    writer.submit(SCOPE, [said, Message.assistant("Good to know!")])
    assert "User lives in Berlin" not in _context(turn_n)

    # While the writer is still extracting (held at its gate), the next question builds
    # (and caches): a build that waited for the writer would find it processed.
    question = "Which visa should I apply for?"
    early = engine.build_sync(question, conversation="c", **who)
    assert writer.stats.processed == 0
    assert "User lives in Berlin" not in _context(early)

    extractor.gate.set()
    assert writer.wait_idle(60)
    turn_n1 = engine.build_sync(question, conversation="c", **who)
    block = turn_n1.report.block("user_memory")
    assert block is not None
    if wired:  # the write invalidated the cached block: turn N+1 sees turn N's facts
        assert not block.cached
        assert "User lives in Berlin" in _context(turn_n1)
        assert "User is 35 years old" in _context(turn_n1)
    else:  # without the wiring the cached block is stale for its TTL
        assert block.cached
        assert "User lives in Berlin" not in _context(turn_n1)
    writer.close()
    engine.close()


# -- lifetime: nothing submitted is lost when the process exits ---------------------------

PROCESS_WORKER = os.path.join(os.path.dirname(__file__), "process_worker.py")


def _exit_without_close(db, count: int, delay: float, exit_timeout: float):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [str(db), str(count), str(delay), str(exit_timeout)]
    proc = subprocess.run(
        [sys.executable, PROCESS_WORKER, "memory", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "submitted"
    return proc


def _stored_memories(db) -> int:
    with SQLiteMemoryStore(db) as store:
        (n,) = store.db._conn.execute("SELECT count(*) FROM memories").fetchone()
    return int(n)


def test_a_process_exiting_without_close_writes_everything_it_submitted(tmp_path):
    """50 batches of three facts, then a normal exit with no close(): all 150 stored, as
    many as a writer that is closed stores (the extractor also uses a thread pool,
    which must still run while the queue drains at exit)."""
    _exit_without_close(tmp_path / "exit.db", 50, 0.0, 10.0)
    with SQLiteMemoryStore(tmp_path / "closed.db") as store, MemoryWriter(store) as writer:
        for i in range(50):
            text = f"My name is Person{i}. I live in City{i}. I work at Company{i}."
            writer.submit(Scope("t", f"u{i}"), [Message.user(text)])
    assert _stored_memories(tmp_path / "closed.db") == 150
    assert _stored_memories(tmp_path / "exit.db") == 150


def test_what_cannot_be_written_within_exit_timeout_is_reported(tmp_path):
    """Five batches of half a second each cannot be written in 0.2 s: the exit says so."""
    proc = _exit_without_close(tmp_path / "slow.db", 5, 0.5, 0.2)
    assert "exit_timeout" in proc.stderr
    assert "queued batch(es) not written" in proc.stderr
    assert _stored_memories(tmp_path / "slow.db") < 15


def test_the_writer_is_a_context_manager_sync_and_async(tmp_path):
    with SQLiteMemoryStore(tmp_path / "m.db") as store:
        with MemoryWriter(store) as writer:
            writer.submit(SCOPE, [Message.user("I live in Paris.")])
        assert writer.stats.processed == 1
        with pytest.raises(UserError):
            writer.submit(SCOPE, [Message.user("closed")])

        async def main() -> MemoryWriter:
            async with MemoryWriter(store) as writer:
                writer.submit(SCOPE, [Message.user("I work at Acme.")])
            return writer

        assert asyncio.run(main()).stats.processed == 1
        assert len(store.history(SCOPE)) == 2  # where alice lives, and works
