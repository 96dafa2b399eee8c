"""Store calls at once on a private event loop: `inline_loop` and `runs_inline`.

A sync facade drives a private event loop that nothing else runs on, so blocking
it blocks no one. While that loop runs a coroutine under `inline_loop`, a backend
that hands each call to a worker thread (`SQLiteBackend`) runs it at once on the
caller's thread instead: no thread hop, and none of the GIL hand-offs between
two threads running Python that made a turn's time jump by milliseconds. Any
other loop (the caller's own, a background thread's) keeps the worker: the mark
holds only where the running loop is the very loop marked, so a task or thread
that inherits the context elsewhere is not affected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["inline_loop", "runs_inline"]

_INLINE: ContextVar[asyncio.AbstractEventLoop | None] = ContextVar(
    "contextwright_inline_loop", default=None
)


@contextmanager
def inline_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Mark ``loop`` (private to a sync caller) as one whose store calls may run inline."""
    token = _INLINE.set(loop)
    try:
        yield
    finally:
        _INLINE.reset(token)


def runs_inline() -> bool:
    """Whether the running loop (call from a coroutine) is one `inline_loop` marked."""
    loop = _INLINE.get()
    return loop is not None and loop is asyncio.get_running_loop()
