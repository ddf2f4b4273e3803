"""The MCP server over streamable HTTP, as a WSGI app the platform's web process mounts at /mcp.

The SDK's transport is ASGI; the platform runs WSGI (gunicorn, runserver). Stateless and with
JSON responses (no session to keep between requests, no SSE stream to hold open), each POST
is one exchange; any other method is 405. a2wsgi runs the ASGI app on one event loop thread
of the process, where the session manager's task group stays open for the life of the
process; the tools themselves run in worker threads (mcp_server.py). Hosts and
origins are checked against ALLOWED_HOSTS as Django checks them (DNS-rebinding protection);
a body may have MAX_BODY_BYTES.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from kbplatform.errors import error_body

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# A tool call's arguments are a question and a few ids (KB_MAX_QUERY_CHARS), never a file.
MAX_BODY_BYTES = 256 * 1024


class McpWsgiApp:
    """Started on the first request (a process that never serves MCP starts no loop)."""

    def __init__(self) -> None:
        self._app: WsgiApp | None = None
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            # Stateless: no session to delete, and no server-sent stream (GET) to hold a web
            # thread open.
            return _refused(start_response, "405 Method Not Allowed", "method_not_allowed",
                            "POST a JSON-RPC message to /mcp: this server is stateless, with "
                            "no event stream.", [("Allow", "POST")])
        refusal = _foreign(environ)
        if refusal:
            return _refused(start_response, *refusal)
        if self._app is None:
            with self._lock:
                if self._app is None:
                    try:
                        self._app = _started()
                    except RuntimeError as exc:  # the next request tries again
                        return _refused(start_response, "503 Service Unavailable",
                                        "unavailable", str(exc))
        return self._app(environ, start_response)


def _foreign(environ: dict[str, Any]) -> tuple[str, str, str] | None:
    """DNS-rebinding protection with Django's own rules: the Host must be one of
    ALLOWED_HOSTS (421), and so must a browser's Origin (403)."""
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    if not validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS):
        return "421 Misdirected Request", "invalid_host", f"{host!r} is not an allowed host"
    origin = environ.get("HTTP_ORIGIN")
    if origin and not validate_host(split_domain_port(urlsplit(origin).netloc)[0],
                                    settings.ALLOWED_HOSTS):
        return "403 Forbidden", "invalid_origin", f"{origin!r} is not an allowed origin"
    return None


def _refused(start_response: Callable[..., Any], status: str, code: str, message: str,
             headers: list[tuple[str, str]] | None = None) -> Iterable[bytes]:
    body = json.dumps(error_body(code, message)).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), *(headers or [])])
    return [body]


def _started() -> WsgiApp:
    from a2wsgi import ASGIMiddleware
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from mcp.server.transport_security import TransportSecuritySettings

    from retrieval.agents.mcp_server import build_server

    manager = StreamableHTTPSessionManager(
        app=build_server(), stateless=True, json_response=True,
        # Hosts and origins are checked before (_foreign), as Django checks them.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_BODY_BYTES)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="mcp-http", daemon=True).start()
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
