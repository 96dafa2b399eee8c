"""Redis for many workers: the shared block cache and the job wake-up.

Needs the ``redis`` extra (redis-py). `RedisCache` implements the `Cache` contract
(entries with TTL and tags, invalidations published to every process, a small
local layer in front, and a circuit breaker so a Redis that is away never fails
a build); `RedisWakeup` implements `Wakeup` with pub/sub. Select the cache by URL:
``ContextEngine(cache="redis://127.0.0.1:6379/0")`` or `RedisCache.from_url`.
"""

from ._cache import RedisCache
from ._client import is_redis_url, redact
from ._wakeup import RedisWakeup

__all__ = ["RedisCache", "RedisWakeup", "is_redis_url", "redact"]
