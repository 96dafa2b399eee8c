"""`Wakeup`: the signal that tells idle job runners in other processes to look for work.

A `JobRunner` wakes at once for work enqueued in its own process; work enqueued by
another worker is found when the runner next polls the queue (its next due time).
A `Wakeup` shared by the workers cuts that wait: an enqueue calls `notify`, and
every runner listening (`listen`) is woken. It is only a hint — nothing is lost
when a signal is (a runner still polls), so a backend may drop signals while its
server is away. PostgreSQL provides one with LISTEN/NOTIFY, Redis with pub/sub.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Wakeup"]


@runtime_checkable
class Wakeup(Protocol):
    async def notify(self) -> None:
        """Tell every listening worker that work was enqueued (best effort, never raises)."""
        ...

    def listen(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) on every `notify`, in any process.

        Returns the function that stops listening. ``callback`` must be cheap and
        thread-safe (a runner's is ``loop.call_soon_threadsafe(event.set)``).
        """
        ...
