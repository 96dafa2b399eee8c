"""Helpers of the contract suites: a manual clock, expected errors, and scenario methods.

`ManualClock` is public (a store's or a queue's ``clock``); the rest serves the
suites in this package.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..model._messages import Message

__all__ = ["ManualClock", "Suite", "raises", "scenario", "texts"]

E = TypeVar("E", bound=BaseException)
B = TypeVar("B")


class ManualClock:
    """Seconds since the epoch that move only by `advance` (a store's ``clock``)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def raises(kind: type[E], where: str = "") -> Iterator[list[E]]:
    """Expect ``kind`` (naming ``where`` in its message, if given); the caught one is yielded."""
    caught: list[E] = []
    try:
        yield caught
    except kind as exc:
        caught.append(exc)
        if where and where not in str(exc):
            raise AssertionError(f"{kind.__name__} does not name {where!r}: {exc}") from exc
        return
    raise AssertionError(f"expected {kind.__name__}, nothing was raised")


class Suite(Generic[B]):
    """A contract suite over an object of type ``B`` opened fresh for every test.

    Subclasses define ``open(directory, clock)``; `run` opens it in a temporary
    directory, runs the body on a new event loop, and closes it with ``close``.
    """

    def open(self, directory: Path, clock: Callable[[], float]) -> B:
        raise NotImplementedError

    async def close(self, subject: B) -> None:
        """Close what `open` returned (default: nothing to close)."""

    def run(self, body: Callable[[B, ManualClock], Awaitable[Any]]) -> None:
        """Open the subject in a temporary directory, run ``body`` on a new event loop, close it."""
        with tempfile.TemporaryDirectory(prefix="contextwright-contract-") as directory:
            clock = ManualClock()

            async def main() -> None:
                subject = self.open(Path(directory), clock)
                try:
                    await body(subject, clock)
                finally:
                    await self.close(subject)

            asyncio.run(main())


def scenario(
    fn: Callable[[Any, Any, ManualClock], Awaitable[None]],
) -> Callable[[Suite[Any]], None]:
    """A test method running ``fn(self, subject, clock)`` against a fresh subject."""

    def test(self: Suite[Any]) -> None:
        self.run(lambda subject, clock: fn(self, subject, clock))

    # not functools.wraps: pytest would read the scenario's parameters as fixtures
    test.__name__, test.__qualname__, test.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return test


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]
