"""GET /api/health: whether this process reaches its database, cache and Milvus now, and how
far its local model is (never a 503: a lookup goes on without it)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import Client

from kbplatform.local_model import publish
from retrieval.index.health import LocalModelHealth, crossed_languages, local_model_health
from retrieval.index.milvus.connection import reset_connection

OFF = {"local_model": {"state": "off", "detail": "no server runs it for this process "
                                                 "(KB_LOCAL_MODEL_URL is empty)"},
       "crossed_languages": "not_bridged"}


@pytest.fixture(autouse=True)
def _no_models(settings: Any) -> None:
    settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", ""
    settings.KB_LOCAL_MODEL = True


@pytest.mark.django_db
def test_health_answers_ok_without_a_key(store: Any) -> None:
    response = Client().get("/api/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok",
                               "checks": {"database": "ok", "cache": "ok", "milvus": "ok"},
                               **OFF}


@pytest.mark.django_db
def test_milvus_not_answering_is_503_naming_the_part_and_nothing_more(
        store: Any, settings: Any) -> None:
    serving = settings.MILVUS_URI
    settings.MILVUS_URI, settings.MILVUS_TIMEOUT_SECONDS = "http://127.0.0.1:1", 2
    reset_connection()
    try:
        response = Client().get("/api/health")
    finally:
        settings.MILVUS_URI = serving  # the store fixture cleans up the real one after
        reset_connection()

    assert response.status_code == 503
    assert response.json() == {
        "code": "unavailable", "message": "not answering: milvus",
        "extra": {"checks": {"database": "ok", "cache": "ok", "milvus": "unavailable"}, **OFF}}



class _Models(BaseHTTPRequestHandler):
    """llama.cpp's server as the probe sees it: GET /v1/models."""

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        body = json.dumps({"object": "list", "data": [{"id": "local"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def _model_server(settings: Any) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"{host}:{port}"]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db
def test_a_local_model_that_answers_bridges_crossed_languages(store: Any, settings: Any) -> None:
    with _model_server(settings) as url:
        settings.KB_LOCAL_MODEL_URL = url
        response = Client().get("/api/health")
    assert response.status_code == 200
    assert response.json()["local_model"] == {"state": "ready", "detail": "it answers"}
    assert response.json()["crossed_languages"] == "local_model"


def test_a_local_model_that_is_down_is_named_and_a_chat_model_still_bridges(
        settings: Any) -> None:
    with _model_server(settings) as url:
        settings.KB_LOCAL_MODEL_URL = url
    assert local_model_health().state == "down"  # its server is gone
    settings.KB_CHAT_BASE_URL = "https://llm.example.com/v1"
    assert crossed_languages(local_model_health()) == "chat_model"


def test_a_local_model_busy_with_another_request_is_busy_not_down(settings: Any) -> None:
    """llama.cpp's server answers one request at a time: it takes the connection and answers
    once the completion it computes ends."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        settings.KB_OUTBOUND_ALLOWED_HOSTS = [f"127.0.0.1:{port}"]
        settings.KB_LOCAL_MODEL_URL = f"http://127.0.0.1:{port}/v1"
        assert local_model_health().state == "busy"


def test_the_demos_preparation_is_told_while_its_model_does_not_answer_yet(
        settings: Any, tmp_path: Any) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}/v1"
    settings.VAR_DIR, settings.KB_LOCAL_MODEL_URL = tmp_path, url
    settings.KB_OUTBOUND_ALLOWED_HOSTS = [url.split("/")[2]]
    publish(tmp_path, url=url, state="building", detail="llama-cpp-python")
    assert local_model_health() == LocalModelHealth("building", "llama-cpp-python")
    publish(tmp_path, url=url, state="failed", detail="assembling failed")
    assert local_model_health().detail == "assembling failed"
    publish(tmp_path, url="http://127.0.0.1:1/v1", state="loading", detail="")  # another one
    assert local_model_health().state == "down"


def test_a_deployment_that_opted_out_says_so(settings: Any) -> None:
    settings.KB_LOCAL_MODEL = False
    assert local_model_health().detail == "KB_LOCAL_MODEL=false"
