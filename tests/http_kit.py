"""A real contextwright service on 127.0.0.1 for the HTTP tests, and a client that checks it.

`serving(settings)` runs the app on uvicorn in a thread, on a socket bound to a
free port, waits until ``/healthz`` answers, and captures what uvicorn and the
service log (``Served.logs``: to check that no key is ever written there).
`add_key` stores a key straight through the store's `ApiKeys` role (the CLI's
own path is tested separately). `SpecCheck` validates every response an httpx
client receives against the service's own ``/openapi.json`` (its status must be
documented for the operation, and its body must match the schema): give
``event_hooks={"response": [check]}`` to a client.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema
import uvicorn

from contextwright.interfaces._keys import new_key
from contextwright.interfaces.cli._serve import _open_backend
from contextwright.interfaces.http import Settings, create_app

LOGGERS = ("uvicorn", "uvicorn.access", "uvicorn.error", "contextwright", "fastapi")


class _Collect(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(self.format(record))
        if record.exc_info:
            self.sink.append(logging.Formatter().formatException(record.exc_info))


@dataclass
class Served:
    url: str
    settings: Settings
    app: Any
    logs: list[str] = field(default_factory=list)


def wait_until(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def serving(settings: Settings) -> Iterator[Served]:
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, access_log=True, lifespan="on")
    server = uvicorn.Server(config)
    served = Served(f"http://127.0.0.1:{port}", settings, app)
    handler = _Collect(served.logs)
    levels = {}
    for name in LOGGERS:
        logger = logging.getLogger(name)
        levels[name] = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="uvicorn to start")
        assert thread.is_alive(), "the server failed to start:\n" + "\n".join(served.logs)
        wait_until(lambda: healthy(served.url), what="/healthz")
        yield served
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).setLevel(levels[name])


def add_key(db: str, tenant: str, name: str = "") -> str:
    """A new key of ``tenant``, stored in the database ``db`` names (a path or a URL)."""

    async def store() -> str:
        backend = _open_backend(db)
        try:
            key, record = new_key(tenant, name)
            assert backend.keys is not None
            await backend.keys.create_key(record)
            return key
        finally:
            await backend.aclose()

    return asyncio.run(store())


def revoke(db: str, key: str) -> None:
    async def run() -> None:
        backend = _open_backend(db)
        try:
            assert backend.keys is not None
            assert await backend.keys.revoke_key(key.split("_")[1])
        finally:
            await backend.aclose()

    asyncio.run(run())


class SpecCheck:
    """Validates responses against the OpenAPI document served at ``url``."""

    def __init__(self, url: str) -> None:
        self.spec = httpx.get(url + "/openapi.json").json()
        self.routes = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path)
            for path in self.spec["paths"]
        ]
        self.checked = 0

    def operation(self, method: str, path: str) -> dict[str, Any]:
        for pattern, template in self.routes:
            if pattern.match(path):
                ops = self.spec["paths"][template]
                assert method.lower() in ops, f"{method} {template} is not documented"
                return dict(ops[method.lower()])
        raise AssertionError(f"{path} matches no documented path")

    def __call__(self, response: httpx.Response) -> None:
        response.read()
        op = self.operation(response.request.method, response.request.url.path)
        status = str(response.status_code)
        assert status in op["responses"], (
            f"{response.request.method} {response.request.url.path} answered {status}, "
            f"documented: {sorted(op['responses'])}: {response.text[:300]}"
        )
        ctype = response.headers.get("content-type", "").split(";")[0]
        content = op["responses"][status].get("content", {})
        assert ctype in content, f"{ctype} is not documented for {status}: {sorted(content)}"
        schema = content[ctype].get("schema")
        if schema is not None and ctype.endswith("json"):
            doc = {**schema, "components": self.spec["components"]}
            jsonschema.Draft202012Validator(doc).validate(response.json())
        self.checked += 1


def client(url: str, key: str | None, check: SpecCheck | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    hooks = {"response": [check]} if check is not None else {}
    return httpx.Client(base_url=url, headers=headers, event_hooks=hooks, timeout=30.0)
