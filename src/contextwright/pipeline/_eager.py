"""Running a coroutine eagerly: on the caller's stack until it first has to wait.

Most coroutines handed to the engine never wait for anything (sources over
in-process data; a store called inline by the sync API), and a task for each
costs more than their work. `step` runs one until it finishes or suspends, like
Python 3.12's eager tasks; a suspended one is finished by `resume`, in a task,
exactly as if it had been a task from the start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["resume", "step"]


def step(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """``(True, result)`` if ``coro`` ran to its end, else ``(False, what it waits on)``.

    Exceptions from the coroutine propagate. Call it inside a running loop: the
    coroutine may use it.
    """
    try:
        return False, coro.send(None)
    except StopIteration as stop:
        return True, stop.value


async def resume(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """Run to its end a coroutine that was stepped outside a task and suspended on ``waiting``.

    Does what a task does with what a coroutine yields: ``None`` is a bare yield
    (one loop turn); anything else is an asyncio future, waited for without taking
    its outcome, which the coroutine reads itself when resumed. A cancellation of
    this task (the deadline) cancels that future and is thrown into the coroutine.
    """
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False
                await asyncio.wait((waiting,))
        except BaseException as exc:
            if waiting is not None:
                waiting.cancel()
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            waiting = coro.send(None)
        except StopIteration as stop:
            return stop.value
