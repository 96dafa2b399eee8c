"""`Conversations.delete`: the owner's request to be forgotten, in this process and others.

Only the owner deletes; afterwards nothing of the conversation is in the store,
in this process's caches (tail, recall's index and outlines, the engine's window
walk), nor in a build of another process that had it cached (its tail notices the
delete and drops what it held); the id may be started again by anyone. A summary
job queued for it before the delete runs later and does nothing, also when
someone else has made the conversation again meanwhile.
"""

from __future__ import annotations

import json
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
from contextwright.stores import Backend, SQLiteStore

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
