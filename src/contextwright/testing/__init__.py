"""Public test doubles, and the contract suites every backend runs.

- `MemoryBackend`: the store contract in process memory (plain dicts), a
  drop-in `Backend` for tests of code that stores conversations.
- `ManualClock`: a clock that moves only when told, for TTLs, leases and timestamps.
- `StoreContract`: the behaviour every store backend must show, as test methods
  (``_store_contract.py``).
- `ServiceContract`: what the stateful service asks beyond that (recall's
  search, index housekeeping, the backend's job queue, build receipts, API keys,
  deleting a conversation, versions that keep counting across it;
  ``_service_contract.py``).
- `JobsContract`: the rules every durable job queue must keep (``_jobs_contract.py``).

A backend's test module subclasses a suite and says how to open what it tests;
pytest collects the subclass (its name starts with ``Test``), and each test runs
on a fresh one in a fresh temporary directory, on its own event loop. Nothing
here needs pytest.
"""

from __future__ import annotations

from ..stores.memory import MemoryBackend
from ._jobs_contract import JobsContract
from ._service_contract import ServiceContract
from ._store_contract import StoreContract
from ._support import ManualClock

__all__ = ["JobsContract", "ManualClock", "MemoryBackend", "ServiceContract", "StoreContract"]
