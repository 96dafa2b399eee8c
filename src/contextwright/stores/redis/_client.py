"""Talking to Redis: URL checks, short-timeout clients, a circuit breaker, a pub/sub listener.

Everything the Redis cache and wake-up share. The ``redis`` package is imported
on first use (`redis_module`), so ``import contextwright`` works without it; its
absence is a `MissingDependencyError` naming the ``redis`` extra.

Redis is an accelerator here, never the source of truth, so a Redis that is away
must cost a build almost nothing: clients are made with a short socket timeout and
no retries (`connect`), and a `Breaker` skips Redis for ``retry_after`` seconds
after a failure, so a dead server costs one timeout per period, not one per call.

`Listener` is the one thread per subscriber: it subscribes to channels, hands
each message (channel, data) to a callback, and reconnects (with a growing pause, up to 2 s) when
the connection drops. It reports when the subscription is live and when it is
lost, because what was published meanwhile was missed: the cache drops its local
layer then, the wake-up wakes its runners once.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..._errors import ConfigError, MissingDependencyError

__all__ = ["Breaker", "Listener", "connect", "is_redis_url", "redact", "redis_module"]

_SCHEMES = ("redis://", "rediss://", "unix://")


def redis_module() -> ModuleType:
    """The ``redis`` package, or a `MissingDependencyError` naming the ``redis`` extra."""
    try:
        return importlib.import_module("redis")
    except ImportError as exc:
        raise MissingDependencyError("redis", "redis", "the Redis cache and wake-up") from exc


def is_redis_url(url: object) -> bool:
    """True for ``redis://…``, ``rediss://…`` and ``unix://…`` (what selects Redis)."""
    return isinstance(url, str) and url.lower().startswith(_SCHEMES)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "<unparseable url>"
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def connect(
    url: object, *, db: int | None, timeout: float, field: str = "url", **extra: Any
) -> Any:
    """A `redis.Redis` for ``url``: ``timeout`` seconds per connect and per reply, no retries.

    A malformed URL, a bad ``db`` or ``timeout`` is a `ConfigError` naming ``field``.
    No connection is made here (the first command makes it).
    """
    if not is_redis_url(url):
        raise ConfigError(f"{field}: expected a redis://… URL, got {url!r:.80}")
    assert isinstance(url, str)
    if db is not None and (not isinstance(db, int) or isinstance(db, bool) or db < 0):
        raise ConfigError(f"db must be a non-negative int, got {db!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    redis = redis_module()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kw: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_timeout": False,
        **extra,
    }
    if db is not None:
        kw["db"] = db
    try:
        return redis.Redis.from_url(url, **kw)
    except ValueError as exc:
        msg = str(exc).replace(url, redact(url))
        raise ConfigError(f"{field}: malformed Redis URL {redact(url)}: {msg}") from None


class Breaker:
    """Skip Redis for ``retry_after`` seconds after a failure, then try again.

    `allow` says whether to call Redis now; `failed` opens the breaker and keeps
    the reason (never a password: Redis errors carry host and port only); `ok`
    closes it. `last_error` is the reason while the last call failed, else None.
    """

    def __init__(self, retry_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(retry_after, (int, float)) or retry_after < 0:
            raise ConfigError(f"retry_after must be >= 0 seconds, got {retry_after!r}")
        self.retry_after = float(retry_after)
        self.clock = clock
        self.last_error: str | None = None
        self._open_until = 0.0

    def allow(self) -> bool:
        return self.last_error is None or self.clock() >= self._open_until

    def failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._open_until = self.clock() + self.retry_after

    def ok(self) -> None:
        self.last_error = None


class Listener:
    """A daemon thread subscribed to ``channels``: messages to ``on_message``, reconnecting.

    ``on_live`` runs each time a subscription is confirmed (the first and after every
    reconnect), ``on_lost`` each time the connection drops; callbacks run on the
    listener thread and must not raise (what they raise is swallowed). `stop` ends
    the thread and closes its connection.
    """

    def __init__(
        self,
        client: Any,
        channels: list[str],
        on_message: Callable[[str, bytes], None],
        *,
        on_live: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
        name: str = "contextwright-redis-listener",
    ) -> None:
        self.channels = list(channels)
        self._client = client
        self._on_message, self._on_live, self._on_lost = on_message, on_live, on_lost
        self._stop = threading.Event()
        self._live = threading.Event()
        self._pubsub: Any = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def live(self) -> bool:
        """True while the subscription is confirmed and the connection up."""
        return self._live.is_set()

    def wait_live(self, timeout: float | None = None) -> bool:
        """Block until the subscription is live (or ``timeout`` passes); True if it is."""
        return self._live.wait(timeout)

    def stop(self) -> None:
        """End the thread: its blocking read is woken by shutting its socket down."""
        self._stop.set()
        pubsub = self._pubsub
        conn = getattr(pubsub, "connection", None)
        sock = getattr(conn, "_sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        pause = 0.05
        while not self._stop.is_set():
            try:
                self._session()
                pause = 0.05
            except Exception:  # connection refused, reset, timed out: try again later
                pass
            finally:
                if self._live.is_set():
                    self._live.clear()
                    _quietly(self._on_lost)
                self._close()
            if self._stop.wait(pause):
                break
            pause = min(pause * 2, 2.0)

    def _session(self) -> None:
        self._pubsub = pubsub = self._client.pubsub()
        pubsub.subscribe(*self.channels)
        confirmed = 0
        while not self._stop.is_set():
            msg = pubsub.get_message(timeout=0.5)
            if msg is None:
                continue
            if msg["type"] == "subscribe":
                confirmed += 1
                if confirmed == len(self.channels):
                    self._live.set()
                    _quietly(self._on_live)
            elif msg["type"] == "message":
                channel = msg["channel"]
                channel = channel.decode() if isinstance(channel, bytes) else channel
                _quietly(self._on_message, channel, msg["data"])

    def _close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                pubsub.close()


def _quietly(fn: Callable[..., object], *args: Any) -> None:
    with contextlib.suppress(Exception):
        fn(*args)
