"""A second process for the stateful and memory tests: works on a database file from outside pytest.

python process_worker.py compact DB TAG ROUNDS GO_FILE
    print "ready", wait until GO_FILE exists, then ROUNDS times: append a question and
    an answer to conversation "c" and compact it (`Conversations.compact_sync`), with a
    preset that keeps two messages; other processes do the same to the same
    conversation. Prints "done N" with the number of compactions that saved a summary.
python process_worker.py memory DB COUNT
    submit COUNT batches to a `MemoryWriter` (three facts each) and exit normally,
    without closing the writer; prints "submitted".
"""

from __future__ import annotations

import os
import sys
import time

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message, Scope
from contextwright.history import CompactionConfig
from contextwright.memory import MemoryWriter, SQLiteMemoryStore
from contextwright.storage import SQLiteStore


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


def memory(db: str, count: int) -> None:
    store = SQLiteMemoryStore(db)
    writer = MemoryWriter(store)
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
    elif mode == "memory":
        db, count = args
        memory(db, int(count))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
