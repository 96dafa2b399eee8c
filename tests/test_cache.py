"""The in-process cache: TTL, tags across namespaces, LRU bound, statistics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextwright import Cache, ConfigError, MemoryCache, cache_namespace, user_memory_tag


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_ttl_expiry_with_injected_clock():
    clock = Clock()
    c = MemoryCache(clock=clock)
    c.set("t/c", "k", "v", ttl=60)
    assert c.get("t/c", "k") == "v"
    clock.t += 59.9
    assert c.get("t/c", "k") == "v"
    clock.t += 0.2
    assert c.get("t/c", "k") is None
    assert c.stats.expired == 1
    assert c.stats.hits == 2
    assert c.stats.misses == 1


def test_zero_ttl_stores_nothing():
    c = MemoryCache()
    c.set("n", "k", 1, ttl=0)
    assert c.get("n", "k") is None


def test_namespaces_are_separate():
    c = MemoryCache()
    c.set("tenantA/conv1", "user_memory", "A", ttl=60)
    assert c.get("tenantB/conv1", "user_memory") is None
    assert c.get("tenantA/conv2", "user_memory") is None


def test_tag_invalidation_cuts_across_namespaces():
    c = MemoryCache()
    c.set("t/c1", "m", 1, ttl=60, tags={"user_memory:t/u"})
    c.set("t/c2", "m", 2, ttl=60, tags={"user_memory:t/u"})
    c.set("t/c3", "m", 3, ttl=60, tags={"user_memory:t/other"})
    assert c.invalidate(tags=["user_memory:t/u"]) == 2
    assert c.get("t/c1", "m") is None
    assert c.get("t/c3", "m") == 3


def test_namespace_invalidation_and_clear():
    c = MemoryCache()
    c.set("a", "1", 1, ttl=60)
    c.set("a", "2", 2, ttl=60)
    c.set("b", "1", 3, ttl=60)
    assert c.invalidate(namespace="a") == 2
    assert len(c) == 1
    c.clear()
    assert len(c) == 0


def test_lru_bound():
    c = MemoryCache(maxsize=2)
    c.set("n", "a", 1, ttl=60)
    c.set("n", "b", 2, ttl=60)
    assert c.get("n", "a") == 1  # a is now the most recent
    c.set("n", "c", 3, ttl=60)
    assert c.get("n", "b") is None
    assert c.get("n", "a") == 1
    assert c.stats.evicted == 1


def test_bad_maxsize():
    with pytest.raises(ConfigError):
        MemoryCache(maxsize=0)


def test_protocol():
    assert isinstance(MemoryCache(), Cache)


@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from("xyz"), st.sampled_from(["t1", "t2"])),
        max_size=30,
    )
)
def test_invalidated_tags_never_come_back(ops):
    c = MemoryCache()
    for ns, key, tag in ops:
        c.set(ns, key, (ns, key), ttl=60, tags={tag})
    c.invalidate(tags=["t1"])
    for ns, key, _tag in ops:
        v = c.get(ns, key)
        assert v is None or v == (ns, key)
    # no entry tagged t1 survives
    assert all(("t1" not in e.tags) for e in c._entries.values())


_ID = st.text(alphabet=st.sampled_from("ab/:%2F"), max_size=5)


@given(
    st.lists(_ID, min_size=1, max_size=4),
    st.lists(_ID, min_size=1, max_size=4),
    st.tuples(_ID, _ID),
    st.tuples(_ID, _ID),
)
def test_cache_namespace_names_one_tuple_of_ids(a, b, ta, tb):
    # joining with "/" made ("t", "u", "u/z") and ("t/u", "u", "z") one namespace
    assert (cache_namespace(*a) == cache_namespace(*b)) == (a == b)
    assert (user_memory_tag(*ta) == user_memory_tag(*tb)) == (ta == tb)


def test_plain_ids_read_as_before():
    assert cache_namespace("acme", "u1", "c1") == "acme/u1/c1"
    assert user_memory_tag("acme", "u1") == "user_memory:acme/u1"
    assert cache_namespace("t", "u", "u/z") != cache_namespace("t/u", "u", "z")
    assert user_memory_tag("t", "u/v") != user_memory_tag("t/u", "v")
    assert user_memory_tag("t:u", "v") != user_memory_tag("t", "u:v")
