"""A real local HTTP server answering JSON POSTs by script: the base of the test servers that
stand in for external endpoints (rerank, chat completions).

A subclass's `answer(body)` returns (status, raw body); every request is kept in `requests`
with its path and Authorization header, so a test reads what was sent. While it serves, its
own 127.0.0.1:port is a host the outbound policy allows (KB_OUTBOUND_ALLOWED_HOSTS), as a
deployment names a model served on its machine; `allowed=False` leaves it refused.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from django.conf import settings


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.trickle_s = 0.0  # > 0: the answer, headers too, one byte every this many seconds

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path,
                                     "authorization": self.headers.get("Authorization"),
                                     **body})
        status, raw = self.server.answer(body)
        try:
            if self.server.trickle_s:
                self._trickle(status, raw)
                return
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout tests)

    def _trickle(self, status: int, raw: bytes) -> None:
        answer = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw
        for byte in answer:
            self.wfile.write(bytes([byte]))
            time.sleep(self.server.trickle_s)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


Server = TypeVar("Server", bound=ScriptedServer)


@contextmanager
def serving(server: Server, *, allowed: bool = True) -> Iterator[Server]:
    """`server` answering on its own thread until the block ends; `allowed`: its host:port
    allowed by the outbound policy meanwhile."""
    # The list in force when it starts, changed in place and given back: a test's own
    # override of the setting (pytest-django's `settings`) stays the test's.
    hosts: list[str] = settings.KB_OUTBOUND_ALLOWED_HOSTS
    entry = f"127.0.0.1:{server.server_address[1]}"
    if allowed:
        hosts.append(entry)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at the end of every test.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        if allowed:
            hosts.remove(entry)
