"""The official MCP SDK's clients, as an agent's host runs them: over streamable HTTP with a
Bearer key, and over stdio with `manage.py mcp_server` as a subprocess. Each opens a session,
lists the tools, makes the calls in order and closes."""

from __future__ import annotations

import sys
from typing import Any

import anyio

from kbplatform.processes import ROOT

Calls = list[tuple[str, dict[str, Any]]]


def over_http(url: str, key: str, calls: Calls) -> tuple[list[str], list[Any]]:
    """(tool names, call results) from the streamable HTTP endpoint `url` (…/mcp)."""
    return anyio.run(_http, url, key, calls)


def over_stdio(env: dict[str, str], calls: Calls, *, key_env: str = "KB_API_KEY"
               ) -> tuple[list[str], list[Any]]:
    """(tool names, call results) from `python manage.py mcp_server --api-key-env KEY_ENV`
    with exactly `env`, started as a desktop client starts it: absolute paths, from `/`."""
    return anyio.run(_stdio, env, calls, key_env)


async def _http(url: str, key: str, calls: Calls) -> tuple[list[str], list[Any]]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        results = [await client.call_tool(name, args) for name, args in calls]
    return names, results


async def _stdio(env: dict[str, str], calls: Calls, key_env: str
                 ) -> tuple[list[str], list[Any]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, cwd="/", env=env,
        args=[str(ROOT / "manage.py"), "mcp_server", "--api-key-env", key_env])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = [tool.name for tool in (await session.list_tools()).tools]
        results = [await session.call_tool(name, args) for name, args in calls]
    return names, results
