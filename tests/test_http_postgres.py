"""The HTTP service on PostgreSQL (``serve --db postgresql://…``): the same API, the same isolation.

A real uvicorn server on loopback over a fresh database of the test PostgreSQL
(tests/pg.py); keys, appends, builds and their receipts, memory and knowledge go
through the PostgreSQL backend and stores, and another tenant sees none of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from contextwright.interfaces.http import Settings

from . import pg
from .http_kit import Served, SpecCheck, add_key, client, revoke, serving, wait_until


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    url = pg.fresh_database()
    try:
        with serving(Settings(db=url, budget=2000)) as s:
            yield s
    finally:
        pg.recycle_database(url)


def test_the_api_on_postgresql(served: Served) -> None:
    db = served.settings.db
    assert db is not None
    assert db.startswith("postgresql")
    check = SpecCheck(served.url)
    key_a, key_b = add_key(db, "pa"), add_key(db, "pb")
    with client(served.url, key_a, check) as a, client(served.url, key_b, check) as b:
        assert a.get("/readyz").json() == {"status": "ready"}
        msgs = [
            {"role": "user", "content": "Our launch budget is 4,000 euros.", "id": "p1"},
            {"role": "assistant", "content": "Noted: 4,000 euros.", "id": "p2"},
        ]
        first = a.post("/v1/conversations/pc/messages", json={"messages": msgs}).json()
        assert a.post("/v1/conversations/pc/messages", json={"messages": msgs}).json() == first
        a.post("/v1/memories", json={"content": "prefers email over calls", "importance": 90})
        a.post("/v1/knowledge", json={"text": "Invoices are due in 14 days.", "source": "ap.md"})
        r = a.post(
            "/v1/conversations/pc/context",
            json={"message": "When are invoices due, and how should you contact me?",
                  "format": "anthropic"},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        text = json.dumps(r.json()["request"])
        assert "14 days" in text
        assert "prefers email" in text
        assert "4,000 euros" in text
        assert a.get("/v1/conversations/pc").json()["message_count"] == 3
        assert len(a.get("/v1/conversations/pc/receipts").json()["receipts"]) == 1
        # tenant B: nothing of A's
        assert b.get("/v1/conversations/pc").status_code == 404
        assert b.get("/v1/conversations/pc/receipts").json() == {"receipts": []}
        assert b.get("/v1/memories").json() == {"memories": []}
        assert b.post("/v1/knowledge/search", json={"query": "invoices"}).json() == {"hits": []}
        other = b.post("/v1/conversations/pc/context", json={"message": "When are invoices due?"})
        assert "14 days" not in json.dumps(other.json()["request"])
        assert a.delete("/v1/conversations/pc").json()["deleted"] is True
        assert a.get("/v1/conversations/pc").status_code == 404
        revoke(db, key_b)
        assert b.get("/v1/conversations").status_code == 401
    assert httpx.get(served.url + "/healthz").status_code == 200
    assert check.checked > 15


def test_store_away_is_503_with_retry_after_and_recovers(served: Served) -> None:
    """The database refuses connections: /readyz and the API answer 503 + Retry-After, then recover."""
    import psycopg

    db = served.settings.db
    assert db is not None
    name = urlsplit(db).path.lstrip("/")
    key = add_key(db, "pz")
    with psycopg.connect(pg.server_url(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        try:
            r = httpx.get(served.url + "/readyz", timeout=30)
            assert r.status_code == 503
            assert r.headers["retry-after"] == "5"
            assert r.json()["title"] == "StoreUnavailableError"
            assert httpx.get(served.url + "/healthz").status_code == 200  # the process is up
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    wait_until(lambda: httpx.get(served.url + "/readyz").status_code == 200, 30, "recovery")
    with client(served.url, key) as c:
        assert c.get("/v1/conversations").json() == {"conversations": []}
