"""`PostgresWakeup`: the `Wakeup` hint over PostgreSQL LISTEN/NOTIFY.

An enqueue in `PostgresJobs` runs ``pg_notify`` inside its own transaction, so
the signal goes out when (and only if) the job is committed; `notify` sends one
on its own. Listening needs a connection that stays in LISTEN, so it is not a
pooled one: the first `listen` starts a daemon thread with a dedicated sync
connection that waits for notifications and calls every registered callback;
the last remover stops it. The thread never raises: when the server goes away it
logs, waits (with backoff, at most ``_MAX_BACKOFF`` s) and reconnects, and then
calls the callbacks once, since signals sent meanwhile are lost (a runner then
re-asks the queue, which is the source of truth). NOTIFY is scoped to one
database, so workers on different databases never wake each other.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from ._connect import SCHEMA, psycopg, redact

__all__ = ["CHANNEL", "PostgresWakeup"]

CHANNEL = f"{SCHEMA}_jobs"
log = logging.getLogger(__name__)
_WAIT = 0.5  # the listener checks whether it should stop this often
_MAX_BACKOFF = 5.0


class PostgresWakeup:
    """`Wakeup` on the database at ``conninfo`` (a URL or a libpq conninfo string)."""

    def __init__(self, conninfo: str, *, connect_timeout: float = 5.0) -> None:
        self.conninfo = conninfo
        self.connect_timeout = connect_timeout
        self.reconnects = 0  # connections lost and made again (for tests and stats)
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None
        self._listening = threading.Event()  # set while a connection is in LISTEN

    def __repr__(self) -> str:
        return f"PostgresWakeup({redact(self.conninfo)!r})"

    def _connect(self) -> Any:
        pg = psycopg()
        return pg.connect(
            self.conninfo, autocommit=True, connect_timeout=max(1, int(self.connect_timeout))
        )

    def notify_now(self) -> None:
        """`notify` on the calling thread (one short connection); never raises."""
        try:
            with self._connect() as conn:
                conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        except Exception as exc:
            log.debug("wakeup: could not notify: %s", exc)

    async def notify(self) -> None:
        """Wake every listener on this database (best effort: never raises)."""
        await asyncio.to_thread(self.notify_now)

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on the listener thread for every notification; returns the remover."""
        with self._lock:
            token = next(self._ids)
            self._callbacks[token] = callback
            if self._thread is None:
                self._stop = stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(stop,), name="contextwright-pg-listen", daemon=True
                )
                self._thread.start()

        def remove() -> None:
            self._remove(token)

        return remove

    def wait_listening(self, timeout: float) -> bool:
        """True once the listener's connection is in LISTEN (tests use it before notifying)."""
        return self._listening.wait(timeout)

    def _remove(self, token: int) -> None:
        with self._lock:
            self._callbacks.pop(token, None)
            if self._callbacks or self._thread is None:
                return
            thread, stop = self._thread, self._stop
            self._thread = self._stop = None
        assert stop is not None
        stop.set()
        if thread is not threading.current_thread():
            thread.join(_WAIT * 4)

    def close(self) -> None:
        """Stop listening for every callback (the thread ends within about half a second)."""
        with self._lock:
            tokens = list(self._callbacks)
        for token in tokens:
            self._remove(token)

    def _call(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a listener's bug must not stop the others
                log.exception("wakeup: a callback failed")

    def _run(self, stop: threading.Event) -> None:
        """The listener thread: LISTEN, dispatch, reconnect after a lost connection."""
        backoff = 0.1
        lost = False
        while not stop.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    backoff = 0.1
                    if lost:  # signals sent while we were away are gone: look once
                        self.reconnects += 1
                        lost = False
                        self._call()
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=_WAIT):
                            self._call()
            except Exception as exc:
                self._listening.clear()
                if stop.is_set():
                    break
                lost = True
                log.warning(
                    "wakeup: listener connection lost (%s); reconnecting in %.1f s",
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    backoff,
                )
                stop.wait(backoff)
                backoff = min(_MAX_BACKOFF, backoff * 2)
        self._listening.clear()
