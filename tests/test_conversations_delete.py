"""`Conversations.delete`: the owner's request to be forgotten, in this process and others.

Only the owner deletes; afterwards nothing of the conversation is in the store,
in this process's caches (tail, recall's index and outlines, the engine's window
walk), nor in a build of another process that had it cached (its tail notices the
delete and drops what it held); the id may be started again by anyone. A summary
job queued for it before the delete runs later and does nothing, also when
someone else has made the conversation again meanwhile. A process whose cache of
the conversation was current at version v never serves it once another process
has deleted the conversation and made it again, whatever version the new one
reaches (versions keep counting across a delete), even when neither its creation
time (a frozen clock) nor its length tells the two apart, nor recalls any of it
from caches that outlived its evicted tail; on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextwright import (
    ContextEngine,
    Conversations,
    HeuristicCounter,
    InvalidMessageError,
    Message,
)
from contextwright.history import CompactionConfig
from contextwright.service._compact import SUMMARISE
from contextwright.stores import Backend, SQLiteBackend, SQLiteStore

from .conftest import OpenBackend, sync

SECRET = "ZANZIBAR7"


def _open(store: Backend | SQLiteStore, *, inline_jobs: bool = False) -> Conversations:
    engine = ContextEngine(counter=HeuristicCounter(), budget=3000)
    preset = CompactionConfig.preset("development")
    return Conversations(engine, store, compaction=preset, inline_jobs=inline_jobs)


def _thread(who: str, secret: str, turns: int = 60) -> list[Message]:
    """A thread far longer than the window, ``secret`` said only in its first turns."""
    out: list[Message] = []
    for i in range(turns):
        said = f" The code word is {secret}." if i < 3 else ""
        out.append(Message.user(f"{who} turn {i}: about zanzibar and plan {i % 5}.{said}"))
        out.append(Message.assistant(f"Noted turn {i} for {who}, plan {i % 5} is fine."))
    return out


def _texts(c: Conversations, user: str, question: str) -> str:
    built = c.build_sync("c", question, tenant="t", user=user, store_message=False)
    return json.dumps([m.text for m in built.messages])


def test_the_owner_deletes_and_nothing_of_it_comes_back(tmp_path: Path, backend: OpenBackend):
    path = tmp_path / "d.db"
    with _open(backend(path)) as here, _open(backend(path)) as there:  # two processes, one store
        _delete_and_start_again(here, there)


def _delete_and_start_again(here: Conversations, there: Conversations) -> None:
    here.append_sync("c", _thread("alice", SECRET), tenant="t", user="alice")
    for c in (here, there):  # both hold its tail, recall's outlines, window walks
        assert SECRET in _texts(c, "alice", "what was the code word?")
    here.wait_idle_sync(all_jobs=True)
    receipts = sync(here.backend.receipts)
    receipts.record_receipt("c", {"secret": SECRET}, tenant="t")
    stored = len(list(here.messages_sync("c", tenant="t", user="alice")))
    with pytest.raises(InvalidMessageError, match="another user") as err:
        here.delete_sync("c", tenant="t", user="mallory")
    assert err.value.where == "user"
    assert len(list(here.messages_sync("c", tenant="t", user="alice"))) == stored

    assert here.delete_sync("c", tenant="t", user="alice") is True
    assert here._keeper.cache.get(("t", "c")) is None
    assert here._recall is not None
    assert not here._recall.has_index("c", "t")
    assert here.delete_sync("c", tenant="t", user="alice") is False
    assert list(here.messages_sync("c", tenant="t", user="alice")) == []
    assert receipts.receipts("c", tenant="t") == []
    # the other process had it all cached: its next build notices the delete
    assert SECRET not in _texts(there, "alice", "what was the code word?")

    # anyone may start the id again; neither process shows anything of the old one
    here.append_sync("c", _thread("bob", "OTHERWORD"), tenant="t", user="bob")
    for c in (here, there):
        text = _texts(c, "bob", "zanzibar plan 2, what was the code word?")
        assert "bob turn" in text
        assert SECRET not in text
        assert "alice" not in text
    assert [m.seq for m in here.messages_sync("c", tenant="t", user="bob")][:2] == [1, 2]


def test_a_summary_job_of_a_deleted_conversation_does_nothing(tmp_path: Path) -> None:
    with _open(SQLiteStore(tmp_path / "j.db"), inline_jobs=True) as c:
        _run_a_deleted_conversations_job(c)


def _run_a_deleted_conversations_job(c: Conversations) -> None:
    log = sync(c.backend.conversations)
    for remade_by in (None, "bob"):
        c.append_sync("c", _thread("alice", SECRET), tenant="t", user="alice")
        c.wait_idle_sync()
        payload = {"conversation": "c", "user": "alice", "routine": False}
        c._runner.enqueue_now(SUMMARISE, "c", payload, tenant="t")  # queued, not run yet
        assert c.delete_sync("c", tenant="t", user="alice") is True
        if remade_by is None:
            assert c.run_sync(c._runner.run_due()) == 1
        else:  # made again by someone else before the job runs: their append, finding
            # the job queued (one per conversation), runs it at once (inline jobs)
            c.append_sync("c", _thread(remade_by, "OTHER"), tenant="t", user=remade_by)
        assert c.jobs_sync() == []  # ran, and did not fail
        summaries = sync(c.backend.summaries).summaries("c", tenant="t")
        assert not any("alice" in s.content or SECRET in s.content for s in summaries)
        if remade_by is None:
            assert log.version("c", tenant="t") == 0
        else:
            info = log.get_conversation("c", tenant="t")
            assert (info.user, info.last_seq) == (remade_by, 120)
            assert c.delete_sync("c", tenant="t", user=remade_by) is True


# -- versions keep counting across a delete --------------------------------------------------

FROZEN = 1_700_000_000.0  # one instant for every write: creation times cannot tell two apart


def _frozen(kind: str, where: str) -> Backend:
    """A backend on ``where`` whose store clock never moves (jobs keep real time)."""
    if kind == "sqlite":
        return SQLiteBackend(SQLiteStore(where, clock=lambda: FROZEN)).backend()
    from contextwright.stores.postgres import PostgresBackend

    return PostgresBackend(where, clock=lambda: FROZEN, max_size=4).backend()


@pytest.fixture(params=["sqlite", "postgres"])
def frozen_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(kind, where) of one store two `Conversations` open, as two processes would."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "frozen.db")
        return
    url = request.getfixturevalue("pg_url")
    yield "postgres", url


def _chunk(who: str, word: str, start: int, pairs: int) -> list[Message]:
    return [
        m
        for i in range(start, start + pairs)
        for m in (
            Message.user(f"{who} turn {i}: {word} about zanzibar plan {i % 5}."),
            Message.assistant(f"Noted {word} turn {i} for {who}."),
        )
    ]


@pytest.mark.parametrize("k", [1, 6])
def test_a_remade_conversation_never_meets_a_cache_of_the_deleted_one(
    frozen_store: tuple[str, str], k: int
) -> None:
    """A caches the conversation at version v; B deletes it and makes it again with
    other text (same owner, same creation time, as many messages) and writes until
    its version reaches v + k; A's next build shows nothing of the deleted one.

    Neither the creation time nor the sequence numbers tell the two apart here; before
    versions kept counting across a delete, the remade one came back to v and A served
    its cache of the deleted one as current.
    """
    kind, where = frozen_store
    with _open(_frozen(kind, where)) as a, _open(_frozen(kind, where)) as b:
        log = sync(a.backend.conversations)
        for n in range(3):
            a.append_sync("c", _chunk("alice", SECRET, 10 * n, 10), tenant="t", user="alice")
        a.wait_idle_sync(all_jobs=True)
        assert SECRET in _texts(a, "alice", "what was the code word?")
        v = log.version("c", tenant="t")
        tail = a._keeper.cache.get(("t", "c"))
        assert tail is not None
        assert tail.version == v
        old = log.get_conversation("c", tenant="t")

        assert b.delete_sync("c", tenant="t", user="alice") is True
        assert log.version("c", tenant="t") == 0  # the deleted state
        after = []  # the versions of the conversation made again, as B writes
        for n in range(3):  # the same shape, other words
            b.append_sync("c", _chunk("alice", "PLAIN", 10 * n, 10), tenant="t", user="alice")
            after.append(log.version("c", tenant="t"))
        b.wait_idle_sync(all_jobs=True)  # (background summaries are writes too)
        after.append(log.version("c", tenant="t"))
        pins = sync(b.backend.pins)
        while after[-1] < v + k:
            pins.pin("c", f"pin at {after[-1]}", tenant="t")
            after.append(log.version("c", tenant="t"))
        # they continue above the deleted one's: none of its versions comes back
        assert after[0] == v + 1, (v, after)
        assert after == sorted(after), (v, after)
        info = log.get_conversation("c", tenant="t")
        assert (info.created_at, info.last_seq) == (old.created_at, old.last_seq) == (FROZEN, 60)
        text = _texts(a, "alice", "what was the code word? zanzibar plan 2")
        assert SECRET not in text
        assert "PLAIN turn" in text


def test_recall_caches_outliving_an_evicted_tail_are_not_served(
    frozen_store: tuple[str, str],
) -> None:
    """A's tail of the conversation is evicted (A holds one tail), its recall caches
    (outlines by seq) stay; B deletes the conversation and makes it again, the same
    seqs saying other things. A reads the conversation afresh and recalls nothing of
    the deleted one (before, the outlines of the deleted turns came back)."""
    kind, where = frozen_store
    engine = ContextEngine(counter=HeuristicCounter(), budget=3000)
    preset = CompactionConfig.preset("development")
    a = Conversations(engine, _frozen(kind, where), compaction=preset, max_cached_conversations=1)
    with a, _open(_frozen(kind, where)) as b:
        question = "what was the code word? zanzibar plan 2"
        for n in range(3):
            a.append_sync("c", _chunk("alice", SECRET, 40 * n, 40), tenant="t", user="alice")
        a.wait_idle_sync(all_jobs=True)
        assert SECRET in _texts(a, "alice", question)  # recalled: outlines cached
        a.wait_idle_sync(all_jobs=True)  # (a tail being summarised is not evicted)
        a.build_sync("other", "hello", tenant="t", user="alice")  # A's one tail now
        assert a._keeper.cache.get(("t", "c")) is None  # evicted; recall's caches stay
        assert b.delete_sync("c", tenant="t", user="alice") is True
        for n in range(3):
            b.append_sync("c", _chunk("alice", "PLAIN", 40 * n, 40), tenant="t", user="alice")
        b.wait_idle_sync(all_jobs=True)
        text = _texts(a, "alice", question)
        assert SECRET not in text
        assert "PLAIN turn" in text
