"""The in-memory backend's service roles: build receipts and API keys (see ``_backend.py``).

`MemoryReceipts` keeps each conversation's newest receipts as JSON text (a
record read back is a fresh copy, as from a database) and `MemoryApiKeys` the
keys by id; both over the shared `MemoryState`, under its lock, with the input
checks every backend uses (``stores/_service_input.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..._errors import ConfigError
from .._records import KeyRecord, ReceiptRecord
from .._service_input import key_row, optional_time, receipt_input, receipt_record
from ..sqlite import _rows
from ._state import MemoryState

__all__ = ["MemoryApiKeys", "MemoryReceipts"]


class MemoryReceipts:
    """`Receipts` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def record_receipt(
        self,
        conversation: str,
        receipt: Mapping[str, Any],
        *,
        tenant: str,
        at: float | None = None,
        keep: int = 50,
    ) -> ReceiptRecord:
        text, n, when = receipt_input(conversation, receipt, keep, at)
        with self.s.lock:
            self.s.open(tenant)
            row = (next(self.s.receipt_ids), self.s.now() if when is None else when, text)
            held = self.s.receipts.setdefault((tenant, conversation), [])
            held.append(row)
            del held[:-n]
        return receipt_record(row, conversation, tenant)

    async def receipts(
        self, conversation: str, *, tenant: str, limit: int = 20
    ) -> list[ReceiptRecord]:
        n = _rows.count(limit, "limit")
        with self.s.lock:
            self.s.open(tenant)
            held = self.s.receipts.get((tenant, conversation), []) if n else []
            newest = held[::-1][:n]
        return [receipt_record(row, conversation, tenant) for row in newest]


class MemoryApiKeys:
    """`ApiKeys` over a `MemoryState`."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def create_key(self, record: KeyRecord) -> None:
        stored = KeyRecord(*key_row(record))
        with self.s.lock:
            self.s.check_open()
            if stored.key_id in self.s.keys:
                raise ConfigError(f"key_id {stored.key_id!r} is already stored")
            self.s.keys[stored.key_id] = stored

    async def find_key(self, key_id: str) -> KeyRecord | None:
        with self.s.lock:
            self.s.check_open()
            return self.s.keys.get(key_id) if isinstance(key_id, str) else None

    async def list_keys(self, *, tenant: str | None = None) -> list[KeyRecord]:
        if tenant is not None:
            _rows.name(tenant, "tenant")
        with self.s.lock:
            self.s.check_open()
            found = [k for k in self.s.keys.values() if tenant is None or k.tenant == tenant]
        return sorted(found, key=lambda k: k.created_at)  # stable: creation order among equals

    async def revoke_key(self, key_id: str, *, at: float | None = None) -> bool:
        when = optional_time(at)
        with self.s.lock:
            self.s.check_open()
            key = self.s.keys.get(key_id) if isinstance(key_id, str) else None
            if key is None or key.revoked_at is not None:
                return False
            now = self.s.now() if when is None else when
            self.s.keys[key_id] = replace(key, revoked_at=now)
            return True
