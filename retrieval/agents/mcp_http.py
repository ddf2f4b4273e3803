"""The MCP server over streamable HTTP, as a WSGI app the platform's web process mounts at /mcp.

The SDK's transport is ASGI; the platform runs WSGI (gunicorn, runserver). Stateless and with
JSON responses (no session to keep between requests, no SSE stream to hold open), each POST
is one exchange; any other method is 405. a2wsgi runs the ASGI app on one event loop thread
of the process, where the session manager's task group stays open for the life of the
process; the tools themselves run in worker threads (mcp_server.py). Hosts and
origins are checked against ALLOWED_HOSTS (DNS-rebinding protection); a body may have
MAX_BODY_BYTES.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from django.conf import settings

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
            return _refused(start_response)
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = _started()
        return self._app(environ, start_response)


def _refused(start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = json.dumps(error_body("method_not_allowed", "POST a JSON-RPC message to /mcp: this "
                                 "server is stateless, with no event stream.")).encode()
    start_response("405 Method Not Allowed", [("Content-Type", "application/json"),
                                              ("Allow", "POST"),
                                              ("Content-Length", str(len(body)))])
    return [body]


def _started() -> WsgiApp:
    from a2wsgi import ASGIMiddleware
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )

    from retrieval.agents.mcp_server import build_server

    manager = StreamableHTTPSessionManager(
        app=build_server(), stateless=True, json_response=True,
        security_settings=_security(), max_request_body_size=MAX_BODY_BYTES)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="mcp-http", daemon=True).start()
    ready = threading.Event()

    async def hold_open() -> None:
        async with manager.run():
            ready.set()
            await asyncio.Event().wait()  # for the life of the process

    running = asyncio.run_coroutine_threadsafe(hold_open(), loop)
    if not ready.wait(30):
        raise RuntimeError(f"the MCP session manager did not start: {running.exception(0)}")
    asgi: Any = StreamableHTTPASGIApp(manager)  # a2wsgi types its own ASGI protocol
    return cast(WsgiApp, ASGIMiddleware(asgi, loop=loop))


def _security() -> Any:
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[form for h in hosts for form in (h, f"{h}:*")],
        allowed_origins=[f"{scheme}://{form}" for h in hosts for scheme in ("http", "https")
                         for form in (h, f"{h}:*")])
