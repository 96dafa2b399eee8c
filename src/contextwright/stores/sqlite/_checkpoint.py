"""WAL checkpoints off the write path: a thread with its own connection copies the log back.

SQLite's default runs a checkpoint inside the commit that takes the write-ahead
log past 1,000 pages, so every so many appends one of them also copies megabytes
into the database file: one append in twenty took 5-30 ms at 100,000 messages
(a one-message append writes about 18 pages: the row, its indexes, the FTS
segment). `SQLiteStore` turns that off on its own connection and hands the work
to a `Checkpointer` instead: after every ``every`` commits it wakes a daemon
thread that, on a connection of its own, runs a passive checkpoint (it never
blocks writers or readers: the writer keeps appending while older frames are
copied) and then a non-waiting RESTART, which lets the next writer start the log
from the beginning again, so the file stays bounded. The thread spends its time in
SQLite with the GIL released.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import suppress

__all__ = ["Checkpointer"]

_LONG_LOG = 8192  # WAL frames (32 MB at 4 KB pages)


class Checkpointer:
    """Runs passive WAL checkpoints of the database at ``path`` on a thread of its own."""

    def __init__(self, path: str, *, every: int = 64) -> None:
        self.path = path
        self.every = every
        self.runs = 0  # checkpoints done (tests read it)
        self._commits = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def committed(self) -> None:
        """Count a commit; every ``every`` commits, wake the checkpointing thread."""
        self._commits += 1
        if self._commits < self.every:
            return
        self._commits = 0
        with self._lock:
            if self._stop:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="contextwright-checkpoint", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        conn = sqlite3.connect(self.path, timeout=0.0, isolation_level=None)
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                # BUSY (a writer, another checkpoint) or a locked file: try next time.
                with suppress(sqlite3.Error):
                    ((_busy, log, _done),) = conn.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchall()
                    # With writes going on, a passive pass rarely finds the log fully
                    # copied at the moment a writer starts, so the log never restarts
                    # and grows (and a long log slows every commit: p99 4 ms instead
                    # of 0.8 at 100,000 messages). A RESTART right after it has
                    # little left to copy, and not waiting it gives up at once if a
                    # writer is active. A log past `_LONG_LOG` gets a few more tries.
                    tries = 5 if log > _LONG_LOG else 1
                    for _ in range(tries):
                        ((busy, _log, _done),) = conn.execute(
                            "PRAGMA wal_checkpoint(RESTART)"
                        ).fetchall()
                        if not busy:
                            break
                        time.sleep(0.002)
                    self.runs += 1
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread (idempotent); the store's last close checkpoints what is left."""
        with self._lock:
            self._stop = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=5.0)
