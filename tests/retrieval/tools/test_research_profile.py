"""The research profile: `search` and `fetch` as OpenAI's deep-research clients call them —
one string in, one JSON text out — at /mcp/research (the official client over streamable
HTTP) and over REST; the same scoped, audited lookup and fetch, confirmed by the guard."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.models import Channel, ToolInvocation
from retrieval.tools.schemas import input_schema
from tests.mcp_clients import over_http
from tests.retrieval.conftest import Imported, MakeKey, client_for

READY_QUESTION = "nginx 502 bad gateway upstream connection refused"
OFF_TOPIC = "What is the capital of Mongolia?"


def test_the_two_tools_take_one_string_each() -> None:
    for name, field in (("search", "query"), ("fetch", "id")):
        schema = input_schema(name)
        assert (list(schema["properties"]), schema["required"]) == ([field], [field])
        assert schema["additionalProperties"] is False


@pytest.mark.django_db(transaction=True)
def test_a_deep_research_client_searches_then_fetches_over_mcp(
        acme: Imported, make_key: MakeKey, web: str) -> None:
    _, secret = make_key("acme")
    names, (found, nothing) = over_http(f"{web}/mcp/research", secret, [
        ("search", {"query": READY_QUESTION}), ("search", {"query": OFF_TOPIC})])
    assert names == ["search", "fetch"]
    # Exactly one text item: the results, JSON-encoded, as the clients parse them.
    [item] = found.content
    results = json.loads(item.text)["results"]
    assert results and set(results[0]) == {"id", "title", "text", "url"}
    assert acme.stem_of(results[0]["id"]) == "nginx"
    assert json.loads(item.text) == found.structured_content
    empty = json.loads(nothing.content[0].text)
    assert (empty["results"], empty["evidence_status"]) == ([], "EMPTY")
    assert empty["tool_call_id"].startswith("call_")

    _, (document, missing) = over_http(f"{web}/mcp/research", secret, [
        ("fetch", {"id": results[0]["id"]}), ("fetch", {"id": "1#chunk-0"})])
    body = json.loads(document.content[0].text)
    assert set(body) == {"id", "title", "text", "url", "metadata"}
    assert body["id"] == results[0]["id"] and body["text"]
    assert results[0]["id"] in body["metadata"]["document_ids"]
    assert missing.is_error and missing.structured_content["code"] == "not_found"

    rows = ToolInvocation.objects.filter(channel=Channel.MCP).order_by("id")
    assert [(r.tool_name, r.outcome) for r in rows] == [
        ("search", "ok"), ("search", "empty"), ("fetch", "ok"), ("fetch", "invalid")]
    # The fetched chunks are confirmed for the fetch's call, as any tool's evidence.
    call = body["metadata"]["tool_call_id"]
    verdict = client_for(secret).post("/api/tools/evidence_guard", {
        "tool_call_id": call, "document_ids": body["metadata"]["document_ids"]},
        format="json").json()
    assert verdict["ready"] == body["metadata"]["document_ids"]


@pytest.mark.django_db
def test_over_rest_and_out_of_scope(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, stranger = make_key("globex")
    owner = client_for(secret)

    def post(client: Any, path: str, body: dict[str, Any]) -> Any:
        return client.post(f"/api/research/{path}", body, format="json")

    hits = post(owner, "search", {"query": READY_QUESTION}).json()["results"]
    asked = hits[0]["id"]
    assert post(owner, "fetch", {"id": asked}).status_code == 200
    # Another tenant's search finds none of it, and its fetch is the 404 of no such id.
    theirs = post(client_for(stranger), "search", {"query": READY_QUESTION}).json()
    assert all(acme.stem_of(hit["id"]) is None for hit in theirs["results"])
    refused = post(client_for(stranger), "fetch", {"id": asked})
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    for path, body in (("search", {}), ("fetch", {"id": "not an id"}), ("fetch", {})):
        assert post(owner, path, body).status_code == 400
