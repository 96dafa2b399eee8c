"""`RedisCache`: the block cache shared by every worker, with a small local layer in front.

Layout, under a key prefix (default ``cw:``) so several apps share one Redis:

- ``{prefix}e:{namespace}:{key}`` the entry: the pickled ``(value, tags)``, expiring
  with the entry's TTL (``PX``). ``%`` and ``:`` in the namespace are escaped, so
  the first ``:`` after it ends it and (namespace, key) pairs never collide.
- ``{prefix}t:{tag}`` and ``{prefix}n:{namespace}``: sets of entry keys, for
  invalidation, expiring with the longest-lived entry they hold.
- ``{prefix}invalidate``: the pub/sub channel invalidations are announced on.

`set` and `invalidate` are Lua scripts, one round trip and atomic. A single Redis
(or a primary), not Redis Cluster: the scripts touch keys they are not given.
Values are pickled, so the Redis must be trusted like the database is.

The local layer (``local`` entries, each kept at most ``local_ttl`` seconds) is a
`MemoryCache` filled by gets and sets. It is used only while this cache's
listener is subscribed to the channel: every invalidation, by any process, is
published and drops the matching local entries when it arrives (the process that
invalidates drops its own at once); when the subscription drops, the local layer
is emptied and bypassed until it is back, since messages may have been missed.
Each listener acknowledges every invalidation it applied (on the invalidator's
``{prefix}ack:{id}`` channel), and `invalidate` returns once as many acks came as
PUBLISH reported listeners, or after ``ack_timeout`` seconds (a stalled process).
So when `invalidate` returns, no live process serves what it dropped: a get
anywhere afterwards misses. A process that did not ack in time serves its local
copy at most ``local_ttl`` seconds. ``local=0`` makes every get ask Redis (the
cache then listens for acks only).

Redis away: every call has a short socket timeout (``timeout``), and after a
failure Redis is skipped for ``retry_after`` seconds (gets miss, sets are
dropped). `unavailable` then holds the reason, and the engine writes it into the
build's receipt. An invalidation that cannot reach Redis is remembered (tags and
namespaces; more than 1,000 of them, or a `clear`, become "everything") and
replayed before Redis serves anything again, so an entry invalidated while Redis
was away is never served after it comes back.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ..._errors import ConfigError
from .._cache import CacheStats, MemoryCache
from ._client import Breaker, Listener, connect

__all__ = ["RedisCache"]

_MAX_PENDING = 1000

# KEYS: the entry, then the sets to add it to (tags, namespace). ARGV: value, ttl (ms).
_SET = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local ttl = tonumber(ARGV[2])
for i = 2, #KEYS do
  redis.call('SADD', KEYS[i], KEYS[1])
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
"""

# KEYS: sets of entry keys. Deletes every entry they name, then the sets; returns how
# many entries existed.
_INVALIDATE = """
local n = 0
for i = 1, #KEYS do
  local members = redis.call('SMEMBERS', KEYS[i])
  for j = 1, #members, 1000 do
    n = n + redis.call('DEL', unpack(members, j, math.min(j + 999, #members)))
  end
  redis.call('DEL', KEYS[i])
end
return n
"""


def _ns(namespace: str) -> str:
    return namespace.replace("%", "%25").replace(":", "%3A")


class RedisCache:
    """A `Cache` in Redis, shared by every process using the same URL, db and prefix."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "cw:",
        db: int | None = None,
        timeout: float = 0.25,
        retry_after: float = 5.0,
        local: int = 1024,
        local_ttl: float = 2.0,
        ack_timeout: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigError(f"prefix must be a non-empty string, got {prefix!r}")
        if not isinstance(local, int) or isinstance(local, bool) or local < 0:
            raise ConfigError(f"local must be a non-negative int, got {local!r}")
        if not isinstance(ack_timeout, (int, float)) or ack_timeout < 0:
            raise ConfigError(f"ack_timeout must be >= 0 seconds, got {ack_timeout!r}")
        if not isinstance(local_ttl, (int, float)) or not local_ttl > 0:
            raise ConfigError(f"local_ttl must be a positive number of seconds, got {local_ttl!r}")
        self._redis = connect(url, db=db, timeout=timeout)
        self.prefix = prefix
        self.channel = prefix + "invalidate"
        self.stats = CacheStats()
        self._breaker = Breaker(retry_after, clock)
        self._set = self._redis.register_script(_SET)
        self._invalidate = self._redis.register_script(_INVALIDATE)
        self._lock = threading.Lock()
        self._pending: set[tuple[str, str]] | None = set()  # None: "everything"
        self._origin = uuid.uuid4().hex
        self._local_ttl = float(local_ttl)
        self._local = MemoryCache(maxsize=local) if local else None
        self._generation = 0  # moved by every invalidation this process makes or hears of
        self._ack_timeout = float(ack_timeout)
        self._ack_channel = f"{prefix}ack:{self._origin}"
        self._acks: dict[str, int] = {}
        self._acked = threading.Condition()
        channels = [self._ack_channel] + ([self.channel] if self._local is not None else [])
        sub = connect(url, db=db, timeout=max(timeout, 5.0), health_check_interval=2)
        self._listener: Listener | None = Listener(
            sub, channels, self._heard, on_live=self._drop_local, on_lost=self._drop_local
        )
        self._listener.wait_live(timeout)  # usually at once; a Redis away costs ``timeout``

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> RedisCache:
        """``RedisCache.from_url("redis://host:6379/0", prefix="app:")``."""
        return cls(url, **kw)

    # -- the Cache contract ----------------------------------------------------------

    def get(self, namespace: str, key: str) -> Any | None:
        local = self._local_layer()
        if local is not None:
            with self._lock:
                hit = local.get(namespace, key)
            if hit is not None:
                self.stats.hits += 1
                return hit[0]
        generation = self._generation
        raw = self._call(lambda: self._read(namespace, key))
        if raw is None or raw[0] is None:
            self.stats.misses += 1
            return None
        payload, ttl_ms = raw
        try:
            value, tags = pickle.loads(payload)
        except Exception:  # written by something else under our prefix: a miss
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        self._keep_local(generation, namespace, key, value, tags, ttl_ms / 1000)
        return value

    def set(
        self, namespace: str, key: str, value: Any, *, ttl: float, tags: Iterable[str] = ()
    ) -> None:
        if ttl <= 0:
            return
        tags = tuple(dict.fromkeys(tags))
        for tag in tags:
            if not isinstance(tag, str):
                raise ConfigError(f"cache tags must be strings, got {type(tag).__name__}")
        generation = self._generation
        payload = pickle.dumps((value, tags), protocol=pickle.HIGHEST_PROTOCOL)
        ms = max(1, int(ttl * 1000))
        entry = self._entry(namespace, key)
        keys = [entry, *(self.prefix + "t:" + t for t in tags), self.prefix + "n:" + _ns(namespace)]
        if self._call(lambda: self._set(keys=keys, args=[payload, ms])) is None:
            return
        self.stats.sets += 1
        self._keep_local(generation, namespace, key, value, tags, ttl)

    def invalidate(self, *, tags: Iterable[str] = (), namespace: str | None = None) -> int:
        targets = [("t", t) for t in tags]
        if namespace is not None:
            targets.append(("n", namespace))
        if not targets:
            return 0
        self._forget_locally(targets)
        n = self._call(lambda: self._drop(targets))
        if n is None:  # Redis away: replay it before Redis serves anything again
            with self._lock:
                if self._pending is not None:
                    self._pending.update(targets)
                    if len(self._pending) > _MAX_PENDING:
                        self._pending = None
            return 0
        self.stats.invalidated += n
        return int(n)

    def clear(self) -> None:
        self._forget_locally(None)
        if self._call(self._clear) is None:
            with self._lock:
                self._pending = None

    # -- health ----------------------------------------------------------------------

    @property
    def unavailable(self) -> str | None:
        """Why Redis is being skipped (the last call failed), or None while it answers.

        The engine checks this attribute after fetching and notes it in the receipt.
        """
        return self._breaker.last_error

    def wait_listening(self, timeout: float | None = None) -> bool:
        """Block until invalidations from other processes reach this one (True if they do)."""
        return self._listener is not None and self._listener.wait_live(timeout)

    def close(self) -> None:
        """Stop listening, drop the local layer, close the connections."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        self._drop_local()
        self._redis.close()

    # -- inside ----------------------------------------------------------------------

    def _entry(self, namespace: str, key: str) -> str:
        return f"{self.prefix}e:{_ns(namespace)}:{key}"

    def _read(self, namespace: str, key: str) -> tuple[bytes | None, int]:
        pipe = self._redis.pipeline(transaction=False)
        entry = self._entry(namespace, key)
        pipe.get(entry)
        pipe.pttl(entry)
        payload, ttl_ms = pipe.execute()
        return payload, int(ttl_ms)

    def _call(self, fn: Callable[[], Any]) -> Any | None:
        """``fn()`` against Redis, or None if Redis is being skipped or fails now."""
        if not self._breaker.allow():
            return None
        try:
            if self._pending != set():
                self._replay()
            out = fn()
        except Exception as exc:  # redis errors, timeouts, refused connections
            self._breaker.failed(exc)
            self._drop_local()
            return None
        self._breaker.ok()
        return out

    def _replay(self) -> None:
        """Apply the invalidations Redis missed while away (raises if it still is away)."""
        with self._lock:
            pending, self._pending = self._pending, set()
        try:
            if pending is None:
                self._clear()
            elif pending:
                self._drop(sorted(pending))
        except Exception:
            with self._lock:  # not applied: keep them (with any added meanwhile)
                if pending is None or self._pending is None:
                    self._pending = None
                else:
                    self._pending |= pending
            raise

    def _drop(self, targets: list[tuple[str, str]]) -> int:
        keys = [self.prefix + kind + ":" + (_ns(v) if kind == "n" else v) for kind, v in targets]
        n = int(self._invalidate(keys=keys))
        tags = [v for k, v in targets if k == "t"]
        self._publish({"t": tags, "n": [v for k, v in targets if k == "n"]})
        return n

    def _clear(self) -> None:
        pattern = "".join("\\" + c if c in "*?[]\\^" else c for c in self.prefix) + "*"
        batch: list[bytes] = []
        for k in self._redis.scan_iter(match=pattern, count=1000):
            batch.append(k)
            if len(batch) >= 1000:
                self._redis.unlink(*batch)
                batch = []
        if batch:
            self._redis.unlink(*batch)
        self._publish({"all": True})

    def _publish(self, message: dict[str, Any]) -> None:
        """Announce an invalidation; wait (``ack_timeout`` at most) until every listener applied it."""
        mid = uuid.uuid4().hex
        message.update(o=self._origin, i=mid)
        with self._acked:
            self._acks[mid] = 0
        try:
            listeners = int(self._redis.publish(self.channel, json.dumps(message)))
            if not (listeners and self._listener is not None and self._listener.live):
                return  # nobody to wait for, or our acks cannot reach us
            deadline = time.monotonic() + self._ack_timeout
            with self._acked:
                while self._acks[mid] < listeners:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._acked.wait(left)
        finally:
            with self._acked:
                del self._acks[mid]

    # -- the local layer -------------------------------------------------------------

    def _local_layer(self) -> MemoryCache | None:
        listener = self._listener
        if self._local is None or listener is None or not listener.live:
            return None
        if self._breaker.last_error is not None:
            return None
        return self._local

    def _keep_local(
        self, generation: int, ns: str, key: str, value: Any, tags: Iterable[str], ttl: float
    ) -> None:
        local = self._local_layer()
        if local is None or ttl <= 0:
            return
        with self._lock:
            # an invalidation heard since the value was read may concern it: keep nothing
            if generation == self._generation:
                local.set(ns, key, (value,), ttl=min(ttl, self._local_ttl), tags=tags)

    def _forget_locally(self, targets: list[tuple[str, str]] | None) -> None:
        with self._lock:
            self._generation += 1
            if self._local is None:
                return
            if targets is None:
                self._local.clear()
                return
            tags = [v for k, v in targets if k == "t"]
            namespaces = [v for k, v in targets if k == "n"]
            self._local.invalidate(tags=tags)
            for ns in namespaces:
                self._local.invalidate(namespace=ns)

    def _drop_local(self) -> None:
        self._forget_locally(None)

    def _heard(self, channel: str, data: bytes) -> None:
        if channel == self._ack_channel:
            mid = data.decode()
            with self._acked:
                if mid in self._acks:
                    self._acks[mid] += 1
                    self._acked.notify_all()
            return
        message = json.loads(data)
        if message.get("o") != self._origin:  # ours were dropped already
            if message.get("all"):
                self._forget_locally(None)
            else:
                targets = [("t", t) for t in message.get("t", ())]
                targets += [("n", n) for n in message.get("n", ())]
                self._forget_locally(targets)
        self._redis.publish(f"{self.prefix}ack:{message['o']}", message["i"])
