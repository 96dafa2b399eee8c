"""Redis for the tests: the shared server's URL, unique key prefixes, and private servers.

``CONTEXTWRIGHT_TEST_REDIS`` names the shared server (default
``redis://127.0.0.1:6379/0``; CI starts one). Every test uses its own key prefix
(`unique_prefix`), so tests and other users of that server never see each
other's keys. A test that stops or kills Redis starts its own `PrivateRedis` on
a free port, never touching the shared one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid


def shared_url() -> str:
    return os.environ.get("CONTEXTWRIGHT_TEST_REDIS", "redis://127.0.0.1:6379/0")


def unique_prefix() -> str:
    return f"cwtest:{uuid.uuid4().hex[:10]}:"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server subprocess of our own, to kill, pause and restart."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (CI installs it: .ci/run)"
        self.binary = binary
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="cw-redis-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.01)  # startup only
        client.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
