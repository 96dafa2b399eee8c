"""Shared strategies and fixtures for the test suite."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from contextwright import Message, ToolCallPart
from contextwright.stores import Backend, SQLiteBackend
from contextwright.testing import MemoryBackend

# CI runs a fixed set of examples so that a run is reproducible; developers get
# fresh random examples on every run (set CI=true to replay what CI saw).
# No wall-clock limits: no deadline per example, and no "too slow" health check
# (it times data generation, which a loaded machine slows down).
SLOW_OK = [HealthCheck.too_slow]
settings.register_profile(
    "ci", deadline=None, max_examples=60, derandomize=True, suppress_health_check=SLOW_OK
)
settings.register_profile("dev", deadline=None, max_examples=60, suppress_health_check=SLOW_OK)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# Text a user, tool or memory might send: English, Chinese, code, markup, emoji.
WORDS = st.sampled_from(
    [
        "hello", "world", "the", "budget", "tool", "我", "今年", "35岁", "喜欢", "上海",
        "def f(x):", "{\"a\": 1}", "</user_memory>", "<collected_info>", "&lt;", "R&B",
        "a > b", "👩\u200d💻", "e\u0301", "\n", "  ", "1234567", "https://example.com/x?y=1",
    ]
)  # fmt: skip
TEXT = st.lists(WORDS, min_size=1, max_size=30).map(" ".join).filter(lambda s: s.strip() != "")


@st.composite
def conversations(draw: st.DrawFn, max_units: int = 12, broken: bool = False) -> list[Message]:
    """Well-formed conversations (or, with ``broken``, ones with orphans mixed in)."""
    out: list[Message] = []
    n_units = draw(st.integers(0, max_units))
    call_no = 0
    for _ in range(n_units):
        kind = draw(
            st.sampled_from(
                ["user", "assistant", "tools", "orphan"]
                if broken
                else ["user", "assistant", "tools"]
            )
        )
        if kind == "user":
            out.append(Message.user(draw(TEXT)))
        elif kind == "assistant":
            out.append(Message.assistant(draw(TEXT)))
        elif kind == "tools":
            k = draw(st.integers(1, 3))
            calls = []
            for _ in range(k):
                call_no += 1
                calls.append(
                    ToolCallPart(f"call_{call_no}", "search", json.dumps({"q": draw(TEXT)}))
                )
            text = draw(st.sampled_from(["", "Let me look that up."]))
            out.append(Message.assistant(text, tool_calls=calls))
            answered = calls if not broken or draw(st.booleans()) else calls[:-1]
            for c in answered:
                out.append(Message.tool(c.id, draw(TEXT) * draw(st.integers(1, 4))))
        else:
            call_no += 1
            out.append(Message.tool(f"ghost_{call_no}", draw(TEXT)))
    return out


@pytest.fixture(scope="session")
def cl100k():
    from contextwright import TiktokenCounter

    return TiktokenCounter("cl100k_base")


@pytest.fixture(scope="session")
def o200k():
    from contextwright import TiktokenCounter

    return TiktokenCounter("o200k_base")


# -- store backends ------------------------------------------------------------------------

OpenBackend = Callable[[Path], Backend]


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[OpenBackend]:
    """Opens a store backend of one kind at a path: a real SQLite file, in memory, or PostgreSQL.

    Opening the same path twice gives two connections to one file (SQLite), the
    same in-memory store, or two backends on one PostgreSQL database (a fresh one
    per path, dropped after the test) — as two processes share one database server.
    """
    if request.param == "sqlite":
        yield lambda path: SQLiteBackend(path).backend()
        return
    if request.param == "memory":
        opened: dict[Path, Backend] = {}
        yield lambda path: opened.setdefault(path, MemoryBackend().backend())
        return
    from contextwright.stores.postgres import PostgresBackend
    from tests import pg

    urls: dict[Path, str] = {}

    def open_pg(path: Path) -> Backend:
        if path not in urls:
            urls[path] = pg.fresh_database()
        return PostgresBackend(urls[path], max_size=4).backend()

    yield open_pg
    for url in urls.values():
        pg.drop_database(url)


class sync:
    """A backend role's coroutines called synchronously: ``sync(b.summaries).summaries("c", tenant="t")``."""

    def __init__(self, role: Any) -> None:
        self._role = role

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._role, name)
        return lambda *a, **kw: asyncio.run(method(*a, **kw))


# -- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def pg_url() -> Any:
    """The URL of a new, empty database on the test PostgreSQL (see tests/pg.py), dropped after."""
    from tests import pg

    url = pg.create_database()
    yield url
    pg.drop_database(url)
