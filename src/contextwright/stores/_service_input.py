"""The input checks of the service's roles (`Receipts`, `ApiKeys`), written once for every backend.

The in-memory, SQLite and PostgreSQL backends check a receipt or a key here
before anything is written, so the same bad input raises the same error
everywhere (`InvalidMessageError` naming the field, or `ConfigError` for a key):
`receipt_json` (a mapping of JSON values, as text), `timestamp` (``at``,
``created_at``: a finite number of seconds), `keep_count` (the three together:
`receipt_input`), `optional_time`, and `key_row` (a
`KeyRecord` as the row every backend stores). `receipt_record` and `key_record`
read the rows back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError, InvalidMessageError
from ._records import KeyRecord, ReceiptRecord
from .sqlite import _rows

__all__ = [
    "KEY_COLUMNS",
    "keep_count",
    "key_record",
    "key_row",
    "optional_time",
    "receipt_input",
    "receipt_json",
    "receipt_record",
    "timestamp",
]  # fmt: skip

# The columns of a stored key, in `key_row`'s order (every backend selects them so).
KEY_COLUMNS = "key_id, tenant, name, secret_hash, created_at, revoked_at"
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def receipt_json(receipt: object) -> str:
    """``receipt`` as the JSON text stored; it must be a mapping of JSON values."""
    if not isinstance(receipt, Mapping):
        raise InvalidMessageError(
            "receipt", f"must be a mapping (ContextReport.to_dict()), got {type(receipt).__name__}"
        )
    return _rows.dumps(dict(receipt), "receipt")


def timestamp(value: object, where: str) -> float:
    """``value`` as seconds since the epoch: a finite number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidMessageError(where, f"must be a finite number of seconds, got {value!r}")
    return float(value)


def keep_count(keep: object) -> int:
    """How many receipts a conversation keeps: at least one (the one just recorded)."""
    return _rows.count(keep, "keep", minimum=1)


def optional_time(at: object) -> float | None:
    """An ``at`` argument checked (`timestamp`); None stays None (the store's clock then)."""
    return None if at is None else timestamp(at, "at")


def receipt_input(
    conversation: object, receipt: object, keep: object, at: object
) -> tuple[str, int, float | None]:
    """`record_receipt`'s arguments checked: the JSON stored, how many kept, and when (or None)."""
    _rows.name(conversation, "conversation")
    return receipt_json(receipt), keep_count(keep), optional_time(at)


def receipt_record(row: Sequence[Any], conversation: str, tenant: str) -> ReceiptRecord:
    """The record of a stored ``(id, at, receipt)`` row."""
    return ReceiptRecord(int(row[0]), conversation, tenant, float(row[1]), json.loads(row[2]))


def key_row(record: object) -> tuple[str, str, str, str, float, float | None]:
    """The checked columns (`KEY_COLUMNS`) of a key to store; `ConfigError` names what is wrong."""
    if not isinstance(record, KeyRecord):
        raise ConfigError(f"record must be a KeyRecord, got {type(record).__name__}")
    key_id = _rows.name(record.key_id, "key_id")
    tenant = _rows.name(record.tenant, "tenant")
    if not isinstance(record.name, str):
        raise ConfigError(f"name must be a string, got {record.name!r}")
    if not isinstance(record.secret_hash, str) or not _SHA256_HEX.fullmatch(record.secret_hash):
        raise ConfigError("secret_hash must be the hex SHA-256 of the key's secret (64 hex digits)")
    try:
        created = timestamp(record.created_at, "created_at")
        revoked = None if record.revoked_at is None else timestamp(record.revoked_at, "revoked_at")
    except InvalidMessageError as exc:
        raise ConfigError(str(exc)) from None
    return key_id, tenant, record.name, record.secret_hash, created, revoked


def key_record(row: Sequence[Any]) -> KeyRecord:
    """The record of a stored key row (`KEY_COLUMNS`)."""
    revoked = None if row[5] is None else float(row[5])
    return KeyRecord(row[0], row[1], row[2], row[3], float(row[4]), revoked)
