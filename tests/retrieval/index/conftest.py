"""Local endpoints the index tests talk to: real HTTP servers, never mocks of our code."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from retrieval.index.embedders import reset_embedders

MODEL = "multilingual-e5-small-q4"


class StubEndpoint(ThreadingHTTPServer):
    """A tiny real HTTP endpoint that answers every POST with one fixed status."""

    def __init__(self, status: int) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.status = status
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _StubHandler(BaseHTTPRequestHandler):
    server: StubEndpoint

    def do_POST(self) -> None:  # noqa: N802 (the http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"authorization": self.headers.get("Authorization"),
                                     **body})
        status = self.server.status
        if status == 200:  # a broken server: one vector, whatever was asked
            payload: dict[str, Any] = {"object": "list", "model": body["model"], "data": [
                {"object": "embedding", "index": 0, "embedding": [0.6, 0.8]}]}
        elif status in (401, 403):
            payload = {"error": {"message": "Incorrect API key provided: sk-wr***ng.",
                                 "type": "invalid_request_error", "param": None,
                                 "code": "invalid_api_key"}}
        else:
            payload = {"error": {"message": "upstream exploded", "type": "server_error",
                                 "param": None, "code": None}}
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def stub() -> Iterator[Callable[[int], StubEndpoint]]:
    servers: list[StubEndpoint] = []

    def start(status: int) -> StubEndpoint:
        server = StubEndpoint(status)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def openai_settings(settings) -> Iterator[Callable[[str], None]]:  # type: ignore[no-untyped-def]
    """Configure the process-wide embedder as an OpenAI-compatible endpoint."""

    def configure(url: str) -> None:
        settings.KB_EMBEDDER = "openai"
        settings.KB_EMBEDDING_BASE_URL = url
        settings.KB_EMBEDDING_API_KEY = "sk-wrong-key"
        settings.KB_EMBEDDING_MODEL = MODEL
        settings.KB_EMBEDDING_DIMENSIONS = 8
        reset_embedders()

    yield configure
    reset_embedders()


