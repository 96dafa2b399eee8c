"""A real HTTP server on 127.0.0.1 for the client tests, speaking JSON.

Each test module gives `LoopbackServer` a ``respond(server, path, body)`` that
returns ``(status, payload)`` in its provider's protocol; the server records every
request (path, lower-cased headers, parsed body), and tests steer it through
``status``, ``delay`` (a handler sleeps, released at teardown; ``answered`` counts
the requests that got past it) and whatever other
attributes their ``respond`` reads (``answer``, ``drop_one``…). `serving` runs it on
a daemon thread for the length of a fixture. No client code is patched: the
official SDKs talk to it over a socket.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[["LoopbackServer", str, dict[str, Any]], tuple[int, dict[str, Any]]]

# The error body OpenAI-compatible servers send; the SDK raises on the status.
CHAT_ERROR = {
    "error": {"message": "the model crashed", "type": "server_error", "param": None, "code": None}
}


def chat_completion(model: str, answer: str) -> dict[str, Any]:
    """A minimal but complete ``chat.completion`` object."""
    return {
        "id": "chatcmpl-01", "object": "chat.completion", "created": 1_700_000_000, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": answer, "refusal": None}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
    }  # fmt: skip


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, respond: Respond, *, base_path: str = "", answer: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.base_path = base_path
        self.requests: list[dict[str, Any]] = []
        self.answer = answer
        self.delay = 0.0
        self.status = 200
        self.drop_one = False
        self.release = threading.Event()  # set on teardown: a sleeping handler returns
        self.answered = 0  # requests answered (past ``delay``)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}{self.base_path}"


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.requests.append({"path": self.path, "headers": headers, "body": body})
        if self.server.delay:
            self.server.release.wait(self.server.delay)
        self.server.answered += 1
        status, payload = self.server.respond(self.server, self.path, body)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (deadline) and closed the socket
            pass


@contextmanager
def serving(server: LoopbackServer) -> Iterator[LoopbackServer]:
    """Run ``server`` on a daemon thread; stop it, releasing sleeping handlers, on exit."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
