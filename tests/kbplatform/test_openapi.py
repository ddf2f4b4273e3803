"""The OpenAPI schema (GET /api/schema) and Swagger UI (/api/docs): complete, valid, offline."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.validation import validate_schema

METHODS = ("get", "post", "put", "patch", "delete")
NOT_DOCUMENTED = {"/api/schema", "/api/docs"}  # they describe the API; they are not part of it


def api_routes() -> dict[str, set[str]]:
    """Every /api/ route of the URLconf as an OpenAPI path, with the methods its view has."""
    routes: dict[str, set[str]] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and route.startswith("api/"):
                path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
                view = getattr(entry.callback, "view_class", None)
                routes[path] = {m for m in METHODS if view is not None and hasattr(view, m)}

    walk(get_resolver().url_patterns, "")
    return {path: methods for path, methods in routes.items() if path not in NOT_DOCUMENTED}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    response = Client().get("/api/schema")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


# Readable without a key: the parts that answer; the tools' definitions. No tenant's data.
PUBLIC = {"/api/health", "/api/tools/schema"}


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items()
            for method, op in item.items() if method in METHODS]


def test_the_schema_is_valid_openapi_3(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)  # raises on an invalid document


def test_the_schema_needs_no_key_and_ignores_a_wrong_one() -> None:
    response = Client().get("/api/schema", HTTP_AUTHORIZATION="Bearer kb_nope_nope")
    assert response.status_code == 200
    assert response.json()["paths"]


def test_every_api_route_and_method_of_the_urlconf_is_in_the_schema(
        schema: dict[str, Any]) -> None:
    routes = api_routes()
    assert "/api/tools/lookup_knowledge" in routes and "/api/documents/{doc_id}" in routes
    for path, methods in routes.items():
        assert path in schema["paths"], f"{path} is not in the schema"
        assert methods and methods <= set(schema["paths"][path]), path
    assert set(schema["paths"]) == set(routes)  # and nothing that is not served


def test_both_key_headers_are_security_schemes_of_every_operation(
        schema: dict[str, Any]) -> None:
    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyAuth"]["in"] == "header"
    assert schemes["apiKeyAuth"]["name"] == "X-API-Key"
    for path, method, op in operations(schema):
        if path in PUBLIC:
            assert "security" not in op and "401" not in op["responses"], path
            continue
        # Either header alone is enough: two alternatives, not one requirement with both.
        assert op["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}], (path, method)
        refused = "403" if path == "/api/dify/retrieval" else "401"  # as Dify reads it
        assert refused in op["responses"], (path, method)


TOOL_CONTRACTS = {"/api/tools/lookup_knowledge": "RagToolResult",
                  "/api/tools/fetch_evidence": "FetchEvidenceResult",
                  "/api/research/search": "ResearchSearchResult",
                  "/api/research/fetch": "ResearchDocument",
                  "/api/rag/answer": "RagAnswerResult", "/api/rag/agentic": "RagAgenticResult",
                  "/api/rag/node": "RagNodeResult"}
# The drop-in backends answer errors in the shapes of the stacks that call them.
OTHER_SHAPES = {"/api/dify/retrieval": "DifyError",
                "/api/openai/vector_stores/{vector_store_id}/search": "OpenAIError"}


def test_every_documented_error_has_the_one_error_shape(schema: dict[str, Any]) -> None:
    error = schema["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"code", "message", "extra"}
    for path, method, op in operations(schema):
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            ref = response["content"]["application/json"]["schema"]["$ref"]
            if path in TOOL_CONTRACTS and status == "503":
                # The agent contract (UNAVAILABLE), or the error shape if the database is down.
                one_of = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["oneOf"]
                assert {r["$ref"] for r in one_of} == {
                    f"#/components/schemas/{TOOL_CONTRACTS[path]}", "#/components/schemas/Error"}
            else:
                shape = OTHER_SHAPES.get(path, "Error")
                assert ref == f"#/components/schemas/{shape}", (path, method, status)


def test_the_lookup_answers_the_agent_contract(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    op = schema["paths"]["/api/tools/lookup_knowledge"]["post"]
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/RagToolResult"}
    contract = components["RagToolResult"]
    assert set(contract["required"]) == {"evidence_status", "tool_call_id", "query", "evidence",
                                         "relevance_level", "truncated", "returned_count",
                                         "searched_datasets", "covered_topics"}
    assert components["EvidenceStatusEnum"]["enum"] == ["READY", "EMPTY", "UNAVAILABLE"]
    assert set(components["Evidence"]["properties"]) == {"document_id", "source", "title",
                                                         "breadcrumb", "location", "commit",
                                                         "excerpt", "also_in", "url", "lines",
                                                         "updated_at", "reviewed_at",
                                                         "valid_until", "owner", "stale"}
    assert components["Evidence"]["properties"]["location"]["nullable"] is True
    body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert components[body.rsplit("/", 1)[1]]["required"] == ["query"]


def test_parameters_are_typed(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    doc_id = paths["/api/documents/{doc_id}"]["get"]["parameters"][0]
    assert (doc_id["in"], doc_id["schema"]["type"], doc_id["required"]) == ("path", "string", True)
    confirm = paths["/api/knowledge/rebuild-hybrid"]["post"]["parameters"][0]
    assert (confirm["name"], confirm["schema"]["enum"]) == ("confirm", ["REBUILD"])
    rollback = {p["name"]: p for p in paths["/api/knowledge/rollback"]["post"]["parameters"]}
    assert rollback["version"]["schema"]["type"] == "integer"
    reconcile = paths["/api/knowledge/reconcile"]["post"]["parameters"][0]
    assert (reconcile["name"], reconcile["schema"]["type"]) == ("repair", "boolean")
    upload = paths["/api/datasets/{dataset_id}/documents"]["post"]["requestBody"]["content"]
    assert list(upload) == ["multipart/form-data"]


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def test_swagger_ui_is_served_with_local_assets_only() -> None:
    response = Client().get("/api/docs")
    assert response.status_code == 200
    page = response.content.decode()
    parser = _Assets()
    parser.feed(page)
    assert any(url.endswith("swagger-ui-bundle.js") for url in parser.urls)
    for url in parser.urls:
        assert url.startswith("/static/"), url
        assert finders.find(url.removeprefix("/static/")), f"{url} is not a local static file"
    assert not re.search(r"https?://|//cdn", page)  # no CDN, in the inline script either
    assert '"/api/schema"' in page
