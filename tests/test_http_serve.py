"""``contextwright serve`` and ``contextwright keys`` as a user runs them: real processes.

- ``keys create`` prints the key alone on its last line; ``keys list`` shows it
  without its secret; ``keys revoke`` makes the running service refuse it.
- ``serve --workers 2`` starts two workers on one SQLite file; requests succeed
  whichever answers, and ``/metrics`` adds up both (multiprocess mode).
- ``--insecure-single-tenant`` warns on stderr and marks every response.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from contextwright.interfaces.http import INSECURE_HEADER, Settings

from .http_kit import client, healthy, serving, wait_until

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "contextwright", *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_process(
    *args: str, log: Path, prom: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if prom is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(prom)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "contextwright", "serve", "--port", str(port), *args],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: healthy(url) or proc.poll() is not None, 60, "serve to start")
        assert proc.poll() is None, log.read_text()
        yield url, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_keys_cli_create_list_revoke(tmp_path: Path) -> None:
    db = str(tmp_path / "keys.db")
    made = cli("keys", "create", "--tenant", "acme", "--name", "ci", "--db", db)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"cw_[0-9a-f]{12}_[A-Za-z0-9_\-]{43}", key)
    key_id, secret = key[3:15], key[16:]
    listed = cli("keys", "list", "--db", db)
    assert key_id in listed.stdout
    assert "acme" in listed.stdout
    assert "active" in listed.stdout
    assert secret not in listed.stdout
    with serving(Settings(db=db, budget=2000)) as served:
        with client(served.url, key) as c:
            assert c.post("/v1/conversations/k/messages", json={
                "messages": [{"role": "user", "content": "hi"}]}).status_code == 200  # fmt: skip
            assert [x["id"] for x in c.get("/v1/conversations").json()["conversations"]] == ["k"]
            revoked = cli("keys", "revoke", key_id, "--db", db)
            assert revoked.returncode == 0, revoked.stderr
            r = c.get("/v1/conversations")
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == "Bearer"
        assert secret not in "\n".join(served.logs)
    assert "revoked" in cli("keys", "list", "--db", db).stdout
    again = cli("keys", "revoke", key_id, "--db", db)
    assert again.returncode == 2
    assert key_id in again.stderr


def test_serve_with_two_workers(tmp_path: Path) -> None:
    db = str(tmp_path / "workers.db")
    key = cli("keys", "create", "--tenant", "w", "--db", db).stdout.strip().splitlines()[-1]
    log, prom = tmp_path / "serve.log", tmp_path / "prom"
    prom.mkdir()
    args = ("--db", db, "--workers", "2", "--budget", "2000")
    with serve_process(*args, log=log, prom=prom) as (url, proc):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        wait_until(lambda: len(children.read_text().split()) >= 2, 30, "two workers")
        # a connection per request, so that the kernel may hand each to either worker
        with client(url, key) as c:
            c.headers["Connection"] = "close"
            for i in range(12):
                msgs = [{"role": "user", "content": f"note {i}", "id": f"n{i}"}]
                assert c.post("/v1/conversations/w/messages", json={"messages": msgs}).is_success
                r = c.post("/v1/conversations/w/context", json={"message": f"and {i}?"})
                assert r.status_code == 200, r.text
            # every append and build, whichever worker took it, is in the store
            assert c.get("/v1/conversations/w").json()["message_count"] == 24
            text = httpx.get(url + "/metrics").text
        found = re.search(r'contextwright_build_seconds_count\{format="openai"\} ([0-9.]+)', text)
        assert found, text[:2000]
        assert float(found.group(1)) == 12.0
        # each worker writes its samples to files of its own, which /metrics adds up
        pids = {f.stem.rsplit("_", 1)[-1] for f in prom.glob("*.db")}
        assert pids, "no worker wrote samples"
        assert pids <= set(children.read_text().split()), pids
    output = log.read_text()
    assert "Started parent process" in output or output.count("Started server process") >= 2
    assert key[16:] not in output
    assert "POST /v1/conversations/w/context" in output


def test_insecure_single_tenant_is_loud(tmp_path: Path) -> None:
    log = tmp_path / "insecure.log"
    db = str(tmp_path / "open.db")
    with serve_process("--db", db, "--insecure-single-tenant", log=log) as (url, _):
        r = httpx.post(url + "/v1/conversations", json={"id": "open"})
        assert r.status_code == 201
        assert r.headers[INSECURE_HEADER].startswith("single-tenant")
        assert httpx.get(url + "/healthz").headers[INSECURE_HEADER]
    assert "NO AUTHENTICATION" in log.read_text()
    # the conversation is tenant "default"'s: a keyed service on the same file shows it to no one
    key = cli("keys", "create", "--tenant", "other", "--db", db).stdout.strip().splitlines()[-1]
    with serving(Settings(db=db)) as served, client(served.url, key) as c:
        assert c.get("/v1/conversations").json() == {"conversations": []}
        assert INSECURE_HEADER.lower() not in c.get("/healthz").headers
