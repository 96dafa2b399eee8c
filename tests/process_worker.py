"""A second process for the stateful and memory tests: works on a database file from outside pytest.

python process_worker.py compact DB TAG ROUNDS GO_FILE
    print "ready", wait until GO_FILE exists, then ROUNDS times: append a question and
    an answer to conversation "c" and compact it (`Conversations.compact_sync`), with a
    preset that keeps two messages; other processes do the same to the same
    conversation. Prints "done N" with the number of compactions that saved a summary.
python process_worker.py summary DB COUNT
    import COUNT messages into conversation "c" with `Conversations.import_sync`, which
    schedules a background summary, and exit normally at once, without closing;
    prints "imported".
python process_worker.py memory DB COUNT DELAY EXIT_TIMEOUT
    submit COUNT batches to a `MemoryWriter` (three facts each) and exit normally,
    without closing the writer (EXIT_TIMEOUT 10 is the default); prints "submitted". Its extractor runs the rules in
    a thread (`asyncio.to_thread`, as an SDK-based one might) after DELAY seconds.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence

from contextwright import (
    ContextEngine,
    Conversations,
    HeuristicCounter,
    MemoryWriter,
    Message,
    Scope,
)
from contextwright.history import CompactionConfig
from contextwright.memory import Extracted, RuleExtractor, SQLiteMemoryStore
from contextwright.stores import SQLiteStore


def compact(db: str, tag: str, rounds: int, go: str) -> None:
    engine = ContextEngine(counter=HeuristicCounter(), budget=4000)
    config = CompactionConfig(
        soft_threshold_tokens=100, hard_threshold_tokens=200, keep_recent_messages=2,
        summary_max_tokens=200,
    )  # fmt: skip
    convs = Conversations(engine, SQLiteStore(db), compaction=config)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    applied = 0
    for i in range(rounds):
        convs.append_sync(
            "c", [Message.user(f"{tag} question {i} " * 10), Message.assistant(f"{tag} answer {i} " * 10)],
            tenant="t", user="u",
        )  # fmt: skip
        applied += convs.compact_sync("c", tenant="t", user="u").applied
    convs.close()
    print(f"done {applied}", flush=True)


def summary(db: str, count: int) -> None:
    engine = ContextEngine(counter=HeuristicCounter(), budget=3000)
    convs = Conversations(
        engine, SQLiteStore(db), compaction=CompactionConfig.preset("development")
    )
    msgs = [
        Message.user(f"question {i}: what about plan {i % 7}?")
        if i % 2 == 0
        else Message.assistant(f"plan {i % 7} costs {i * 10} dollars")
        for i in range(count)
    ]
    convs.import_sync("c", msgs, tenant="t", user="u")
    print("imported", flush=True)
    # exits here, with the summary running in the background: no close(), no wait


class ThreadedRules(RuleExtractor):
    """The rules on the event loop's default executor, after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def extract(
        self, messages: Sequence[Message], *, locale: str = "auto"
    ) -> list[Extracted]:
        def slow() -> list[Extracted]:
            time.sleep(self.delay)
            return self.extract_sync(messages, locale=locale)

        return await asyncio.to_thread(slow)


def memory(db: str, count: int, delay: float, exit_timeout: float) -> None:
    store = SQLiteMemoryStore(db)
    # the default exit_timeout is not passed: the process then runs on any version
    kw = {"exit_timeout": exit_timeout} if exit_timeout != 10.0 else {}
    writer = MemoryWriter(store, ThreadedRules(delay), **kw)
    for i in range(count):
        text = f"My name is Person{i}. I live in City{i}. I work at Company{i}."
        writer.submit(Scope("t", f"u{i}"), [Message.user(text)])
    print("submitted", flush=True)
    # exits here: no close(), no wait_idle()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "compact":
        db, tag, rounds, go = args
        compact(db, tag, int(rounds), go)
    elif mode == "summary":
        db, count = args
        summary(db, int(count))
    elif mode == "memory":
        db, count, delay, exit_timeout = args
        memory(db, int(count), float(delay), float(exit_timeout))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
