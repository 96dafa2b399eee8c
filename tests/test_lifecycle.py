"""`Conversations` as a context manager: closing leaves no thread of its own behind."""

from __future__ import annotations

import threading

from contextwright import ContextEngine, Conversations, Message
from contextwright.history import CompactionConfig


def _bg_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "contextwright-bg" and t.is_alive()}


def _turns(n: int) -> list[Message]:
    out = []
    for i in range(n):
        out += [Message.user(f"question {i} about the launch"), Message.assistant(f"answer {i}")]
    return out


def test_with_block_closes_and_joins_the_background_thread(tmp_path):
    before = _bg_threads()
    config = CompactionConfig.preset("development")
    with Conversations(ContextEngine(budget=2000), str(tmp_path / "s.db"), compaction=config) as c:
        c.import_sync("c", _turns(60), user="u")  # schedules a background summary
        c.build_sync("c", "and the venue?", user="u")
        assert _bg_threads() - before  # the background thread did run
    assert _bg_threads() - before == set()
    c.close()  # closing again is harmless


async def test_async_with_block_closes_and_joins_the_background_thread(tmp_path):
    before = _bg_threads()
    config = CompactionConfig.preset("development")
    async with Conversations(
        ContextEngine(budget=2000), str(tmp_path / "s.db"), compaction=config
    ) as c:
        await c.import_messages("c", _turns(60), user="u")
        await c.build("c", "and the venue?", user="u")
        stored = [m async for m in c.messages("c", user="u")]
        assert len(stored) == 121
    assert _bg_threads() - before == set()
