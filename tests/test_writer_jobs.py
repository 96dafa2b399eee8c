"""The memory writer's batches as durable jobs: a killed process's batches are finished by
another, failed batches are retried and kept, bad input is refused with nothing queued.

Real SQLite files and a real second process (killed with SIGKILL, not asked to stop).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Sequence

import pytest

from contextwright import InvalidMessageError, Message, Scope
from contextwright._errors import ConfigError
from contextwright.memory import Extracted, SQLiteMemoryStore
from contextwright.service._memory_writer import MEMORY, MemoryWriter
from contextwright.stores import MemoryJobs, SQLiteJobs, SQLiteStore

SCOPE = Scope("acme", "alice")


class Failing:
    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        self.calls += 1
        raise RuntimeError(f"the model is down ({self.calls})")


def test_inline_a_batch_runs_before_submit_returns(tmp_path):
    with SQLiteMemoryStore(tmp_path / "m.db") as store:
        writer = MemoryWriter(store, inline=True)
        writer.submit(SCOPE, [Message.user("I live in Oslo.")])
        assert writer.stats.processed == 1
        assert [m.content for m in store.history(SCOPE)] == ["User lives in Oslo"]
        assert writer.jobs_sync() == []  # done jobs leave the queue
        writer.close()


def test_a_failing_batch_is_retried_then_kept_failed_with_its_error(tmp_path):
    with SQLiteMemoryStore(tmp_path / "m.db") as store:
        extractor = Failing()
        writer = MemoryWriter(store, extractor, inline=True, retry_base=0.0, max_attempts=3)
        writer.submit(SCOPE, [Message.user("I live in Oslo.")], conversation="c1")
        assert writer.wait_idle(10)
        assert extractor.calls == 3
        (failed,) = writer.jobs_sync(state="failed")
        assert (failed.kind, failed.tenant, failed.attempts) == (MEMORY, "acme", 3)
        assert failed.error == "RuntimeError: the model is down (3)"
        assert failed.payload["user"] == "alice"
        assert failed.payload["conversation"] == "c1"
        assert [m["parts"] for m in failed.payload["messages"]] == [
            [{"type": "text", "text": "I live in Oslo."}]
        ]
        stats = writer.stats
        assert (stats.failed, stats.given_up, stats.processed, stats.written) == (3, 1, 1, 0)
        assert "the model is down (3)" in (stats.last_error or "")
        writer.close()
    # another process's writer sees the failed job too (it is in the file)
    with SQLiteStore(tmp_path / "m.db") as db:
        assert [j.state for j in asyncio.run(SQLiteJobs(db).jobs(kind=MEMORY))] == ["failed"]


def test_bad_input_raises_a_typed_error_naming_the_field_and_queues_nothing():
    queue = MemoryJobs()
    with SQLiteMemoryStore(":memory:") as store:
        writer = MemoryWriter(store, jobs=queue, inline=True)
        cases = [
            (lambda: writer.submit("alice", [Message.user("x")]), ConfigError, "scope"),  # type: ignore[arg-type]
            (lambda: writer.submit(SCOPE, "I live in Oslo"), InvalidMessageError, "messages"),  # type: ignore[arg-type]
            (lambda: writer.submit(SCOPE, [Message.user("x"), "y"]), InvalidMessageError, r"messages\[1\]"),  # type: ignore[list-item]
            (lambda: writer.submit(SCOPE, [Message.user("x")], conversation=""), ConfigError, "conversation"),
        ]  # fmt: skip
        for call, error, field in cases:
            with pytest.raises(error, match=field):
                call()
        assert asyncio.run(queue.jobs()) == []
        assert writer.stats.submitted == 0
        writer.close()


def test_stored_messages_are_named_by_sequence_number_not_copied(tmp_path):
    db = SQLiteStore(tmp_path / "c.db")
    memory = SQLiteMemoryStore(db)
    stored = db.append("c", [Message.user("I work at Acme."), Message.assistant("ok")], tenant="t")
    seen: list[dict] = []
    queue = SQLiteJobs(db)

    class Spy:
        name = "spy"

        async def extract(self, messages, *, locale="auto"):
            (job,) = await queue.jobs(kind=MEMORY)
            seen.append(dict(job.payload))
            return [Extracted(f"User said {m.text}", "fact", 50, None, (m.id,)) for m in messages]

    writer = MemoryWriter(memory, Spy(), jobs=queue, inline=True)
    writer.submit(Scope("t", "u"), stored, conversation="c")
    assert seen == [{"user": "u", "namespace": "", "conversation": "c", "seqs": [1, 2]}]
    assert sorted(m.content for m in memory.history(Scope("t", "u"))) == [
        "User said I work at Acme.",
        "User said ok",
    ]
    writer.close()
    memory.close()
    db.close()


# -- a process killed after enqueueing: another finishes its batches ---------------------------

WRITER_A = textwrap.dedent(
    """
    import sys, time
    from contextwright import MemoryWriter, Message, Scope
    from contextwright.memory import SQLiteMemoryStore
    from contextwright.stores import SQLiteStore

    db, started = sys.argv[1], sys.argv[2]
    store = SQLiteStore(db)
    memory = SQLiteMemoryStore(store)

    def on_write(scope):
        if scope.user == "u3":  # batch 3 is written, its job not yet marked done
            open(started, "w").close()
            time.sleep(3600)

    writer = MemoryWriter(memory, on_write=on_write, lease=1.0)
    for i in range(8):
        text = f"My name is Person{i}. I live in City{i}. I work at Company{i}."
        scope = Scope("t", f"u{i}")
        if i % 2:  # stored in a conversation: the job names them by seq
            kept = store.append(f"c{i}", [Message.user(text)], tenant="t", user=f"u{i}")
            writer.submit(scope, kept, conversation=f"c{i}")
        else:  # not stored anywhere else: the job carries them
            writer.submit(scope, [Message.user(text)])
    print("submitted", flush=True)
    sys.stdin.read()  # until killed
    """
)


def test_batches_of_a_process_killed_with_sigkill_are_finished_by_another(tmp_path):
    db, started = tmp_path / "k.db", tmp_path / "started"
    script = tmp_path / "writer_a.py"
    script.write_text(WRITER_A)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    a = subprocess.Popen(
        [sys.executable, str(script), str(db), str(started)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert a.stdout is not None
        assert a.stdout.readline().strip() == "submitted", a.stderr.read() if a.stderr else ""
        deadline = time.monotonic() + 60
        while not started.exists():  # the file is the signal: A holds batch 3
            assert a.poll() is None, a.stderr.read() if a.stderr else ""
            assert time.monotonic() < deadline, "writer A never reached batch 3"
            time.sleep(0.01)
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(10)
    assert a.returncode == -signal.SIGKILL

    store = SQLiteStore(db)
    left = asyncio.run(SQLiteJobs(store).jobs(kind=MEMORY))
    by_user = {j.payload["user"]: j for j in left}
    assert sorted(by_user) == ["u3", "u4", "u5", "u6", "u7"]  # 0..2 done, 3 held, 4..7 queued
    assert by_user["u3"].state == "running"
    assert all(by_user[u].state == "pending" for u in ("u4", "u5", "u6", "u7"))
    assert "seqs" in by_user["u5"].payload
    assert "messages" not in by_user["u5"].payload
    assert "messages" in by_user["u4"].payload
    memory = SQLiteMemoryStore(store)
    before = memory.history(Scope("t", "u3"))
    assert len(before) == 3  # A wrote batch 3 before it died

    b = MemoryWriter(memory, lease=1.0)  # takes A's jobs over once A's leases have run out
    try:
        assert b.wait_idle(60, all_jobs=True)
        assert b.jobs_sync() == []
        contents = [m.content for i in range(8) for m in memory.history(Scope("t", f"u{i}"))]
        assert len(contents) == 24  # three facts per batch, every batch
        assert Counter(contents).most_common(1)[0][1] == 1  # none twice (batch 3 ran again)
        for i in range(8):
            assert f"User lives in City{i}" in contents
        assert b.stats.processed == 5
        assert b.stats.deduplicated == 3  # batch 3's facts, already written by A
    finally:
        b.close()
        memory.close()
        store.close()
