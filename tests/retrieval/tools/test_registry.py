"""The tool registry (retrieval/tools/registry.py) is the one declaration of the tools: the
REST URLs, the MCP server's tool list and the tool schemas are exactly its tools, and the one
audit wrapper writes one row per call of an audited tool on either channel."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import anyio
import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from audit.models import Channel, ToolInvocation
from retrieval.tools.compat import BACKENDS
from retrieval.tools.mcp_server import build_server, call_tool
from retrieval.tools.registry import PROFILES, SERVED, TOOLS
from retrieval.tools.views import ToolView
from tests.retrieval.conftest import MakeKey, client_for

NAMES = [tool.name for tool in TOOLS]
PROFILE_OF = {tool.name: profile for profile, tools in PROFILES.items() for tool in tools}


def tool_routes() -> dict[str, str]:
    """/path → tool name, for every route of the URLconf served by a tool's view."""
    routes: dict[str, str] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                view = getattr(entry.callback, "view_class", None)
                if view is not None and issubclass(view, ToolView):
                    route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + str(entry.pattern))
                    routes["/" + route] = view.tool.name

    walk(get_resolver().url_patterns, "")
    return routes


def test_the_rest_urls_are_the_registrys_tools() -> None:
    routes = tool_routes()
    backends = {tool.name for tool in BACKENDS}  # the drop-in backends: REST views only
    assert {p: name for p, name in routes.items() if name not in backends} == \
        {tool.path: tool.name for tool in SERVED if tool.operation}
    assert sorted(name for name in routes.values() if name in backends) == sorted(backends)
    for tool in SERVED:  # list_datasets included: another app's view serves its path
        view = resolve(tool.path).func.view_class  # type: ignore[attr-defined]
        assert hasattr(view, tool.method), tool.name


@pytest.mark.parametrize("profile", PROFILES)
def test_the_mcp_tools_are_the_registrys(profile: str) -> None:
    async def listed() -> list[str]:
        from mcp import Client

        async with Client(build_server(profile=profile)) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    assert anyio.run(listed) == [tool.name for tool in PROFILES[profile]]
    assert len(set(PROFILE_OF)) == len(SERVED)  # a name is one tool, whatever the profile


@pytest.mark.parametrize("tool", SERVED, ids=PROFILE_OF)
def test_each_tools_typed_input_declares_its_contracts_fields(tool: Any) -> None:
    """A call receives its input typed, built by the contract's field names: the two declare
    the same fields, so nothing validated is dropped and nothing typed goes unvalidated."""
    if tool.contract is None:
        assert tool.arguments is None and tool.valid({"anything": 1}) == (None, None)
        return
    # Whom it is for is no argument of the call: the caller reads for them (AuditOnce).
    assert {f.name for f in fields(tool.arguments)} == set(tool.contract().fields) - {
        "on_behalf_of"}


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_the_tool_schemas_are_the_registrys(fmt: str) -> None:
    tools = client_for(None).get(f"/api/tools/schema?format={fmt}").json()["tools"]
    assert [t["function"]["name"] if fmt == "openai" else t["name"] for t in tools] == NAMES


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
@pytest.mark.parametrize("tool", SERVED, ids=PROFILE_OF)
def test_a_refused_call_has_one_audit_row_if_audited_on_either_channel(
        tool: Any, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    if tool.operation:
        client_for("kb_nope_nope").post(tool.path, {}, format="json")
        client_for(secret).post(tool.path, {"dataset_ids": "x"}, format="json")  # invalid
    call_tool(tool.name, {}, "kb_nope_nope", PROFILE_OF[tool.name])
    call_tool(tool.name, {"dataset_ids": "x"}, secret, PROFILE_OF[tool.name])
    rows = ToolInvocation.objects.filter(tool_name=tool.name)
    assert rows.filter(channel=Channel.MCP).count() == (2 if tool.audited else 0)
    assert rows.filter(channel=Channel.REST).count() == \
        (2 if tool.audited and tool.operation else 0)
    # A stranger's input is not kept; the key's is.
    assert all(bool(row.api_key_id) == (row.tenant_id is not None) for row in rows)
