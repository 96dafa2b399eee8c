"""The memory/knowledge store behaviour tests run on every backend: these fixtures say where.

``store_db`` is where a test's stores live, once per backend: a new SQLite file
(``sqlite:///…``, opened through `open_memory_store` / `open_knowledge_store`
like any user's URL) or a new, empty PostgreSQL database (the ``pg_url`` fixture).
Stores opened on the same ``store_db`` share one database, as two processes would.
Import the fixture into a test module to use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A database for a test's stores: ``sqlite:///<tmp>/store.db`` or a PostgreSQL URL."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path / 'store.db'}"


def is_postgres(db: object) -> bool:
    return isinstance(db, str) and db.startswith("postgres")
