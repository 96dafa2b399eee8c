"""The SQLite store's calls for the service: deleting a conversation, receipts, API keys.

Functions of `SQLiteStore`, listed in its class body (as ``_log.py``'s are), each
one transaction (``_store.py``), with the checks every backend shares
(``stores/_service_input.py``) made before it opens. The tables are m010's
(``_schema.py``).

`delete_conversation` is the one call that removes stored messages. It removes
the conversation's rows from every table that holds them — the full-text index
(``_fts.py`` `unindex`: a contentless index forgets a row only when told its
text), ``messages``, ``summaries``, ``compactions``, ``working_memory``,
``pinned``, ``receipts`` and the ``conversations`` row — and retires its ``cid``
(never given out again) and its last version (m011: a conversation made again
under the id continues above it), in one write transaction. Queued jobs are the job
queue's, keyed by the conversation's id: they run later and find nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError
from .._records import KeyRecord, ReceiptRecord
from .._service_input import (
    KEY_COLUMNS,
    key_record,
    key_row,
    optional_time,
    receipt_input,
    receipt_record,
    timestamp,
)
from . import _rows
from ._fts import unindex
from ._rows import MSG_COLUMNS

if TYPE_CHECKING:
    from ._store import SQLiteStore

__all__ = [
    "create_key", "delete_conversation", "find_key", "list_keys", "receipts", "record_receipt",
    "revoke_key",
]  # fmt: skip

# The tables whose rows hang off a conversation's cid (m001), deleted with it.
_BY_CID = ("messages", "summaries", "compactions", "working_memory", "pinned")


def delete_conversation(self: SQLiteStore, conversation: str, *, tenant: str) -> bool:
    """Delete the conversation and everything stored under it; False if the tenant has none such.

    Its receipts go either way (a conversation that was built but never stored
    has receipts only).
    """
    _rows.name(conversation, "conversation")
    with self._tx(True, tenant) as conn:
        conn.execute(
            "DELETE FROM receipts WHERE tenant = ? AND conversation = ?", (tenant, conversation)
        )
        row = conn.execute(
            "SELECT cid, fts_seq, version FROM conversations WHERE tenant = ? AND id = ?",
            (tenant, conversation),
        ).fetchone()
        if row is None:
            return False
        cid, indexed, version = row
        cursor = conn.execute(
            f"SELECT {MSG_COLUMNS} FROM messages m WHERE m.cid = ? AND m.seq <= ? ORDER BY m.seq",
            (cid, indexed),
        )
        while page := cursor.fetchmany(2000):
            unindex(conn, [(cid, _rows.message(r)) for r in page])
        for table in _BY_CID:
            conn.execute(f"DELETE FROM {table} WHERE cid = ?", (cid,))
        conn.execute("DELETE FROM conversations WHERE cid = ?", (cid,))
        conn.execute("INSERT OR IGNORE INTO retired_cids (cid) VALUES (?)", (cid,))
        conn.execute("DELETE FROM retired_cids WHERE cid < (SELECT max(cid) FROM retired_cids)")
        # one made again under this id continues above its last version (m011)
        conn.execute(
            "INSERT INTO retired_versions (tenant, id, version) VALUES (?, ?, ?) "
            "ON CONFLICT (tenant, id) DO UPDATE SET version = max(version, excluded.version)",
            (tenant, conversation, version),
        )
    return True


# -- receipts ---------------------------------------------------------------------------------


def record_receipt(
    self: SQLiteStore,
    conversation: str,
    receipt: Mapping[str, Any],
    *,
    tenant: str,
    at: float | None = None,
    keep: int = 50,
) -> ReceiptRecord:
    """Store the receipt and keep the conversation's newest ``keep``, in one transaction."""
    text, n, when = receipt_input(conversation, receipt, keep, at)
    with self._tx(True, tenant) as conn:
        now = timestamp(self.clock(), "the store's clock") if when is None else when
        cur = conn.execute(
            "INSERT INTO receipts (tenant, conversation, at, receipt) VALUES (?, ?, ?, ?)",
            (tenant, conversation, now, text),
        )
        rid = cur.lastrowid
        conn.execute(
            "DELETE FROM receipts WHERE tenant = ? AND conversation = ? AND id <= ("
            "SELECT id FROM receipts WHERE tenant = ? AND conversation = ? "
            "ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (tenant, conversation, tenant, conversation, n),
        )
    return receipt_record((rid, now, text), conversation, tenant)


def receipts(
    self: SQLiteStore, conversation: str, *, tenant: str, limit: int = 20
) -> list[ReceiptRecord]:
    """The conversation's newest ``limit`` receipts, newest first."""
    n = _rows.count(limit, "limit")
    with self._tx(False, tenant) as conn:
        rows = conn.execute(
            "SELECT id, at, receipt FROM receipts WHERE tenant = ? AND conversation = ? "
            "ORDER BY id DESC LIMIT ?",
            (tenant, conversation, n),
        ).fetchall()
    return [receipt_record(r, conversation, tenant) for r in rows]


# -- API keys (they span tenants: a request's tenant is found from its key) -----------------


def create_key(self: SQLiteStore, record: KeyRecord) -> None:
    """Store a new key; a ``key_id`` already stored raises `ConfigError`."""
    row = key_row(record)
    with self._tx(True, _rows.EVERY_TENANT) as conn:
        if conn.execute("SELECT 1 FROM api_keys WHERE key_id = ?", (row[0],)).fetchone():
            raise ConfigError(f"key_id {row[0]!r} is already stored")
        conn.execute(f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", row)


def find_key(self: SQLiteStore, key_id: str) -> KeyRecord | None:
    """The key with this id, revoked or not; None if unknown."""
    if not isinstance(key_id, str):
        return None
    with self._tx(False, _rows.EVERY_TENANT) as conn:
        row = conn.execute(
            f"SELECT {KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
        ).fetchone()
    return None if row is None else key_record(row)


def list_keys(self: SQLiteStore, *, tenant: str | None = None) -> list[KeyRecord]:
    """Every key (of ``tenant``, if given), oldest first."""
    sql = f"SELECT {KEY_COLUMNS} FROM api_keys"
    params: tuple[str, ...] = ()
    if tenant is not None:
        sql, params = sql + " WHERE tenant = ?", (_rows.name(tenant, "tenant"),)
    with self._tx(False, _rows.EVERY_TENANT) as conn:
        rows = conn.execute(sql + " ORDER BY created_at, rowid", params).fetchall()
    return [key_record(r) for r in rows]


def revoke_key(self: SQLiteStore, key_id: str, *, at: float | None = None) -> bool:
    """Mark the key revoked; False if there is none such or it was revoked already."""
    when = optional_time(at)
    if not isinstance(key_id, str):
        return False
    with self._tx(True, _rows.EVERY_TENANT) as conn:
        now = timestamp(self.clock(), "the store's clock") if when is None else when
        cur = conn.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            (now, key_id),
        )
        return cur.rowcount == 1
