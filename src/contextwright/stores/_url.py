"""Which backend a ``db`` setting names: a path or ``sqlite:///path``, or ``postgresql://…``.

Every place that opens a store by name (the CLI's ``--db``, ``$CONTEXTWRIGHT_DB``,
`Conversations(engine, "…")`, the memory and knowledge stores) reads it here, so the
same string means the same database everywhere. ``sqlite:///relative/path`` and
``sqlite:////absolute/path`` follow SQLAlchemy's convention; ``sqlite://`` alone is
an in-memory database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .._errors import ConfigError

__all__ = ["DbTarget", "parse_db"]

_PG = ("postgresql://", "postgres://", "postgresql+psycopg://")


@dataclass(frozen=True, slots=True)
class DbTarget:
    """``kind`` "sqlite" with ``path`` (":memory:" for in memory), or "postgres" with ``url``."""

    kind: str
    path: str = ""
    url: str = ""


def parse_db(db: str | os.PathLike[str]) -> DbTarget:
    """The backend ``db`` names; `ConfigError` for a URL scheme no backend serves."""
    if isinstance(db, os.PathLike):
        return DbTarget("sqlite", path=os.fspath(db))
    if not isinstance(db, str) or not db.strip():
        raise ConfigError(f"db: expected a path or a database URL, got {db!r}")
    low = db.lower()
    if low.startswith(_PG):
        return DbTarget("postgres", url=db)
    if low.startswith("sqlite://"):
        rest = db[len("sqlite://") :]
        if rest in ("", "/", "/:memory:"):
            return DbTarget("sqlite", path=":memory:")
        if not rest.startswith("/"):
            raise ConfigError(f"db: expected sqlite:///path, got {db!r}")
        return DbTarget("sqlite", path=rest[1:])
    scheme = low.split("://", 1)[0] if "://" in low else ""
    if scheme:
        raise ConfigError(
            f"db: unknown database URL scheme {scheme + '://'!r}: use a file path, "
            "sqlite:///path or postgresql://…"
        )
    return DbTarget("sqlite", path=str(Path(db)))
