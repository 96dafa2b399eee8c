"""A second process for the storage tests: appends to a store file from outside pytest.

python storage_worker.py append DB CONVERSATION TAG COUNT BATCH GO_FILE
    print "ready", wait until GO_FILE exists, then append COUNT messages "TAG i" in batches
    of BATCH (one transaction each); the counts are i % 7 + 1.
python storage_worker.py flood DB CONVERSATION BATCH
    append batches of BATCH large messages forever, printing "committed"
    after the first commit; the test kills it with SIGKILL mid-batch.
"""

from __future__ import annotations

import os
import sys
import time

from contextwright import Message
from contextwright.stores import SQLiteStore


def append(db: str, conversation: str, tag: str, count: int, batch: int, go: str) -> None:
    with SQLiteStore(db) as store:
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        for start in range(0, count, batch):
            numbers = range(start, min(start + batch, count))
            store.append(
                conversation,
                [Message.user(f"{tag} {i}") for i in numbers],
                tenant="t",
                user="u",
                tokens=[i % 7 + 1 for i in numbers],
                counter="test",
            )


def flood(db: str, conversation: str, batch: int) -> None:
    filler = "tool output line with some words 工具输出 " * 20
    with SQLiteStore(db) as store:
        n = 0
        while True:
            store.append(
                conversation,
                [Message.user(f"{filler} {n + i}") for i in range(batch)],
                tenant="t",
                user="u",
                tokens=[100 + i % 13 for i in range(batch)],
                counter="test",
            )
            if n == 0:
                print("committed", flush=True)
            n += batch


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "append":
        db, conversation, tag, count, batch, go = args
        append(db, conversation, tag, int(count), int(batch), go)
    elif mode == "flood":
        db, conversation, batch = args
        flood(db, conversation, int(batch))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
