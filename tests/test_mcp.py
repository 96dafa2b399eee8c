"""The MCP server through the SDK's own client: over stdio and over streamable HTTP.

Over stdio the client spawns a real ``python -m contextwright mcp --db FILE``
process, as Claude Desktop or Claude Code would. Over HTTP the server runs on
real uvicorn on a loopback socket, with keys made by ``contextwright keys
create`` in the test's database: a request without a key, with a wrong one or
with a revoked one gets 401 and nothing else; two tenants never see each
other's conversations. Both transports run the same session (`exercise`):
list the tools, append, build, recall an early turn the build left out,
memory add → search, compact preview, read the summary and receipt resources.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2  # the MCP SDK's HTTP client
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from contextwright import MissingDependencyError
from contextwright._errors import StoreUnavailableError
from contextwright.interfaces._keys import new_key
from contextwright.interfaces.cli import main
from contextwright.interfaces.mcp import Settings, create_server
from contextwright.interfaces.mcp._gate import KeyGate
from contextwright.interfaces.mcp._server import uvicorn_server
from contextwright.interfaces.mcp._tools import RESOURCES, TOOLS
from contextwright.stores import SQLiteBackend

ROOT = Path(__file__).resolve().parents[1]
EARLY = "My locker code is 4417 and my cat is called Biscuit."
BUDGET = 400


def _history() -> list[dict[str, Any]]:
    """An early turn worth recalling, then enough small talk to push it out of a small window."""
    out = [
        {"role": "user", "content": EARLY},
        {"role": "assistant", "content": "Noted: locker 4417, cat Biscuit."},
    ]
    for i in range(40):
        out.append({"role": "user", "content": f"Tell me fact number {i} about the weather."})
        out.append(
            {"role": "assistant", "content": f"Weather fact {i}: clouds are water droplets."}
        )
    return out


def _refused(result: Any, error: str) -> None:
    """A tool call that failed with ``error`` (a typed error's name) in its text."""
    assert result.is_error
    assert error in result.content[0].text


def _data(result: Any) -> Any:
    """A tool call's structured result; fails with the tool's error text if it is an error."""
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, text
    return result.structured_content


async def exercise(session: ClientSession, conversation: str = "c1") -> None:
    """One session of a client that uses every tool and both resources."""
    listed = await session.list_tools()
    assert sorted(t.name for t in listed.tools) == sorted(TOOLS)
    for tool in listed.tools:
        assert len(tool.description or "") > 60, tool.name
    build_schema = next(t for t in listed.tools if t.name == "build_context").input_schema
    assert set(build_schema["required"]) == {"conversation", "message"}
    templates = await session.list_resource_templates()
    assert sorted(t.uri_template for t in templates.resource_templates) == sorted(RESOURCES)

    appended = _data(
        await session.call_tool(
            "append_messages", {"conversation": conversation, "messages": _history()}
        )
    )
    assert [m["seq"] for m in appended["messages"]] == list(range(1, 83))

    question = "Which number opens my locker?"
    built = _data(
        await session.call_tool(
            "build_context",
            {"conversation": conversation, "message": question, "budget": BUDGET},
        )
    )
    messages = built["request"]["messages"]
    users = [m for m in messages if m["role"] == "user"]
    assert users[-1]["content"] == question  # the current message is the last user content
    assert EARLY not in json.dumps(messages)  # the window left it out: recall brings it back
    receipt = built["receipt"]
    assert receipt["budget"] == BUDGET
    assert 0 < receipt["used"] <= BUDGET
    assert any(b["status"] == "included" for b in receipt["blocks"])

    turns = _data(
        await session.call_tool(
            "recall", {"conversation": conversation, "query": "locker code", "limit": 3}
        )
    )["turns"]
    assert (turns[0]["seq"], turns[0]["text"]) == (1, EARLY)

    for language in ("German", "French"):  # the same key: the newer replaces the older
        added = _data(
            await session.call_tool(
                "add_memory",
                {"content": f"Prefers answers in {language}.", "user": "ann", "key": "language"},
            )
        )
    found = _data(
        await session.call_tool("search_memory", {"query": "prefers answers", "user": "ann"})
    )["memories"]
    assert [h["memory"]["id"] for h in found] == [added["id"]]
    nobody = _data(
        await session.call_tool("search_memory", {"query": "prefers answers", "user": "bob"})
    )
    assert nobody["memories"] == []

    preview = _data(
        await session.call_tool("compact", {"conversation": conversation, "preview": True})
    )
    assert preview["preview"] is True
    assert preview["tokens_after"] <= preview["tokens_before"]

    summary = await session.read_resource(f"contextwright://conversations/{conversation}/summary")
    coverage = json.loads(summary.contents[0].text)["coverage"]
    assert coverage["last_seq"] == 83  # the history and the built message
    receipt_doc = await session.read_resource(
        f"contextwright://conversations/{conversation}/receipt"
    )
    latest = json.loads(receipt_doc.contents[0].text)
    assert latest["receipt"]["budget"] == BUDGET
    assert latest["receipt"]["used"] == receipt["used"]

    bad = await session.call_tool(
        "append_messages", {"conversation": conversation, "messages": [{"role": "wizard"}]}
    )
    _refused(bad, "InvalidMessageError")
    tiny = await session.call_tool(
        "build_context", {"conversation": conversation, "message": "hi", "budget": 5}
    )
    _refused(tiny, "BudgetError")
    listed = _data(await session.call_tool("list_conversations", {}))["conversations"]
    assert [(c["id"], c["last_seq"]) for c in listed] == [(conversation, 83)]  # nothing written


# -- stdio -----------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in [str(ROOT / "src"), os.environ.get("PYTHONPATH")] if p)
    return {**os.environ, "PYTHONPATH": path}


@asynccontextmanager
async def stdio_session(*args: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextwright", "mcp", *args], env=_env()
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def test_stdio_session(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"

    async def run() -> None:
        async with stdio_session("--db", str(db)) as session:
            await exercise(session)
        # another tenant on the same file sees none of it
        async with stdio_session("--db", str(db), "--tenant", "other") as session:
            listed = _data(await session.call_tool("list_conversations", {}))
            assert listed["conversations"] == []
            missing = await session.call_tool("recall", {"conversation": "c1", "query": "locker"})
            _refused(missing, "NotFoundError")

    asyncio.run(asyncio.wait_for(run(), 60))


# -- streamable HTTP -------------------------------------------------------------------------


def _key(db: Path, tenant: str) -> tuple[str, str]:
    """A new key of ``tenant`` stored in ``db``: (the key, its id)."""
    key, record = new_key(tenant, "test")

    async def store() -> None:
        async with SQLiteBackend(db).backend() as backend:
            assert backend.keys is not None
            await backend.keys.create_key(record)

    asyncio.run(store())
    return key, record.key_id


def _revoke(db: Path, key_id: str) -> None:
    async def revoke() -> None:
        async with SQLiteBackend(db).backend() as backend:
            assert backend.keys is not None
            assert await backend.keys.revoke_key(key_id)

    asyncio.run(revoke())


@contextmanager
def http_server(db: Path) -> Iterator[str]:
    """``contextwright mcp --transport http`` on real uvicorn, on a loopback socket bound here."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn_server(Settings(db=str(db), transport="http", port=port))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:  # a condition polled with a deadline
        assert thread.is_alive(), "the server stopped while starting"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@asynccontextmanager
async def http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_http_session_per_tenant(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    key_a, _ = _key(db, "acme")
    key_b, _ = _key(db, "globex")

    async def run(url: str) -> None:
        async with http_session(url, key_a) as session:
            await exercise(session)
        async with http_session(url, key_b) as session:  # the same ids, another tenant
            listed = _data(await session.call_tool("list_conversations", {}))
            assert listed["conversations"] == []
            _refused(
                await session.call_tool("recall", {"conversation": "c1", "query": "locker"}),
                "NotFoundError",
            )
            found = _data(
                await session.call_tool("search_memory", {"query": "French", "user": "ann"})
            )
            assert found["memories"] == []
            with pytest.raises(MCPError, match="NotFoundError"):
                await session.read_resource("contextwright://conversations/c1/summary")

    with http_server(db) as url:
        asyncio.run(asyncio.wait_for(run(url), 60))


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "0"}},
}  # fmt: skip
APPEND = {
    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
    "params": {"name": "append_messages", "arguments": {
        "conversation": "c1", "messages": [{"role": "user", "content": "written?"}]}},
}  # fmt: skip
ACCEPT = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}


def test_http_without_a_valid_key_gets_nothing(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    key, _ = _key(db, "acme")
    revoked, revoked_id = _key(db, "acme")
    unknown, _ = new_key("acme")  # well formed, never stored
    with http_server(db) as url:
        assert (
            httpx.post(
                url, json=INITIALIZE, headers={**ACCEPT, "authorization": f"Bearer {key}"}
            ).status_code
            == 200
        )
        _revoke(db, revoked_id)  # while the server runs: the next request is refused
        for auth in [
            None,
            "Bearer",
            "Basic " + key,
            "Bearer nonsense",
            f"Bearer {unknown}",
            f"Bearer {revoked}",
        ]:
            headers = {**ACCEPT, **({"authorization": auth} if auth else {})}
            for body in (INITIALIZE, APPEND):
                r = httpx.post(url, json=body, headers=headers)
                assert r.status_code == 401, (auth, r.text)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.headers["content-type"] == "application/problem+json"
                assert set(r.json()) == {"type", "title", "status", "detail"}
                assert key not in r.text
                assert revoked not in r.text

        async def sdk_client_fails(secret: str) -> None:
            with pytest.raises(BaseException) as refused:  # noqa: PT011, the SDK wraps it in groups
                async with http_session(url, secret):
                    pass
            assert _has(refused.value, MCPError), refused.value

        asyncio.run(asyncio.wait_for(sdk_client_fails(revoked), 30))

        async def nothing_written() -> None:
            async with http_session(url, key) as session:
                assert (
                    _data(await session.call_tool("list_conversations", {}))["conversations"] == []
                )

        asyncio.run(asyncio.wait_for(nothing_written(), 30))


def _has(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``exc`` is a ``kind``, or an exception group holding one at any depth."""
    if isinstance(exc, kind):
        return True
    inner = getattr(exc, "exceptions", ())
    return any(_has(e, kind) for e in inner)


# -- the command, the gate, the optional dependency ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--transport", "http", "--tenant", "acme"], "--tenant: over http the tenant comes"),
        (["--model", "gpt-nonesuch"], "--model: unknown model"),
        (["--db", "/nonexistent/folder/cw.db"], "cannot open the store"),
        (["--transport", "http", "--port", "0"], "--port must be between"),
    ],
)
def test_the_command_refuses_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad options and an unopenable store stop before any transport starts."""
    assert main(["mcp", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"contextwright: error: {says}"), err
    assert len(err.splitlines()) == 1


def test_gate_answers_503_when_the_store_is_down() -> None:
    reached = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    async def verify(key: str) -> str | None:
        raise StoreUnavailableError("the database is restarting")

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=KeyGate(inner, verify))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/mcp", json=INITIALIZE, headers={"authorization": "Bearer k"})

    r = asyncio.run(run())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert reached == []


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails as if absent
    with pytest.raises(MissingDependencyError, match=r"contextwright\[mcp\]"):
        create_server(Settings())


def test_the_command_without_the_sdk_says_which_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`contextwright mcp` on an install without the extra: one line, no traceback (a
    fresh clone's `make demo` install has neither mcp nor anyio)."""
    from contextwright.interfaces.cli import main

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)
    monkeypatch.setitem(sys.modules, "anyio", None)
    assert main(["mcp", "--db", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert "contextwright[mcp]" in err
    assert "Traceback" not in err


def test_the_command_line_does_not_import_the_sdk() -> None:
    code = (
        "import sys, contextwright, contextwright.interfaces.cli, contextwright.interfaces.mcp; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'mcp', 'uvicorn', 'starlette'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_http_command_serves_behind_keys(tmp_path: Path) -> None:
    """``contextwright mcp --transport http`` as a process: it listens, and only with a key."""
    db = tmp_path / "cw.db"
    key, _ = _key(db, "acme")
    with socket.socket() as probe:  # a free port; the server binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["mcp", "--transport", "http", "--db", str(db), "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextwright", *command],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:  # a condition polled with a deadline: the port answers
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            try:
                refused = httpx.post(url, json=INITIALIZE, headers=ACCEPT)
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert refused.status_code == 401
        auth = {**ACCEPT, "authorization": f"Bearer {key}"}
        accepted = httpx.post(url, json=INITIALIZE, headers=auth)
        assert accepted.status_code == 200
        assert accepted.json()["result"]["serverInfo"]["name"] == "contextwright"
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.stderr is not None
    assert key not in proc.stderr.read().decode()  # the key is never logged
