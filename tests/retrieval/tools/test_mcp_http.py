"""/mcp's edges, in-process through the WSGI app: every refusal of the transport is a JSON-RPC
error with the API's error in `data` (never the SDK's plain text), and the Host check follows
the production ALLOWED_HOSTS, which does not name the test client's `testserver`."""

from __future__ import annotations

import io
import json
import re
import runpy
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

import kbplatform
from kbplatform.parsers import MAX_DEPTH
from kbplatform.wsgi import application
from retrieval.tools.mcp_http import MAX_BODY_BYTES

ROOT = Path(kbplatform.__file__).resolve().parent.parent
PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


def post(body: bytes = PING, *, method: str = "POST", content_type: str = "application/json",
         host: str = "localhost", length: bool = True, path: str = "/mcp", **headers: str
         ) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body) of one request to /mcp; `length=False` sends the body
    without a Content-Length, as a server passes a chunked one on."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "HTTP_HOST": host,
        "CONTENT_TYPE": content_type, "HTTP_ACCEPT": "application/json, text/event-stream",
        "wsgi.input": io.BytesIO(body), "wsgi.input_terminated": True,
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()}}
    if length:
        environ["CONTENT_LENGTH"] = str(len(body))
    setup_testing_defaults(environ)
    answer: dict[str, Any] = {}

    def start_response(status: str, response_headers: list[tuple[str, str]],
                       exc_info: Any = None) -> None:
        answer["status"] = int(status.split()[0])
        answer["headers"] = {name.lower(): value for name, value in response_headers}

    raw = b"".join(application(environ, start_response))
    return answer["status"], answer["headers"], json.loads(raw)


REFUSED = {
    "no-such-profile": ({"path": "/mcp/nope"}, 404, "not_found", -32600),
    "no-such-profile-get": ({"path": "/mcp/research/x", "method": "GET"}, 404, "not_found",
                            -32600),
    "get": ({"method": "GET"}, 405, "method_not_allowed", -32600),
    "foreign-host": ({"host": "evil.example"}, 421, "invalid_host", -32600),
    "foreign-origin": ({"ORIGIN": "http://evil.example"}, 403, "invalid_origin", -32600),
    "text-plain": ({"content_type": "text/plain"}, 415, "unsupported_media_type", -32600),
    "no-content-type": ({"content_type": ""}, 415, "unsupported_media_type", -32600),
    "too-large": ({"body": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "'
                   + b"a" * MAX_BODY_BYTES + b'"}}'}, 413, "too_large", -32600),
    "too-large-chunked": ({"body": b" " * (MAX_BODY_BYTES + 1), "length": False}, 413,
                          "too_large", -32600),
    "not-json": ({"body": b"ping"}, 400, "parse_error", -32700),
    "empty": ({"body": b""}, 400, "parse_error", -32700),
    "1000-nested": ({"body": b"[" * 1000 + b"]" * 1000}, 400, "parse_error", -32700),
    "too-deep-arguments": ({"body": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                            b'"params": {"name": "lookup_knowledge", "arguments": {"q": '
                            + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}}}"},
                           400, "parse_error", -32700),
    "lone-surrogate": ({"body": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                        b'"params": {"name": "lookup_knowledge", "arguments": '
                        b'{"query": "\\ud800"}}}'}, 400, "parse_error", -32700),
    "not-utf8": ({"body": b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}'}, 400,
                 "parse_error", -32700),
    "not-an-object": ({"body": b"[1, 2]"}, 400, "invalid_request", -32600),
    "not-json-rpc": ({"body": b'{"id": 1, "method": "ping"}'}, 400, "invalid_request",
                     -32600),
}


@pytest.mark.parametrize(("asked", "status", "code", "rpc_code"), REFUSED.values(),
                         ids=REFUSED.keys())
def test_every_refusal_of_the_transport_is_a_json_rpc_error(
        asked: dict[str, Any], status: int, code: str, rpc_code: int) -> None:
    got, headers, body = post(**asked)
    assert got == status
    assert headers["content-type"] == "application/json"
    assert body == {"jsonrpc": "2.0", "id": None, "error": {
        "code": rpc_code, "message": body["error"]["message"],
        "data": {"code": code, "message": body["error"]["message"], "extra": {}}}}
    if status == 405:
        assert headers["allow"] == "POST"


def test_a_message_the_transport_takes_reaches_the_server() -> None:
    """What the checks let through is answered as before, a body without a length too."""
    assert post()[::2] == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
    for path in ("/mcp/", "/mcp/research", "/mcp/research/"):  # each profile's server
        assert post(path=path)[::2] == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert post(length=False)[::2] == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert post(content_type="application/json; charset=utf-8")[0] == 200
    # The SDK's own refusals were JSON-RPC errors already (no Accept of JSON: 406).
    status, headers, body = post(ACCEPT="text/html")
    assert (status, headers["content-type"], body["error"]["code"]) == (
        406, "application/json", -32600)


def production_allowed_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """ALLOWED_HOSTS as kbplatform/settings.py sets it when DJANGO_ALLOWED_HOSTS is unset (the
    test run's own adds `testserver`, as Django's test environment does)."""
    monkeypatch.delenv("DJANGO_ALLOWED_HOSTS", raising=False)
    monkeypatch.setenv("KB_VAR_DIR", str(tmp_path))
    hosts: list[str] = runpy.run_path(str(ROOT / "kbplatform" / "settings.py"),
                                      run_name="settings_under_test")["ALLOWED_HOSTS"]
    return hosts


def test_the_default_allowed_hosts_are_the_readmes_and_refuse_testserver(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Any) -> None:
    # The settings read afresh need a key (a DATABASE_URL without one refuses to start).
    monkeypatch.setenv("DJANGO_SECRET_KEY", "test-only-" + "k" * 40)
    default = production_allowed_hosts(monkeypatch, tmp_path)
    readme = (ROOT / "README.md").read_text()
    documented = re.search(r"^\| `DJANGO_ALLOWED_HOSTS` \| `([^`]*)` \|", readme, re.M)
    assert documented and default == documented.group(1).split(",")
    assert "testserver" not in default

    settings.ALLOWED_HOSTS = default
    assert post(host="testserver")[0] == 421
    assert [post(host=host)[0] for host in ("localhost", "127.0.0.1:8000", "[::1]:8000")] == [
        200] * 3
