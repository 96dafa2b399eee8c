"""How many round trips an agent turn costs on PostgreSQL, and that the fewer still mean the same.

The backend's hot calls are counted through a TCP proxy in front of the test
server that counts *round trips*: each time the server answers after the
client sent something. A warm append is two (``BEGIN``, the row lock and the
ids already stored, in one flight; the inserts, the update and ``COMMIT`` in
the next: ``PostgresBackend.pipelined``), a search two (the statistics with
the term counts; the ranking with the outlines around the hits). Then what
must not change with them: a retry by id stores nothing twice, one with
other content stores nothing at all and leaves the connection usable, writers
racing to create one conversation with the same ids store each once, and the
outlines a search returns are those around its hits less the ``known`` ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright import Message
from contextwright._errors import InvalidMessageError
from contextwright.stores.postgres import PostgresBackend

T, U = "acme", "ann"
WORDS = ["budget", "plan", "deploy", "server", "worker", "cache", "index", "search", "kitten"]
WORDS += ["预算", "计划"]


class CountingProxy:
    """A TCP proxy to the server of ``url`` that counts the server's answers to the client."""

    def __init__(self, url: str) -> None:
        info = psycopg.conninfo.conninfo_to_dict(url)
        host, port = str(info.get("host") or "localhost"), int(info.get("port") or 5432)
        if host.startswith("/"):
            self.upstream: Any = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
        else:
            self.upstream = (socket.AF_INET, (host, port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        user, password = quote(str(info.get("user") or "")), quote(str(info.get("password") or ""))
        port = self.listener.getsockname()[1]
        self.url = f"postgresql://{user}:{password}@127.0.0.1:{port}/{quote(str(info['dbname']))}"
        self.round_trips = 0
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        peer: dict[socket.socket, tuple[socket.socket, bool]] = {}
        asked: set[socket.socket] = set()  # client sockets that sent since their last answer
        while not self._stop:
            for key, _ in self._sel.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.listener:
                    client, _ = self.listener.accept()
                    server = socket.socket(self.upstream[0], socket.SOCK_STREAM)
                    server.connect(self.upstream[1])
                    peer[client], peer[server] = (server, True), (client, False)
                    for s in (client, server):
                        self._sel.register(s, selectors.EVENT_READ)
                    continue
                if sock not in peer:  # closed with its peer earlier in this batch
                    continue
                other, from_client = peer[sock]
                data = b""
                with contextlib.suppress(OSError):
                    data = sock.recv(65536)
                if not data:
                    for s in (sock, other):
                        self._sel.unregister(s)
                        s.close()
                        peer.pop(s, None)
                    continue
                if from_client:
                    asked.add(sock)
                elif other in asked:
                    asked.discard(other)
                    self.round_trips += 1
                with contextlib.suppress(OSError):
                    other.sendall(data)

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.listener.close()


@pytest.fixture
def proxy(pg_url: str) -> Iterator[CountingProxy]:
    p = CountingProxy(pg_url)
    yield p
    p.close()


async def counted(proxy: CountingProxy, coro: Any) -> tuple[Any, int]:
    """What ``coro`` returns, and the round trips it took.

    The proxy counts a round trip before it forwards the server's answer, so once
    ``coro`` has its answers every one of them is counted: nothing to wait for.
    The pool (one connection, already open) sends nothing in between.
    """
    before = proxy.round_trips
    out = await coro
    return out, proxy.round_trips - before


def test_an_append_and_a_search_take_two_round_trips_each(proxy: CountingProxy) -> None:
    async def main() -> None:
        b = PostgresBackend(proxy.url, max_size=1)
        try:
            await b.version("c", tenant=T)  # migrated, connected: not counted
            texts = [f"{WORDS[i % 11]} {WORDS[(3 * i) % 11]} note {i}" for i in range(30)]
            _, trips = await counted(
                proxy, b.append("c", [Message.user(texts[0])], tenant=T, user=U)
            )
            assert trips == 3  # a new conversation: its row is made in a round trip of its own
            rest = [Message.assistant(t) for t in texts[1:]]
            await b.append("c", rest, tenant=T, user=U)
            reply = Message.assistant("the budget plan is approved")
            written, trips = await counted(proxy, b.append("c", [reply], tenant=T, user=U))
            assert trips == 2
            assert [m.seq for m in written.value] == [31]
            again, trips = await counted(proxy, b.append("c", [reply], tenant=T, user=U))
            assert trips == 2
            assert again.value[0].seq == 31
            assert again.version == written.version
            (hits, outlines), trips = await counted(
                proxy, b.search_outlines("c", "budget plan", tenant=T, limit=5, around=1)
            )
            assert trips == 2
            assert hits
            assert outlines
            found, trips = await counted(proxy, b.search("c", "kitten", tenant=T, limit=3))
            assert trips == 2
            assert found
        finally:
            await b.aclose()

    asyncio.run(main())


def test_a_retry_with_other_content_stores_nothing_and_the_connection_goes_on(pg_url: str) -> None:
    async def main() -> None:
        b = PostgresBackend(pg_url, max_size=1)  # one connection: a failure must leave it usable
        try:
            first = Message.user("first", id="m1")
            await b.append("c", [first], tenant=T, user=U)
            v = await b.version("c", tenant=T)
            for bad in (
                [Message.user("new", id="m2"), Message.user("changed", id="m1")],
                [Message.user("new", id="m2"), Message.user("new but other", id="m2")],
            ):
                with pytest.raises(InvalidMessageError) as caught:
                    await b.append("c", bad, tenant=T, user=U)
                assert "different content" in str(caught.value)
            with pytest.raises(InvalidMessageError):  # another user's conversation
                await b.append("c", [Message.user("x", id="m3")], tenant=T, user="bob")
            assert await b.version("c", tenant=T) == v
            assert [m.id for m in await b.read("c", tenant=T)] == ["m1"]
            done = await b.append("c", [Message.user("second", id="m2"), first], tenant=T, user=U)
            assert [m.seq for m in done.value] == [2, 1]
            assert done.version == v + 1
        finally:
            await b.aclose()

    asyncio.run(main())


def test_writers_racing_to_create_a_conversation_store_each_id_once(pg_url: str) -> None:
    """Many connections append the same ids to a conversation none of them finds: one makes it."""

    async def main() -> None:
        backends = [PostgresBackend(pg_url) for _ in range(6)]
        try:
            await asyncio.gather(*(b.version("warm", tenant=T) for b in backends))  # pools open
            for round_ in range(3):
                conv = f"c{round_}"
                batch = [Message.user(f"hello {k}", id=f"{conv}-{k}") for k in range(3)]
                out = await asyncio.gather(
                    *(b.append(conv, batch, tenant=T, user=U) for b in backends)
                )
                assert {tuple(m.seq for m in w.value) for w in out} == {(1, 2, 3)}
                stored = await backends[0].read(conv, tenant=T)
                assert [(m.seq, m.id) for m in stored] == [(k + 1, f"{conv}-{k}") for k in range(3)]
                assert await backends[0].version(conv, tenant=T) == 1
        finally:
            for b in backends:
                await b.aclose()

    asyncio.run(main())


@pytest.fixture(scope="module")
def searched() -> Iterator[tuple[str, list[str]]]:
    """A database with one conversation of 60 messages, shared by the property below."""
    from tests import pg

    url = pg.create_database()
    texts = [" ".join(WORDS[(i * k) % 11] for k in range(1, 2 + i % 5)) for i in range(60)]

    async def fill() -> None:
        b = PostgresBackend(url)
        msgs = [Message.user(t) if i % 2 else Message.assistant(t) for i, t in enumerate(texts)]
        await b.append("c", msgs, tenant=T, user=U)
        await b.aclose()

    asyncio.run(fill())
    yield url, texts
    pg.drop_database(url)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    around=st.integers(0, 3),
    before=st.one_of(st.none(), st.integers(1, 70)),
    known=st.one_of(
        st.frozensets(st.integers(-3, 70), max_size=20),
        st.builds(range, st.integers(1, 30), st.integers(30, 70)),
        st.just(()),
    ),
)
def test_the_outlines_are_those_around_the_hits_less_the_known(
    searched: tuple[str, list[str]], query: str, around: int, before: int | None, known: Any
) -> None:
    url, _ = searched

    async def main() -> None:
        b = PostgresBackend(url)
        try:
            hits, outlines = await b.search_outlines(
                "c", query, tenant=T, limit=6, before_seq=before, around=around, known=known
            )
            plain, every = await b.search_outlines(
                "c", query, tenant=T, limit=6, before_seq=before, around=around
            )
            assert hits == plain  # known never changes the hits
            top = 60 if before is None else min(60, before - 1)
            assert all(1 <= seq <= top for seq, _ in hits)
            assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
            wanted = {
                s
                for seq, _ in hits
                for s in range(max(1, seq - around), min(top, seq + around) + 1)
            }
            assert [o.seq for o in every] == sorted(wanted)
            assert [o.seq for o in outlines] == sorted(s for s in wanted if s not in known)
            stored = {o.seq: o for o in await b.read_outline("c", tenant=T)}
            assert all(o == stored[o.seq] for o in every)
        finally:
            await b.aclose()

    asyncio.run(main())
