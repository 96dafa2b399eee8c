"""The Redis block cache: the `Cache` contract on a real Redis, keys, config, a missing extra.

The contract tests run on `MemoryCache` and `RedisCache` alike (with and without
the local layer); each Redis cache has a key prefix of its own on the shared
server, and every key it leaves is removed by the fixture.
"""

from __future__ import annotations

import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Block, Cache, ConfigError, MemoryCache, MissingDependencyError
from contextwright.stores._cache import cache_namespace, open_cache
from contextwright.stores.redis import RedisCache, redact
from tests.rediskit import shared_url, unique_prefix


def _redis(local: int) -> RedisCache:
    cache = RedisCache(shared_url(), prefix=unique_prefix(), local=local)
    assert cache.wait_listening(10)
    return cache


@pytest.fixture(params=["memory", "redis", "redis-local"])
def cache(request):
    if request.param == "memory":
        yield MemoryCache()
        return
    c = _redis(1024 if request.param == "redis-local" else 0)
    yield c
    c.clear()
    c.close()


def test_protocol(cache):
    assert isinstance(cache, Cache)


def test_get_set_and_stats(cache):
    blocks = (Block("user_memory", "likes green tea 喜欢绿茶", 1, tags=frozenset({"x"})),)
    assert cache.get("t/u/c", "user_memory:") is None
    cache.set("t/u/c", "user_memory:", blocks, ttl=60, tags={"user_memory:t/u"})
    assert cache.get("t/u/c", "user_memory:") == blocks
    assert cache.get("t/u/c", "user_memory:") == blocks
    assert (cache.stats.hits, cache.stats.misses, cache.stats.sets) == (2, 1, 1)
    cache.set("t/u/c", "empty", (), ttl=60)
    assert cache.get("t/u/c", "empty") == ()


def test_zero_ttl_stores_nothing(cache):
    cache.set("n", "k", 1, ttl=0)
    cache.set("n", "k", 1, ttl=-5)
    assert cache.get("n", "k") is None


def test_namespaces_are_separate(cache):
    cache.set("tenantA/conv1", "user_memory", "A", ttl=60)
    assert cache.get("tenantB/conv1", "user_memory") is None
    assert cache.get("tenantA/conv2", "user_memory") is None
    # a namespace with ":" never reads as another namespace plus a key
    cache.set("a:b", "c", "one", ttl=60)
    assert cache.get("a", "b:c") is None
    cache.set("a", "b:c", "two", ttl=60)
    assert cache.get("a:b", "c") == "one"


def test_tag_invalidation_cuts_across_namespaces(cache):
    cache.set("t/c1", "m", 1, ttl=60, tags={"user_memory:t/u"})
    cache.set("t/c2", "m", 2, ttl=60, tags={"user_memory:t/u", "other"})
    cache.set("t/c3", "m", 3, ttl=60, tags={"user_memory:t/other"})
    assert cache.invalidate(tags=["user_memory:t/u"]) == 2
    assert cache.get("t/c1", "m") is None
    assert cache.get("t/c2", "m") is None
    assert cache.get("t/c3", "m") == 3
    assert cache.invalidate(tags=["user_memory:t/u"]) == 0
    assert cache.invalidate() == 0


def test_namespace_invalidation_and_clear(cache):
    cache.set("a", "1", 1, ttl=60)
    cache.set("a", "2", 2, ttl=60, tags={"t"})
    cache.set("b", "1", 3, ttl=60)
    assert cache.invalidate(namespace="a") == 2
    assert cache.get("a", "2") is None
    assert cache.get("b", "1") == 3
    cache.clear()
    assert cache.get("b", "1") is None


@pytest.mark.parametrize("local", [0, 1024])
def test_ttl_expiry_in_redis(local):
    c = _redis(local)
    try:
        c.set("n", "short", "v", ttl=0.05, tags={"t"})
        c.set("n", "long", "w", ttl=60, tags={"t"})
        assert c.get("n", "short") == "v"
        time.sleep(0.1)  # a real TTL: nothing to wait on but the clock
        assert c.get("n", "short") is None
        assert c.get("n", "long") == "w"
        # the tag set lives as long as its longest-lived entry
        assert 50_000 < c._redis.pttl(c.prefix + "t:t") <= 60_000
    finally:
        c.clear()
        c.close()


def test_keys_live_under_the_prefix_and_clear_removes_them_all():
    c, other = _redis(0), _redis(0)
    try:
        c.set("t/u/c", "k", 1, ttl=60, tags={"tag"})
        other.set("t/u/c", "k", 2, ttl=60, tags={"tag"})
        keys = {k.decode() for k in c._redis.scan_iter(match=c.prefix + "*")}
        assert keys == {c.prefix + "e:t/u/c:k", c.prefix + "t:tag", c.prefix + "n:t/u/c"}
        assert c.invalidate(tags=["tag"]) == 1  # another prefix's entries stay
        assert other.get("t/u/c", "k") == 2
        c.set("x", "k", 1, ttl=60)
        c.clear()
        assert not list(c._redis.scan_iter(match=c.prefix + "*"))
        assert other.get("t/u/c", "k") == 2
    finally:
        other.clear()
        other.close()
        c.close()


def test_a_prefix_with_glob_characters_clears_only_itself():
    c = RedisCache(shared_url(), prefix=unique_prefix() + "[*]", local=0)
    twin = RedisCache(shared_url(), prefix=c.prefix.replace("[*]", "[x]"), local=0)
    try:
        c.set("n", "k", 1, ttl=60)
        twin.set("n", "k", 2, ttl=60)
        c.clear()
        assert twin.get("n", "k") == 2
        left = [k for k in c._redis.scan_iter(match="cwtest:*") if k.decode().startswith(c.prefix)]
        assert left == []
    finally:
        twin.clear()
        twin.close()
        c.close()


_ID = st.text(alphabet=st.sampled_from("ab/:%2F"), max_size=4)


def test_no_cross_tenant_leak():
    c = _redis(0)

    @settings(max_examples=40)
    @given(st.lists(st.tuples(st.tuples(_ID, _ID, _ID), _ID), min_size=1, max_size=6))
    def every_tuple_reads_its_own(entries):
        # every (tenant, user, conversation) and key reads back its own value only
        latest = {}
        for ids, key in entries:
            ns = cache_namespace(*ids)
            c.set(ns, key, (ids, key), ttl=60)
            latest[(ns, key)] = (ids, key)
        for (ns, key), value in latest.items():
            assert c.get(ns, key) == value

    try:
        every_tuple_reads_its_own()
    finally:
        c.clear()
        c.close()


def test_invalidated_tags_never_come_back():
    c = _redis(1024)

    @settings(max_examples=30)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from("abc"), st.sampled_from("xyz"), st.sampled_from(["t1", "t2"])
            ),
            max_size=20,
        )
    )
    def check(ops):
        c.clear()
        for ns, key, tag in ops:
            c.set(ns, key, (ns, key, tag), ttl=60, tags={tag})
        c.invalidate(tags=["t1"])
        for ns, key, _tag in ops:
            v = c.get(ns, key)
            assert v is None or v == (ns, key, "t2")
        left = list(c._redis.sscan_iter(c.prefix + "t:t1"))
        assert left == []

    try:
        check()
    finally:
        c.clear()
        c.close()


def test_local_layer_serves_without_redis_and_drops_own_invalidations():
    c = _redis(1024)
    try:
        c.set("n", "k", "v", ttl=60, tags={"t"})
        c._redis.delete(c._entry("n", "k"))  # behind its back: the local copy still answers
        assert c.get("n", "k") == "v"
        c.set("n", "k", "v", ttl=60, tags={"t"})
        assert c.invalidate(tags=["t"]) == 1
        assert c.get("n", "k") is None
    finally:
        c.clear()
        c.close()


def test_engine_takes_a_redis_url():
    from contextwright import ContextEngine

    engine = ContextEngine(cache=shared_url())
    assert isinstance(engine.cache, RedisCache)
    assert engine.cache.wait_listening(10)
    engine.close()
    assert not engine.cache.wait_listening(0)
    assert isinstance(open_cache(None), MemoryCache)
    with pytest.raises(ConfigError, match="cache"):
        ContextEngine(cache="memcached://x")


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"prefix": ""}, "prefix"),
        ({"local": -1}, "local"),
        ({"local_ttl": 0}, "local_ttl"),
        ({"timeout": 0}, "timeout"),
        ({"retry_after": -1}, "retry_after"),
        ({"db": -1}, "db"),
    ],
)
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        RedisCache(shared_url(), **kw)


def test_bad_url_and_no_password_in_messages():
    with pytest.raises(ConfigError, match="url"):
        RedisCache("http://127.0.0.1:6379")
    url = "redis://user:s3cret@127.0.0.1:1/0"
    assert "s3cret" not in redact(url)
    c = RedisCache(url, local=0, timeout=0.05)
    assert c.get("n", "k") is None
    assert c.unavailable
    assert "s3cret" not in c.unavailable
    c.close()


def test_missing_redis_package_names_the_extra(monkeypatch):
    from contextwright.stores.redis._client import redis_module

    monkeypatch.setitem(sys.modules, "redis", None)  # what `import redis` sees without it
    with pytest.raises(MissingDependencyError, match="redis"):
        redis_module()
    with pytest.raises(MissingDependencyError, match=r"contextwright\[redis\]"):
        RedisCache(shared_url())
