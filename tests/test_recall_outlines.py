"""Recall's cache of outlines: it saves store reads and never changes what is recalled.

The default recall keeps the outlines of the messages it read around past hits
(stored messages never change) and tells the store which ones it holds, so the
store reads only the rest. These check, on a real SQLite file, that any cache
size — none, one so small it evicts on every build, the default — recalls the
same blocks for the same messages; that the store's ``known`` leaves exactly
those outlines unread; that an entry evicted while the store was being asked
(another build on another thread) makes recall ask again instead of ranking
with a hole; and that the cache stays within its byte bound.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextwright import ConfigError, HeuristicCounter, Message
from contextwright.history import RecallSource
from contextwright.sources import Turn
from contextwright.stores import AsyncStore, SQLiteStore

T = "acme"
WORDS = [
    "kitten",
    "cello",
    "basil",
    "trail",
    "recital",
    "pesto",
    "garden",
    "river",
    "lantern",
    "violin",
    "harbour",
    "quilt",
]
DAY = 86_400.0
T0 = 1_700_000_000.0


def conversation(n: int, seed: int = 7) -> list[Message]:
    """Named turns over several days, with tool calls, tool results and blanks between."""
    rng = random.Random(seed)
    out: list[Message] = []
    at = T0
    for i in range(n):
        at += rng.choice((30.0, 60.0, 5_000.0, DAY))  # long silences start new sessions
        text = " ".join(rng.choices(WORDS, k=rng.randint(2, 9)))
        kind = rng.random()
        if kind < 0.08:
            out.append(
                Message.tool(f"call-{i}", f"rows: {text}", tool_name="lookup", created_at=at)
            )
        elif kind < 0.12:
            out.append(Message.assistant("  ", name="Bruno", created_at=at))
        elif i % 2 == 0:
            out.append(Message.user(text, name="Ada Lovelace", created_at=at))
        else:
            out.append(Message.assistant(text, name="Bruno", created_at=at))
    return out


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.append("c", conversation(400), tenant=T)
        yield s


def turns(store: SQLiteStore, k: int = 40) -> list[Turn]:
    """Messages asking about old turns, each with a window of the newest 30 messages."""
    rng = random.Random(11)
    history = store.read("c", tenant=T)
    out = []
    for i in range(k):
        end = rng.randint(60, len(history))
        query = " ".join(rng.sample(WORDS, 3)) + ("?" if i % 3 else " Ada in November 2023?")
        out.append(Turn(Message.user(query), history[end - 30 : end], tenant=T, conversation="c"))
    return out


async def blocks(source: RecallSource, asked: list[Turn]) -> list[tuple[str, str] | None]:
    out = []
    for turn in asked:
        b = await source.fetch(turn, 300)
        out.append(None if b is None else (b.content, b.provenance))
    return out


def source(store: AsyncStore, cache: int) -> RecallSource:
    return RecallSource(
        store=store, search_limit=8, match_budget=200, counter=HeuristicCounter(),
        outline_cache_bytes=cache,
    )  # fmt: skip


async def test_every_cache_size_recalls_the_same_blocks(store: SQLiteStore) -> None:
    asked = turns(store)
    db = AsyncStore(store)
    plain = await blocks(source(db, 0), asked)
    assert sum(b is not None for b in plain) > len(asked) // 2  # recall had something to say
    tiny = source(db, 2_000)
    default = source(db, 8 << 20)
    for _ in range(2):  # second round: the default cache holds every outline asked before
        assert await blocks(tiny, asked) == plain
        assert await blocks(default, asked) == plain
    assert tiny._outlines.nbytes <= 2_000
    assert len(source(db, 0)._outlines) == 0


def test_the_store_leaves_the_known_outlines_unread(store: SQLiteStore) -> None:
    hits, whole = store.search_outlines("c", "kitten", tenant=T, limit=5, before_seq=300, around=2)
    assert hits
    assert whole
    known = {o.seq for o in whole[::2]}
    again, rest = store.search_outlines(
        "c", "kitten", tenant=T, limit=5, before_seq=300, around=2, known=known
    )
    assert again == hits
    assert [o.seq for o in rest] == [o.seq for o in whole if o.seq not in known]


class _EvictingStore(SQLiteStore):
    """A real store whose search empties recall's cache as it answers: another thread's build."""

    source: RecallSource | None = None
    calls: list[bool]

    def search_outlines(self, *a, **kw):  # type: ignore[no-untyped-def]
        got = super().search_outlines(*a, **kw)
        self.calls.append(bool(kw.get("known")))
        if self.source is not None:
            self.source._outlines.clear()
        return got


async def test_an_entry_evicted_during_the_search_makes_recall_ask_again(tmp_path: Path) -> None:
    raw = _EvictingStore(tmp_path / "e.db")
    raw.calls = []
    raw.append("c", conversation(400), tenant=T)
    asked = turns(raw, 12)
    db = AsyncStore(raw)
    want = await blocks(source(db, 0), asked)
    evicting = source(db, 8 << 20)
    await blocks(evicting, asked[:1])  # fill the cache
    raw.source, raw.calls = evicting, []
    assert await blocks(evicting, asked) == want
    # each build asked with its cache, lost it, and asked again without
    assert raw.calls.count(False) >= len([b for b in want if b is not None]) // 2
    raw.close()


@pytest.mark.parametrize("size", [-1, 1.5, True, "8MB"])
def test_a_bad_cache_size_is_a_config_error_naming_it(size: object) -> None:
    with pytest.raises(ConfigError, match="outline_cache_bytes"):
        RecallSource(outline_cache_bytes=size)  # type: ignore[arg-type]
