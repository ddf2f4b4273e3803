"""Fuzz the whole REST API from its own OpenAPI schema (schemathesis), on the real platform.

Every operation of GET /api/schema runs against the in-process WSGI app, on a tenant with a
dataset and indexed documents, first with a tool key and then with a platform key. Each
response must not be a 5xx, must have a documented status and content type, and must match
the documented body. Generated ids are sometimes swapped for real ones, so the fuzzer reaches
the objects that exist and not only 404s.

CI runs a few examples per operation (KB_FUZZ_EXAMPLES, default 10); a larger run, with the
services of scripts/test.sh's integration run:

    KB_FUZZ_EXAMPLES=200 DJANGO_SECRET_KEY=fuzz DATABASE_URL=mysql://root:@127.0.0.1:3306/test \
    REDIS_URL=redis://127.0.0.1:6379/13 CELERY_BROKER_URL=redis://127.0.0.1:6379/14 \
    CELERY_TASK_ALWAYS_EAGER=false MILVUS_URI=http://127.0.0.1:19541 KB_EMBEDDER=use \
    python -m pytest tests/test_fuzz.py
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from werkzeug.test import Client

from datasets.documents.services import dataset_create
from datasets.models import Document, Job
from kbplatform.errors import ServiceUnavailable
from kbplatform.wsgi import application
from tests.conftest import document_ingest, key_create
from tests.datasets.builders import runbook
from tests.worlds import corpus, shared

EXAMPLES = int(os.environ.get("KB_FUZZ_EXAMPLES", "10"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]

schema = schemathesis.openapi.from_wsgi("/api/schema", application)


@dataclass
class World:
    """What exists: the ids a well-behaved client would send."""

    platform: str  # keys
    tool: str
    dataset_id: str
    doc_ids: list[str]
    job_ids: list[str]
    session_id: str
    tool_call_id: str
    evidence: list[str]


@contextmanager
def in_transaction() -> Iterator[None]:
    """Requests through the WSGI app inside the test's transaction: like Django's test client,
    do not let a request close the connection (and with it the transaction)."""
    started = request_started.disconnect(close_old_connections)
    finished = request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:  # connected again only by whom disconnected them
        if started:
            request_started.connect(close_old_connections)
        if finished:
            request_finished.connect(close_old_connections)


@pytest.fixture
def app_requests() -> Iterator[None]:
    with in_transaction():
        yield


def headers(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def world_make(folder: Any = None) -> World:
    platform_key, platform = key_create(tenant="fuzz", role="platform")
    _, tool = key_create(tenant="fuzz", role="tool")
    dataset = dataset_create(tenant=platform_key.tenant, name="ops")
    documents = [document_ingest(dataset, f"{topic}.md", runbook(topic))
                 for topic in ("redis", "nginx")]
    # A READY lookup of a session: a trace to replay and evidence for the guard.
    with in_transaction():
        answer = Client(application).post(
            "/api/tools/lookup_knowledge", headers=headers(tool),
            json={"query": "redis", "session_id": "fuzz-session", "tool_call_id": "call-fuzz"})
    assert answer.status_code == 200, answer.get_data()
    evidence = [item["document_id"] for item in answer.get_json()["evidence"]]
    assert evidence
    return World(platform=platform, tool=tool, dataset_id=str(dataset.pk),
                 doc_ids=[d.doc_key for d in documents],
                 job_ids=[str(pk) for pk in Job.objects.filter(tenant=platform_key.tenant)
                          .values_list("pk", flat=True)],
                 session_id="fuzz-session", tool_call_id="call-fuzz", evidence=evidence)


# Made once for the tests that share it (tests/worlds.py): every test here only reads it, or
# rolls back what it changed.
corpus("world", module=__name__, make=world_make, load=lambda made: replace(
    made, doc_ids=list(made.doc_ids), job_ids=list(made.job_ids), evidence=list(made.evidence)))


@pytest.fixture
def world(app_requests: None, store: Any, db: None, request: pytest.FixtureRequest) -> World:
    return shared(request) or world_make()


def real_ids(world: World) -> dict[str, list[str]]:
    return {"dataset_id": [world.dataset_id], "doc_id": world.doc_ids,
            "job_id": world.job_ids, "session_id": [world.session_id]}


def aim(case: schemathesis.Case, world: World, data: st.DataObject) -> None:
    """Sometimes swap a generated id for a real one (and the body's references with it)."""
    for name, choices in real_ids(world).items():
        if case.path_parameters and name in case.path_parameters and data.draw(st.booleans()):
            case.path_parameters[name] = data.draw(st.sampled_from(choices))
    body = case.body
    if not isinstance(body, dict) or not data.draw(st.booleans()):
        return
    if isinstance(body.get("dataset_ids"), list):
        body["dataset_ids"] = [int(world.dataset_id)]
    if isinstance(body.get("document_ids"), list):  # the evidence guard
        body.pop("session_id", None)
        body["tool_call_id"] = world.tool_call_id
        body["document_ids"] = [*world.evidence, *body["document_ids"]][:200]


@schema.parametrize()
@schema.given(data=st.data())
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_every_operation_answers_as_documented(case: schemathesis.Case, data: st.DataObject,
                                               world: World) -> None:
    aim(case, world, data)
    with transaction.atomic():  # every example starts from the same world
        # The tool key first: it changes nothing an admin operation could change.
        for secret in (world.tool, world.platform):
            case.call_and_validate(headers=headers(secret), checks=CHECKS)
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_linked_operations_answer_as_documented(world: World) -> None:
    """Stateful: schemathesis infers links from the schema (a created dataset's id into its
    documents, a 202's job id into /api/jobs/{job_id}, ...) and runs chains of calls."""

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        # Each scenario starts from the same world (Hypothesis replays scenarios to shrink).
        def setup(self) -> None:
            self.savepoint = transaction.savepoint()

        def teardown(self) -> None:
            transaction.savepoint_rollback(self.savepoint)

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": headers(world.platform)}

        def validate_response(self, response: Any, case: schemathesis.Case,
                              additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS)

    Workflow.run(settings=settings(max_examples=EXAMPLES, stateful_step_count=6, deadline=None,
                                   database=None, suppress_health_check=list(HealthCheck)))

# --- a client's session, step by step: the answers random data rarely reaches ----------------

def call(secret: str | None, method: str, path: str, status: int, **parts: Any) -> Any:
    """One documented call, validated like the fuzzed ones, that must answer `status`."""
    if "body" in parts:
        parts.setdefault("media_type", "application/json")
    case = schema[path][method].Case(**parts)
    # A 503 asked for (a backend made to fail) is not a server error; it is documented.
    checks = [c for c in CHECKS if status < 500 or c is not not_a_server_error]
    response = case.call_and_validate(headers=headers(secret) if secret else {}, checks=checks)
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def upload(world: World, dataset_id: str, name: str, raw: bytes, status: int) -> Any:
    """Schemathesis names a generated file after its field; a client names it after the file."""
    path = "/api/datasets/{dataset_id}/documents"
    response = Client(application).post(
        path.format(dataset_id=dataset_id), headers=headers(world.platform),
        data={"file": (io.BytesIO(raw), name)})
    case = schema[path]["POST"].Case(path_parameters={"dataset_id": dataset_id},
                                     body={"file": raw}, media_type="multipart/form-data")
    case.validate_response(response, checks=CHECKS)
    assert response.status_code == status, response.get_data()
    return response.get_json()


@pytest.mark.django_db
def test_a_client_session_answers_as_documented(world: World, monkeypatch: Any) -> None:
    from retrieval.index.sync import document_sync

    admin = world.platform
    call(None, "GET", "/api/datasets", 401)
    call(admin, "GET", "/api/datasets", 200)
    dataset = call(admin, "POST", "/api/datasets", 201, body={"name": "kafka"})
    call(admin, "POST", "/api/datasets", 409, body={"name": "kafka"})
    dataset_id = str(dataset["id"])

    raw = runbook("kafka")
    first = upload(world, dataset_id, "kafka.md", raw, 202)
    document = first["document"]["document_id"]
    call(admin, "GET", "/api/jobs/{job_id}", 200, path_parameters={"job_id": first["job"]["id"]})
    document_sync(document_id=Document.objects.get(doc_id=int(document)).pk)  # the worker
    assert upload(world, dataset_id, "kafka.md", raw, 200)["job"] is None  # unchanged
    upload(world, dataset_id, "kafka.md", runbook("kafka", sections=3), 409)
    listing = call(admin, "GET", "/api/datasets/{dataset_id}/documents", 200,
                   path_parameters={"dataset_id": dataset_id})
    assert [d["document_id"] for d in listing["documents"]] == [document]

    answer = call(world.tool, "POST", "/api/tools/lookup_knowledge", 200,
                  body={"query": "kafka", "session_id": "s-1", "tool_call_id": "c-1"})
    assert answer["evidence_status"] == "READY"
    call(world.tool, "POST", "/api/tools/lookup_knowledge", 400,
         body={"query": " ", "session_id": "s-1"})  # audited too: a trace row with no details
    verdict = call(world.tool, "POST", "/api/tools/evidence_guard", 200,
                   body={"tool_call_id": "c-1", "document_ids": [answer["evidence"][0]
                                                                 ["document_id"], "x#chunk-0"]})
    assert verdict["not_ready"] == ["x#chunk-0"]
    answered = call(world.tool, "POST", "/api/rag/answer", 200, body={"query": "kafka"})
    assert answered["answer_status"] == "ANSWERED" and answered["citations"]
    trace = call(admin, "GET", "/api/diagnosis/{session_id}/trace", 200,
                 path_parameters={"session_id": "s-1"})
    assert [row["retrievalDetails"] is None for row in trace["toolInvocations"]] == [False, True]
    call(world.tool, "GET", "/api/diagnosis/{session_id}/trace", 403,
         path_parameters={"session_id": "s-1"})

    doc = {"path_parameters": {"doc_id": document}}
    call(admin, "PATCH", "/api/documents/{doc_id}", 200, body={"activated": False}, **doc)
    call(admin, "GET", "/api/documents/{doc_id}", 200, **doc)
    call(admin, "POST", "/api/documents/{doc_id}/reindex", 202, **doc)
    call(admin, "DELETE", "/api/documents/{doc_id}", 204, **doc)
    call(admin, "GET", "/api/documents/{doc_id}", 404, **doc)

    call(admin, "GET", "/api/knowledge/index-versions", 200)
    call(world.tool, "GET", "/api/knowledge/index-versions", 403)
    call(admin, "POST", "/api/knowledge/rebuild-hybrid", 400)
    call(admin, "POST", "/api/knowledge/rebuild-hybrid", 202, query={"confirm": "REBUILD"})
    running = call(admin, "POST", "/api/knowledge/rollback", 409, query={"confirm": "ROLLBACK"})
    assert running["extra"]["job_id"]
    call(admin, "POST", "/api/knowledge/reconcile", 409, query={"repair": "true"})

    # A backend that fails: the agent contract with UNAVAILABLE and a 503, as documented.
    def down(*args: Any, **kwargs: Any) -> None:
        raise ServiceUnavailable("the canonical invocation store is unavailable")

    monkeypatch.setattr("retrieval.lookup.service.canonical_store", down)
    failed = call(world.tool, "POST", "/api/tools/lookup_knowledge", 503, body={"query": "redis"})
    assert failed["evidence_status"] == "UNAVAILABLE"
    failed = call(world.tool, "POST", "/api/rag/answer", 503, body={"query": "redis"})
    assert failed["answer_status"] == "UNAVAILABLE"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "parts"), [
    ("GET", "/api/jobs/{job_id}", {"path_parameters": {"job_id": "³"}}),
    ("GET", "/api/documents/{doc_id}", {"path_parameters": {"doc_id": "³"}}),
    ("GET", "/api/datasets/{dataset_id}/documents", {"path_parameters": {"dataset_id": "³"}}),
    ("POST", "/api/knowledge/rollback", {"query": {"confirm": "ROLLBACK", "version": "³"}}),
])
def test_an_id_of_unicode_digits_is_a_404(world: World, method: str, path: str,
                                         parts: dict[str, Any]) -> None:
    # Found by the fuzzer: a 500 from every view that reads an id.
    call(world.platform, method, path, 404, **parts)
