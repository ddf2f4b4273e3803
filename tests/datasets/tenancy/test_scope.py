"""Every endpoint applies the key's tenant and dataset scope; "not yours" looks exactly like
"does not exist" (a dataset-scoped key read datasets outside its scope before)."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.services import dataset_create
from datasets.models import Job
from datasets.tenancy.keys import api_key_create
from tests.datasets.builders import api_client, lookup, runbook, upload

pytestmark = pytest.mark.django_db

MISSING = 999_999_999


@pytest.fixture
def secret(kb, ingest):  # type: ignore[no-untyped-def]
    """Tenant acme: dataset `ops` (kb.dataset) with a secret runbook, and dataset `other`."""
    other = dataset_create(tenant=kb.tenant, name="other")
    document = ingest(kb.dataset, "payroll.md", runbook("payroll"))
    ingest(other, "kafka.md", runbook("kafka"))
    return other, document


def _key(kb, role: str, *datasets: Any):  # type: ignore[no-untyped-def]
    _, plaintext = api_key_create(tenant=kb.tenant, role=role, datasets=datasets)
    return api_client(plaintext)


def _same_as_missing(found: Any, missing: Any, real_id: object) -> None:
    """The two answers differ in nothing but the id the caller sent."""
    assert found.status_code == missing.status_code, (found.content, missing.content)
    assert found.content.decode().replace(str(real_id), "ID") == \
        missing.content.decode().replace(str(MISSING), "ID")


def test_a_scoped_tool_key_sees_only_its_datasets(kb, store, secret) -> None:
    other, document = secret
    client = _key(kb, "tool", other)

    listed = client.get("/api/datasets").json()["datasets"]
    assert [d["name"] for d in listed] == ["other"]
    _same_as_missing(client.get(f"/api/datasets/{kb.dataset.pk}/documents"),
                     client.get(f"/api/datasets/{MISSING}/documents"), kb.dataset.pk)
    found = client.post("/api/tools/lookup_knowledge",
                        {"query": "payroll", "dataset_ids": [kb.dataset.pk]}, format="json")
    missing = client.post("/api/tools/lookup_knowledge",
                          {"query": "payroll", "dataset_ids": [MISSING]}, format="json")
    _same_as_missing(found, missing, kb.dataset.pk)
    assert b"payroll.md" not in found.content
    answer = lookup(client, "payroll dashboard restart")
    assert all(item["source"] != "payroll.md" for item in answer["evidence"])
    # Reading a section of it: the same 404 as a document that does not exist.
    for asked in (document.doc_key, f"{document.doc_key}#chunk-0"):
        found = client.post("/api/tools/fetch_evidence", {"document_id": asked}, format="json")
        missing = client.post("/api/tools/fetch_evidence",
                              {"document_id": asked.replace(document.doc_key, str(MISSING))},
                              format="json")
        _same_as_missing(found, missing, document.doc_key)


def test_a_scoped_admin_key_changes_only_its_datasets(kb, store, secret) -> None:
    other, document = secret
    client = _key(kb, "admin", other)

    _same_as_missing(upload(client, kb.dataset.pk, "x.md", runbook("x")),
                     upload(client, MISSING, "x.md", runbook("x")), kb.dataset.pk)
    for method, suffix, body in (("get", "", None), ("patch", "", {"activated": False}),
                                 ("delete", "", None), ("post", "/reindex", None)):
        call = getattr(client, method)
        found = call(f"/api/documents/{document.doc_key}{suffix}", body, format="json")
        missing = call(f"/api/documents/{MISSING}{suffix}", body, format="json")
        _same_as_missing(found, missing, document.doc_key)
    document.refresh_from_db()
    assert document.activated and not document.deleted
    # A dataset-scoped key cannot create datasets (they would be outside its own scope).
    assert client.post("/api/datasets", {"name": "new"}, format="json").status_code == 403
    # Its jobs are those of its datasets.
    job = Job.objects.filter(dataset=kb.dataset).first()
    assert job is not None
    _same_as_missing(client.get(f"/api/jobs/{job.pk}"), client.get(f"/api/jobs/{MISSING}"),
                     job.pk)


def test_traces_and_the_evidence_guard_stay_in_scope(kb, store, secret) -> None:
    other, document = secret
    everything = _key(kb, "admin")
    answer = everything.post("/api/tools/lookup_knowledge",
                             {"query": "payroll dashboard restart", "session_id": "s-1",
                              "tool_call_id": "call-1"}, format="json").json()
    ids = [item["document_id"] for item in answer["evidence"]]
    assert any(i.startswith(document.doc_key) for i in ids)

    scoped_admin = _key(kb, "admin", other)
    _same_as_missing(scoped_admin.get("/api/diagnosis/s-1/trace"),
                     scoped_admin.get(f"/api/diagnosis/{MISSING}/trace"), "s-1")
    assert everything.get("/api/diagnosis/s-1/trace").status_code == 200

    scoped_tool = _key(kb, "tool", other)
    for ask in ({"tool_call_id": "call-1"}, {"session_id": "s-1"}):
        verdict = scoped_tool.post("/api/tools/evidence_guard", {**ask, "document_ids": ids},
                                   format="json").json()
        assert verdict == {"ready": [], "not_ready": ids}
        confirmed = everything.post("/api/tools/evidence_guard", {**ask, "document_ids": ids},
                                    format="json").json()
        assert confirmed["ready"] == ids


def test_a_tool_key_reads_no_job(kb, store, secret) -> None:
    """A job's log names the files it read (a restricted document's too): a tool key's
    answer is the same 403 whether the job exists, is its dataset's or is deactivated's."""
    job = Job.objects.filter(dataset=kb.dataset).first()
    assert job is not None and kb.admin.get(f"/api/jobs/{job.pk}").status_code == 200
    refused = kb.tool.get(f"/api/jobs/{job.pk}")
    assert refused.status_code == 403
    assert kb.tool.get(f"/api/jobs/{MISSING}").json() == refused.json()
    kb.dataset.activated = False
    kb.dataset.save()
    assert kb.tool.get(f"/api/jobs/{job.pk}").json() == refused.json()
    assert kb.admin.get(f"/api/jobs/{job.pk}").status_code == 200  # admins manage it still
    listed = kb.tool.get(f"/api/datasets/{kb.dataset.pk}/documents")
    assert listed.status_code == 404


def test_a_tool_key_lists_only_what_a_lookup_may_serve(kb, store, secret) -> None:
    other, document = secret
    kb.admin.patch(f"/api/documents/{document.doc_key}", {"activated": False}, format="json")

    as_tool = kb.tool.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"]
    as_admin = kb.admin.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"]

    assert as_tool == []
    assert [(d["document_id"], d["activated"]) for d in as_admin] == [(document.doc_key, False)]


def test_platform_jobs_are_not_a_tenants_to_read(kb, make_key) -> None:
    _, operator = make_key(tenant="platform-ops", role="platform")
    started = api_client(operator).post("/api/knowledge/reconcile")
    assert started.status_code == 202, started.content
    job = started.json()["job"]["id"]

    _same_as_missing(kb.admin.get(f"/api/jobs/{job}"), kb.admin.get(f"/api/jobs/{MISSING}"), job)
    assert api_client(operator).get(f"/api/jobs/{job}").status_code == 200


@pytest.mark.parametrize("path", ["/api/datasets/9223372036854775808/documents",
                                  "/api/documents/99999999999999999999999",
                                  "/api/jobs/-1", "/api/documents/abc/reindex"])
def test_ids_that_cannot_exist_are_404_never_500(kb, path) -> None:
    response = kb.admin.get(path) if "reindex" not in path else kb.admin.post(path)
    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"


def test_unknown_api_paths_answer_the_json_error_shape(kb) -> None:
    response = kb.admin.get("/api/no/such/thing")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "message": "No such endpoint.", "extra": {}}


def test_a_dataset_id_beyond_bigint_is_a_400_not_a_500(kb) -> None:
    response = kb.tool.post("/api/tools/lookup_knowledge",
                            {"query": "x", "dataset_ids": [9223372036854775808]}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid"
