"""The MCP server over streamable HTTP, as a WSGI app the platform's web process mounts at /mcp.

The SDK's transport is ASGI; the platform runs WSGI (gunicorn, runserver). Stateless and with
JSON responses (no session to keep between requests, no SSE stream to hold open), each POST
is one exchange; any other method is 405. a2wsgi runs the ASGI app on one event loop thread
of the process, where the session manager's task group stays open for the life of the
process; the tools themselves run in worker threads (mcp_server.py).

What the transport refuses, it refuses here, before the SDK, and always as a JSON-RPC error
whose `data` is the API's error shape: another method (405), a Host or browser Origin that
ALLOWED_HOSTS does not allow, as Django checks them (DNS-rebinding protection: 421, 403), a
Content-Type other than JSON (415), a body over MAX_BODY_BYTES (413; the REST API's bound for
a JSON body), one that is not JSON the API reads (kbplatform/parsers.py, 400 parse error) or
not a JSON-RPC message (400 invalid request). The SDK's own checks of the size and the
Content-Type answer plain text.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from kbplatform.errors import ErrorCode, error_body
from kbplatform.parsers import MAX_BODY_BYTES, JsonRefused, json_loads

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# JSON-RPC 2.0's error codes (mcp.types has them too, but takes seconds to import).
PARSE_ERROR, INVALID_REQUEST, INTERNAL_ERROR = -32700, -32600, -32603


@dataclass(frozen=True)
class Refusal:
    status: str
    code: ErrorCode
    message: str
    rpc_code: int = INVALID_REQUEST
    headers: tuple[tuple[str, str], ...] = ()


MOUNT = "/mcp"  # settings.KB_WSGI_MOUNTS
_NO_PROFILE = Refusal("404 Not Found", ErrorCode.NOT_FOUND,
                      "no MCP server here: /mcp serves the tools, /mcp/research search and "
                      "fetch")
_TOO_LARGE = Refusal("413 Request Entity Too Large", ErrorCode.TOO_LARGE,
                     f"a JSON-RPC message to /mcp has at most {MAX_BODY_BYTES} bytes")


class McpWsgiApp:
    """Each profile's server (retrieval/tools/registry.py PROFILES: /mcp, /mcp/research) is
    started on its first request (a process that never serves one starts no loop for it)."""

    def __init__(self) -> None:
        self._apps: dict[str, WsgiApp] = {}
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        profile = _profile(environ)
        body = _checked(environ) if profile is not None else _NO_PROFILE
        if isinstance(body, Refusal):
            return _refused(start_response, body)
        assert profile is not None
        try:
            app = self._started_app(profile)
        except RuntimeError as exc:  # the next request tries again
            return _refused(start_response, Refusal(
                "503 Service Unavailable", ErrorCode.UNAVAILABLE, str(exc), INTERNAL_ERROR))
        # The body is read: the SDK reads it again, from here.
        return app({**environ, "wsgi.input": io.BytesIO(body),
                    "CONTENT_LENGTH": str(len(body))}, start_response)

    def _started_app(self, profile: str) -> WsgiApp:
        if profile not in self._apps:
            with self._lock:
                if profile not in self._apps:
                    self._apps[profile] = _started(profile)
        return self._apps[profile]


def _profile(environ: dict[str, Any]) -> str | None:
    """The profile a path names (`/mcp` → "", `/mcp/research` → "research"), else None."""
    from retrieval.tools.registry import PROFILES

    name = environ.get("PATH_INFO", "").removeprefix(MOUNT).strip("/")
    return name if name in PROFILES else None


def _checked(environ: dict[str, Any]) -> bytes | Refusal:
    """The body of a request the transport takes, or why it refuses it."""
    refusal = _refused_request(environ)
    if refusal:
        return refusal
    body = _body(environ)
    if body is None:
        return _TOO_LARGE
    return _refused_message(body) or body


def _refused_request(environ: dict[str, Any]) -> Refusal | None:
    """What the request line and headers alone refuse, in the order a client fixes it."""
    if environ.get("REQUEST_METHOD") != "POST":
        # Stateless: no session to delete, and no server-sent stream (GET) to hold a web
        # thread open.
        return Refusal("405 Method Not Allowed", ErrorCode.METHOD_NOT_ALLOWED,
                       "POST a JSON-RPC message to /mcp: this server is stateless, with no "
                       "event stream.", headers=(("Allow", "POST"),))
    foreign = _foreign(environ)
    if foreign:
        return foreign
    media_type = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return Refusal("415 Unsupported Media Type", ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                       "a JSON-RPC message is Content-Type: application/json")
    if _declared_length(environ) > MAX_BODY_BYTES:
        return _TOO_LARGE
    return None


def _declared_length(environ: dict[str, Any]) -> int:
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _body(environ: dict[str, Any]) -> bytes | None:
    """The body, read to at most MAX_BODY_BYTES (None: it has more): as long as declared, or
    to its end when the server terminates it (a chunked body has no length)."""
    stream: IO[bytes] = environ["wsgi.input"]
    declared = _declared_length(environ)
    if declared or not environ.get("wsgi.input_terminated"):
        return _read(stream, declared)
    body = _read(stream, MAX_BODY_BYTES + 1)
    return body if len(body) <= MAX_BODY_BYTES else None


def _read(stream: IO[bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0 and (chunk := stream.read(min(size, 64 * 1024))):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _refused_message(body: bytes) -> Refusal | None:
    try:
        message = json_loads(body)
    except JsonRefused as exc:
        return Refusal("400 Bad Request", ErrorCode.PARSE_ERROR, exc.message, PARSE_ERROR)
    # One message per POST: MCP has no batches.
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Refusal("400 Bad Request", ErrorCode.INVALID_REQUEST,
                       'The body is not a JSON-RPC 2.0 message: an object with "jsonrpc": '
                       '"2.0".')
    return None


def _foreign(environ: dict[str, Any]) -> Refusal | None:
    """DNS-rebinding protection with Django's own rules: the Host must be one of
    ALLOWED_HOSTS (421), and so must a browser's Origin (403)."""
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    if not validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS):
        return Refusal("421 Misdirected Request", ErrorCode.INVALID_HOST,
                       f"{host!r} is not an allowed host")
    origin = environ.get("HTTP_ORIGIN")
    if origin and not validate_host(split_domain_port(urlsplit(origin).netloc)[0],
                                    settings.ALLOWED_HOSTS):
        return Refusal("403 Forbidden", ErrorCode.INVALID_ORIGIN,
                       f"{origin!r} is not an allowed origin")
    return None


def _refused(start_response: Callable[..., Any], refusal: Refusal) -> Iterable[bytes]:
    """A JSON-RPC error response (no id: the message was not read), the API's error in it."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": refusal.rpc_code, "message": refusal.message,
        "data": error_body(refusal.code, refusal.message)}}).encode()
    start_response(refusal.status, [("Content-Type", "application/json"),
                                    ("Content-Length", str(len(body))), *refusal.headers])
    return [body]


def _started(profile: str) -> WsgiApp:
    from a2wsgi import ASGIMiddleware
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from mcp.server.transport_security import TransportSecuritySettings

    from retrieval.tools.mcp_server import build_server

    manager = StreamableHTTPSessionManager(
        app=build_server(profile=profile), stateless=True, json_response=True,
        # Hosts and origins are checked before (_foreign), as Django checks them.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_BODY_BYTES)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name=f"mcp-http{profile and '-' + profile}",
                     daemon=True).start()
    ready = threading.Event()

    async def hold_open() -> None:
        async with manager.run():
            ready.set()
            await asyncio.Event().wait()  # for the life of the process

    running = asyncio.run_coroutine_threadsafe(hold_open(), loop)
    if not ready.wait(30):
        failure = running.exception() if running.done() else "not started within 30 s"
        running.cancel()
        loop.call_soon_threadsafe(loop.stop)  # no loop thread left behind; the next request
        raise RuntimeError(f"the MCP session manager did not start: {failure}")  # tries again
    asgi: Any = StreamableHTTPASGIApp(manager)  # a2wsgi types its own ASGI protocol
    return cast(WsgiApp, ASGIMiddleware(asgi, loop=loop))
