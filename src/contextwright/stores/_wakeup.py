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

__all__ = ["Wakeup", "open_wakeup"]


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


def open_wakeup(
    wakeup: Wakeup | str | None, jobs: object
) -> tuple[Wakeup | None, Callable[[], None] | None]:
    """The wakeup a runner of ``jobs`` uses, and the closer of one opened here.

    ``wakeup`` is a `Wakeup`, a ``redis://…`` URL (a `RedisWakeup`, closed by the
    returned closer), or None: the queue's own (``jobs.wakeup``, e.g. PostgreSQL's
    LISTEN/NOTIFY), if it has one.
    """
    if isinstance(wakeup, str):
        from .redis import RedisWakeup

        opened = RedisWakeup.from_url(wakeup)
        return opened, opened.close
    if wakeup is None:
        return getattr(jobs, "wakeup", None), None
    return wakeup, None
