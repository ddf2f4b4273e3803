"""A JSON body the API cannot take is a 400 `parse_error` on every JSON endpoint, never a 500:
deep nesting (bounded at MAX_DEPTH, not left to the decoder's recursion), bytes that are not
UTF-8, lone surrogates, NaN and numbers no float holds. A refused tool call is audited."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from audit.models import ToolInvocation
from kbplatform.parsers import MAX_DEPTH
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.builders import api_client


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BODIES = {
    "1000-nested": nested(1000),  # the issue's 2 kB body
    "just-too-deep": b'{"query": ' + nested(MAX_DEPTH) + b"}",
    "not-utf8": b'{"query": "caf\xe9"}',
    "lone-surrogate": b'{"query": "\\ud800"}',
    "lone-surrogate-key": b'{"\\udfff": 1, "query": "q"}',
    "nan": b'{"query": "q", "dataset_ids": [NaN]}',
    "infinity": b'{"query": "q", "dataset_ids": [1e999]}',
    "5000-digits": b'{"query": "q", "dataset_ids": [' + b"9" * 5000 + b"]}",
    "trailing-garbage": b'{"query": "q"} x',
}
TOOLS = {"/api/tools/lookup_knowledge": "lookup_knowledge", "/api/rag/answer": "rag_answer",
         "/api/rag/agentic": "rag_agentic", "/api/rag/node": "rag_node"}


def json_operations() -> list[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI schema that takes a JSON body, its
    path parameters filled in (the body is read before any object is looked up)."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [(method, re.sub(r"\{[^}]+\}", "1", path))
            for path, operations in schema["paths"].items()
            for method, operation in operations.items()
            if "application/json" in operation.get("requestBody", {}).get("content", {})]


JSON_OPERATIONS = json_operations()


def test_the_sweep_covers_every_json_endpoint_the_issue_names() -> None:
    assert {*(("post", path) for path in TOOLS), ("post", "/api/tools/evidence_guard"),
            ("post", "/api/datasets"), ("patch", "/api/documents/1")} <= set(JSON_OPERATIONS)


@pytest.fixture
def clients(make_key: Callable[..., tuple[Any, str]]) -> dict[str, APIClient]:
    # An admin key may call every operation that takes a body.
    return {role: api_client(make_key(role=role)[1]) for role in ("tool", "admin")}


def send(client: APIClient, method: str, path: str, body: bytes) -> Any:
    return getattr(client, method)(path, data=body, content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
@pytest.mark.parametrize(("method", "path"), JSON_OPERATIONS,
                         ids=[f"{method}:{path}" for method, path in JSON_OPERATIONS])
def test_a_body_the_decoder_cannot_take_is_a_400_everywhere(
        clients: dict[str, APIClient], method: str, path: str, body: bytes,
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = send(clients["admin"], method, path, body)
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    answer = response.json()
    assert answer["code"] == "parse_error" and set(answer) == {"code", "message", "extra"}
    assert "Traceback" not in response.content.decode()
    # Client input, not a server fault: nothing at ERROR (a traceback) in the log.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.django_db
def test_nesting_up_to_the_bound_is_parsed() -> None:
    """The bound refuses only what is deeper: MAX_DEPTH levels are read (and then validated:
    a query that is a list is `invalid`, not `parse_error`)."""
    from kbplatform.parsers import json_loads

    assert json_loads(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    # Brackets inside strings are text, not nesting; escaped quotes do not end a string.
    text = '{"query": "' + "[" * 500 + '\\"' + "{" * 500 + '"}'
    assert json_loads(text.encode())["query"] == "[" * 500 + '"' + "{" * 500
    # A surrogate pair is one character, not a lone surrogate.
    assert json_loads(b'"\\ud83d\\ude00"') == "\N{GRINNING FACE}"


@BOTH_RUNTIMES
@pytest.mark.django_db
@pytest.mark.parametrize(("path", "tool"), TOOLS.items(), ids=TOOLS.values())
def test_every_refused_tool_call_is_audited_once(
        runtime: str, clients: dict[str, APIClient], path: str, tool: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The issue's lone surrogate: a 400 each time and one audit row each time (the row's
    query hash could not be computed from it, and no row was written)."""
    before = ToolInvocation.objects.count()
    with caplog.at_level(logging.INFO):
        statuses = [send(clients["tool"], "post", path,
                         b'{"query": "\\ud800", "tool_call_id": "call-surrogate"}').status_code
                    for _ in range(5)]
    assert statuses == [400] * 5
    rows = list(ToolInvocation.objects.order_by("id")[before:])
    assert [(r.outcome, r.details["failure"]["codes"]) for r in rows] == [
        ("invalid", "parse_error")] * 5
    assert {r.tool_name for r in rows} == {tool}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
