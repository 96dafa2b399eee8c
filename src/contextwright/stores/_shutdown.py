"""Work to finish when the interpreter shuts down, while threads and thread pools still run.

`at_shutdown` registers a function with ``threading._register_atexit`` — what
`concurrent.futures` uses for its own pools — when the interpreter has it (every
CPython from 3.9). Those functions run at the start of shutdown, before the
interpreter joins its threads and before the thread pools refuse new work, so a
background worker can still finish its queue: its store calls and an extractor's
``asyncio.to_thread`` calls still run. They run newest first, so a function
registered after `concurrent.futures` was imported runs before its pools stop.
Plain `atexit` is only the fallback: it runs after that, when
``loop.run_in_executor`` already raises "cannot schedule new futures after
interpreter shutdown".
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

__all__ = ["at_shutdown"]

_lock = threading.Lock()
_registered: set[Callable[[], None]] = set()


def at_shutdown(fn: Callable[[], None]) -> None:
    """Call ``fn`` once when the interpreter begins to shut down (idempotent per ``fn``)."""
    with _lock:
        if fn in _registered:
            return
        _registered.add(fn)
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(fn)
            return
        except RuntimeError:  # the interpreter is already shutting down
            pass
    atexit.register(fn)
