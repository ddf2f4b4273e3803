"""A real local HTTP server speaking the rerank protocol, scripted for tests.

`POST /v1/rerank {model, query, documents, top_n}` → `{"results": [{index, relevance_score}]}`.
It scores a document by how often it holds `favourite` (a word the test chooses), so a test
knows the order it must see; `behaviour` switches it to one of a reranker's failure modes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RerankServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.favourite = ""
        self.behaviour = "ok"  # ok | slow | 401 | 500 | not_json | no_results | bad_index
        self.delay_s = 2.0
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        documents = body["documents"]
        scores = [d.lower().count(self.favourite.lower()) + 1 / (i + 2)
                  for i, d in enumerate(documents)]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:body["top_n"]]
        results: list[dict[str, Any]] = [{"index": i, "relevance_score": scores[i]}
                                         for i in order]
        if self.behaviour == "slow":
            time.sleep(self.delay_s)
        if self.behaviour == "401":
            return 401, b'{"error": {"message": "invalid api key"}}'
        if self.behaviour == "500":
            return 500, b'{"error": "boom"}'
        if self.behaviour == "not_json":
            return 200, b"<html>gateway</html>"
        if self.behaviour == "no_results":
            return 200, json.dumps({"data": results}).encode()
        if self.behaviour == "bad_index":
            results[0]["index"] = len(documents) + 3
        return 200, json.dumps({"model": body["model"], "results": results}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: RerankServer

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path,
                                     "authorization": self.headers.get("Authorization"),
                                     **body})
        status, raw = self.server.answer(body)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout tests)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def rerank_server() -> Iterator[RerankServer]:
    server = RerankServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
