"""`RedisWakeup`: the job wake-up over Redis pub/sub, for workers in many processes.

`notify` publishes on a channel (default ``cw:jobs``); `listen` starts one listener
thread (shared by every callback of this object) that calls each callback on every
message, from any process. The signal is only a hint (runners poll anyway), so
nothing here ever raises into a caller: a publish that fails is dropped, and Redis
is then skipped for ``retry_after`` seconds. When the listener's connection comes
back after a drop, every callback is called once, because a signal may have been
missed meanwhile and a spurious wake-up costs one look at the queue.

`notify` publishes from the event loop's thread: one round trip, sub-millisecond
on a LAN, at most ``timeout`` seconds when Redis stalls (once per ``retry_after``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._errors import ConfigError
from ._client import Breaker, Listener, connect

__all__ = ["RedisWakeup"]


class RedisWakeup:
    """A `Wakeup` over Redis pub/sub: ``RedisWakeup("redis://127.0.0.1:6379/0")``."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        channel: str = "cw:jobs",
        db: int | None = None,
        timeout: float = 0.25,
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(channel, str) or not channel:
            raise ConfigError(f"channel must be a non-empty string, got {channel!r}")
        self._url, self._db, self._timeout = url, db, timeout
        self._redis = connect(url, db=db, timeout=timeout)
        self.channel = channel
        self._breaker = Breaker(retry_after, clock)
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._listener: Listener | None = None
        self._was_live = False

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> RedisWakeup:
        return cls(url, **kw)

    async def notify(self) -> None:
        """Publish a wake-up (best effort: a failure is dropped, never raised)."""
        self.notify_sync()

    def notify_sync(self) -> None:
        """`notify` for threads without an event loop."""
        if not self._breaker.allow():
            return
        try:
            self._redis.publish(self.channel, b"1")
        except Exception as exc:
            self._breaker.failed(exc)
        else:
            self._breaker.ok()

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every notify, from the listener thread; returns the stop."""
        if not callable(callback):
            raise ConfigError("callback must be callable")
        with self._lock:
            self._callbacks.append(callback)
            if self._listener is None:
                sub = connect(
                    self._url, db=self._db, timeout=max(self._timeout, 5.0), health_check_interval=2
                )
                self._listener = Listener(
                    sub, [self.channel], self._fire, on_live=self._on_live,
                    name="contextwright-redis-wakeup",
                )  # fmt: skip
        done = False

        def stop() -> None:
            nonlocal done
            with self._lock:
                if done:
                    return
                done = True
                self._callbacks.remove(callback)
                listener = self._listener if not self._callbacks else None
                if listener is not None:
                    self._listener = None
                    self._was_live = False
            if listener is not None:
                listener.stop()

        return stop

    def wait_listening(self, timeout: float | None = None) -> bool:
        """Block until this process hears notifies (True), or ``timeout`` passes (False)."""
        listener = self._listener
        return listener is not None and listener.wait_live(timeout)

    @property
    def unavailable(self) -> str | None:
        """Why the last publish failed, or None."""
        return self._breaker.last_error

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            self._callbacks.clear()
        if listener is not None:
            listener.stop()
        self._redis.close()

    def _on_live(self) -> None:
        if self._was_live:  # back after a drop: a signal may have been missed
            self._fire_all()
        self._was_live = True

    def _fire(self, _channel: str, _data: bytes) -> None:
        self._fire_all()

    def _fire_all(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            with contextlib.suppress(Exception):
                cb()
