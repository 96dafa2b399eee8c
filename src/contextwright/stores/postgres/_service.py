"""The PostgreSQL backend's calls for the service: deleting a conversation, receipts, API keys.

`PostgresBackend` methods written as functions of the backend (listed in its
class body), with the semantics of the SQLite store's (``sqlite/_service.py``)
and the same checks (``stores/_service_input.py``), made before anything is sent.
The tables are m008's (``_schema_service.py``).

`delete_conversation` deletes the ``conversations`` row, which takes every row
hanging off it with it (``ON DELETE CASCADE``: messages with their search
vectors and GIN entries, summaries, compactions, working memory, pins), and the
conversation's receipts, in one transaction, and keeps the row's last version
(m009 ``retired_versions``): a conversation made again under the id continues
above it (``_log.py`` `CONTINUE`). Deleting the row waits for the row lock an
append holds, so an append either commits before (and is deleted) or finds no
conversation after and starts a new one at seq 1, above the deleted version. The deleted
tuples stay on disk until VACUUM reclaims them (autovacuum does); no query sees
them meanwhile.
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
)
from ..sqlite import _rows

if TYPE_CHECKING:
    from ._backend import PostgresBackend

__all__ = [
    "create_key", "delete_conversation", "find_key", "list_keys", "receipts", "record_receipt",
    "revoke_key",
]  # fmt: skip


async def delete_conversation(self: PostgresBackend, conversation: str, *, tenant: str) -> bool:
    _rows.name(conversation, "conversation")
    async with self.transaction(tenant) as conn:
        cur = await conn.execute(
            "DELETE FROM conversations WHERE tenant = %s AND id = %s RETURNING version",
            (tenant, conversation),
        )
        gone = await cur.fetchone()
        await conn.execute(
            "DELETE FROM receipts WHERE tenant = %s AND conversation = %s", (tenant, conversation)
        )
        if gone is not None:  # one made again under this id continues above it (m009)
            await conn.execute(
                "INSERT INTO retired_versions (tenant, id, version) VALUES (%s, %s, %s) "
                "ON CONFLICT (tenant, id) DO UPDATE "
                "SET version = greatest(retired_versions.version, excluded.version)",
                (tenant, conversation, gone[0]),
            )
    return gone is not None


# -- receipts ---------------------------------------------------------------------------------


async def record_receipt(
    self: PostgresBackend,
    conversation: str,
    receipt: Mapping[str, Any],
    *,
    tenant: str,
    at: float | None = None,
    keep: int = 50,
) -> ReceiptRecord:
    text, n, when = receipt_input(conversation, receipt, keep, at)
    async with self.transaction(tenant) as conn:
        now = self.now() if when is None else when
        cur = await conn.execute(
            "INSERT INTO receipts (tenant, conversation, at, receipt) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            (tenant, conversation, now, text),
        )
        (rid,) = await cur.fetchone()
        await conn.execute(
            "DELETE FROM receipts WHERE tenant = %s AND conversation = %s AND id <= ("
            "SELECT id FROM receipts WHERE tenant = %s AND conversation = %s "
            "ORDER BY id DESC OFFSET %s LIMIT 1)",
            (tenant, conversation, tenant, conversation, n),
        )
    return receipt_record((rid, now, text), conversation, tenant)


async def receipts(
    self: PostgresBackend, conversation: str, *, tenant: str, limit: int = 20
) -> list[ReceiptRecord]:
    n = _rows.count(limit, "limit")
    async with self.connection(tenant) as conn:
        cur = await conn.execute(
            "SELECT id, at, receipt FROM receipts WHERE tenant = %s AND conversation = %s "
            "ORDER BY id DESC LIMIT %s",
            (tenant, conversation, n),
        )
        rows = await cur.fetchall()
    return [receipt_record(r, conversation, tenant) for r in rows]


# -- API keys (they span tenants: a request's tenant is found from its key) -----------------


async def create_key(self: PostgresBackend, record: KeyRecord) -> None:
    row = key_row(record)
    async with self.connection(_rows.EVERY_TENANT) as conn:
        cur = await conn.execute(
            f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (key_id) DO NOTHING RETURNING key_id",
            row,
        )
        made = await cur.fetchone()
    if made is None:
        raise ConfigError(f"key_id {row[0]!r} is already stored")


async def find_key(self: PostgresBackend, key_id: str) -> KeyRecord | None:
    if not isinstance(key_id, str):
        return None
    async with self.connection(_rows.EVERY_TENANT) as conn:
        cur = await conn.execute(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,))
        row = await cur.fetchone()
    return None if row is None else key_record(row)


async def list_keys(self: PostgresBackend, *, tenant: str | None = None) -> list[KeyRecord]:
    sql = f"SELECT {KEY_COLUMNS} FROM api_keys"
    params: tuple[str, ...] = ()
    if tenant is not None:
        sql, params = sql + " WHERE tenant = %s", (_rows.name(tenant, "tenant"),)
    async with self.connection(_rows.EVERY_TENANT) as conn:
        cur = await conn.execute(sql + " ORDER BY created_at, made", params)
        rows = await cur.fetchall()
    return [key_record(r) for r in rows]


async def revoke_key(self: PostgresBackend, key_id: str, *, at: float | None = None) -> bool:
    when = optional_time(at)
    if not isinstance(key_id, str):
        return False
    now = self.now() if when is None else when
    async with self.connection(_rows.EVERY_TENANT) as conn:
        cur = await conn.execute(
            "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
            (now, key_id),
        )
        return bool(cur.rowcount == 1)
