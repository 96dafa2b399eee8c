"""API keys of the HTTP service and the MCP server: made, parsed and checked here.

A key reads ``cw_<key id>_<secret>``: ``cw_``, twelve hex digits of public id,
``_``, and 43 URL-safe characters of secret (256 random bits). The store keeps
the id, the tenant, a name and the hex SHA-256 of the secret (`KeyRecord`),
never the key: a stolen database opens nothing. A presented key is looked up by
its id and its secret's hash compared with `hmac.compare_digest`; a revoked key,
an unknown id and a wrong secret are all refused the same way (`tenant_of`
answers None), and nothing here ever puts a key into a message.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from .._errors import ConfigError
from ..model._checks import unicode_problem
from ..stores._contract import ApiKeys
from ..stores._records import KeyRecord

__all__ = ["hash_secret", "new_key", "parse_key", "tenant_of"]

_KEY = re.compile(r"cw_([0-9a-f]{12})_([A-Za-z0-9_\-]{43})")
_DUMMY = hashlib.sha256(b"contextwright: no such key").hexdigest()


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a key's secret part, as the store keeps it."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def new_key(tenant: str, name: str = "", *, now: float | None = None) -> tuple[str, KeyRecord]:
    """A new key for ``tenant``: the key (shown once) and the record to store."""
    if not isinstance(tenant, str) or not tenant.strip() or len(tenant) > 200:
        raise ConfigError("--tenant must be a non-empty name of at most 200 characters")
    if (problem := unicode_problem(tenant)) is not None:
        raise ConfigError(f"--tenant {problem}")
    if not isinstance(name, str) or len(name) > 200:
        raise ConfigError("--name must be at most 200 characters")
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = KeyRecord(
        key_id=key_id,
        tenant=tenant,
        name=name,
        secret_hash=hash_secret(secret),
        created_at=time.time() if now is None else now,
    )
    return f"cw_{key_id}_{secret}", record


def parse_key(key: str) -> tuple[str, str] | None:
    """``(key id, secret)`` of a well-formed key, else None."""
    found = _KEY.fullmatch(key.strip()) if isinstance(key, str) else None
    return (found.group(1), found.group(2)) if found else None


async def tenant_of(keys: ApiKeys, key: str) -> str | None:
    """The tenant of a valid, unrevoked ``key``; None for any other string."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    record = await keys.find_key(key_id)
    expected = record.secret_hash if record is not None else _DUMMY
    same = hmac.compare_digest(hash_secret(secret), expected)  # compared even when unknown
    if record is None or not same or record.revoked_at is not None:
        return None
    return record.tenant
