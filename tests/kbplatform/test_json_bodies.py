"""A JSON body the API cannot take is a 400 `parse_error` on every JSON endpoint, never a 500:
deep nesting (bounded at MAX_DEPTH, not left to the decoder's recursion), bytes that are not
UTF-8, lone surrogates, NaN and numbers no float holds. A body over its bound (JSON, form,
multipart) is a 413 before it is read, and a list over its bound one error before its elements
are checked. A refused tool call is audited."""

from __future__ import annotations

import gc
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from audit.models import ToolInvocation
from kbplatform.parsers import MAX_BODY_BYTES, MAX_DEPTH, MULTIPART_ROOM_BYTES
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


def api_error(path: str, answer: dict[str, Any]) -> tuple[object, str]:
    """(code, message) of an error answer, in its endpoint's shape: the drop-in backends
    answer in their stacks' own (Dify's code is the HTTP status)."""
    if path.startswith("/api/dify/"):
        assert set(answer) == {"error_code", "error_msg"}
        return answer["error_code"], answer["error_msg"]
    if path.startswith("/api/openai/"):
        assert set(answer) == {"error"}
        return answer["error"]["code"], answer["error"]["message"]
    assert set(answer) == {"code", "message", "extra"}
    return answer["code"], answer["message"]


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
    assert api_error(path, response.json())[0] in ("parse_error", 400)
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


@contextmanager
def cpu_seconds_spent() -> Iterator[list[float]]:
    """This thread's CPU time in the block: the test client serves the request in it, and a
    worker or server thread of the session (the services run's Celery worker) counts no more.
    The collector is held off: a full collection of the heap a long session has built is not
    the request's work (the likely cause of the 0.68 s one CI run measured)."""
    spent: list[float] = []
    gc.collect()
    gc.disable()
    started = time.thread_time()
    try:
        yield spent
    finally:
        spent.append(time.thread_time() - started)
        gc.enable()


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), JSON_OPERATIONS,
                         ids=[f"{method}:{path}" for method, path in JSON_OPERATIONS])
def test_a_body_over_the_bound_is_413_before_it_is_read(
        clients: dict[str, APIClient], method: str, path: str) -> None:
    """The issue's 10 MB `dataset_ids` took 22 s of CPU before its 100-element refusal."""
    body = b'{"query": "q", "dataset_ids": [' + b"1," * 5_000_000 + b"1]}"
    with cpu_seconds_spent() as spent:
        response = send(clients["admin"], method, path, body)

    assert response.status_code == 413, response.content
    code, message = api_error(path, response.json())
    assert code in ("too_large", 413) and f"{MAX_BODY_BYTES:,} bytes" in message
    assert spent[0] < 0.5  # refused on its declared length, never parsed
    if path in TOOLS:  # a refused tool call is audited like any other
        assert [(row.outcome, row.details["failure"]["codes"])
                for row in ToolInvocation.objects.all()] == [("invalid", "too_large")]


@pytest.mark.django_db
def test_a_body_of_the_bound_is_read(clients: dict[str, APIClient]) -> None:
    query = "q" * 10
    padding = b" " * (MAX_BODY_BYTES - 100)
    body = b'{"query": "' + query.encode() + b'",' + padding + b'"dataset_ids": [1]}'
    assert len(body) <= MAX_BODY_BYTES

    response = send(clients["tool"], "post", "/api/tools/lookup_knowledge", body)

    assert response.status_code != 413
    assert response.json().get("code") != "too_large"


@pytest.mark.django_db
def test_a_form_body_over_the_bound_is_413(clients: dict[str, APIClient]) -> None:
    body = "query=q&" + "dataset_ids=1&" * 100_000

    response = clients["tool"].post("/api/tools/lookup_knowledge", data=body,
                                    content_type="application/x-www-form-urlencoded")

    assert response.status_code == 413, response.content
    assert response.json()["code"] == "too_large"


@pytest.mark.django_db
def test_a_multipart_body_over_the_upload_bound_is_413_on_any_endpoint(
        clients: dict[str, APIClient], settings: Any) -> None:
    """A file sent to an endpoint that takes none was spooled to disk whatever its size."""
    settings.KB_MAX_UPLOAD_BYTES = 1000
    big = SimpleUploadedFile("big.bin", b"x" * (MULTIPART_ROOM_BYTES + 2000))

    response = clients["tool"].post("/api/tools/lookup_knowledge", {"query": "q", "f": big})

    assert response.status_code == 413, response.content
    assert response.json()["code"] == "too_large"
    assert "KB_MAX_UPLOAD_BYTES" in response.json()["message"]


@pytest.mark.django_db
def test_an_upload_larger_than_the_json_bound_is_taken(make_key: Any, settings: Any) -> None:
    """The JSON bound is not the uploads': a file up to KB_MAX_UPLOAD_BYTES goes through."""
    from datasets.documents.services import dataset_create

    key, secret = make_key(role="admin")
    dataset = dataset_create(tenant=key.tenant, name="big")
    notes = b"Gateway restart notes.\n" * (2 * MAX_BODY_BYTES // 23)
    assert MAX_BODY_BYTES < len(notes) < settings.KB_MAX_UPLOAD_BYTES

    response = api_client(secret).post(f"/api/datasets/{dataset.pk}/documents",
                                       {"file": SimpleUploadedFile("notes.txt", notes)})

    assert response.status_code == 202, response.content


def list_fields() -> list[tuple[str, str, str, int]]:
    """(method, path, field, maxItems) of every bounded list in a JSON request body."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if not body:
                continue
            component = components[body["schema"]["$ref"].rsplit("/", 1)[1]]
            for field, spec in component.get("properties", {}).items():
                if spec.get("type") == "array":
                    found.append((method, re.sub(r"\{[^}]+\}", "1", path), field,
                                  spec["maxItems"]))
    return found


LIST_FIELDS = list_fields()


def test_every_list_of_a_request_body_has_a_bound() -> None:
    """maxItems is read above: a list without one is a KeyError there, at collection."""
    assert {field for _, _, field, _ in LIST_FIELDS} >= {
        "dataset_ids", "document_ids", "rag_keywords", "target_dataset_ids", "sub_agents",
        "include"}


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "field", "bound"), [
    pytest.param(*case, id=f"{case[0]}:{case[1]}:{case[2]}") for case in LIST_FIELDS])
def test_a_list_over_its_bound_is_refused_before_its_elements_are_validated(
        clients: dict[str, APIClient], method: str, path: str, field: str,
        bound: int) -> None:
    """One error for the list, not one per element: 10,000 elements that are each invalid
    were each validated, and each named in the answer."""
    body = json.dumps({field: [{}] * 10_000}).encode()

    response = send(clients["admin"], method, path, body)

    assert response.status_code == 400, response.content
    errors = response.json()["extra"]["fields"][field]
    assert errors == [f"Ensure this field has no more than {bound} elements."]


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["form", "multipart"])
def test_a_body_of_more_fields_than_django_takes_is_413_not_500(
        clients: dict[str, APIClient], encoding: str) -> None:
    """Django's own bound (DATA_UPLOAD_MAX_NUMBER_FIELDS, 1,000) went through DRF as an
    exception of Django's: a 500."""
    fields = {"query": "q", "dataset_ids": ["1"] * 2000}
    if encoding == "form":
        response = clients["tool"].post(
            "/api/tools/lookup_knowledge", data=urlencode(fields, doseq=True),
            content_type="application/x-www-form-urlencoded")
    else:
        response = clients["tool"].post("/api/tools/lookup_knowledge", fields)

    assert response.status_code == 413, response.content
    assert response.json()["code"] == "too_large"
    assert "1,000 fields" in response.json()["message"]
