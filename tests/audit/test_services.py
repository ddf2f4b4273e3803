"""One audit row for every tool call, without the raw query or excerpt bodies by default."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from django.forms.models import model_to_dict
from rest_framework import exceptions
from rest_framework.test import APIClient

from audit.models import ToolInvocation
from audit.services import invocation_record, query_fingerprint
from datasets.models import ApiKey, Dataset, Tenant
from kbplatform.errors import ApiError
from retrieval.lookup.project import invocation_of, trace_details
from retrieval.types import EvidenceStatus, RelevanceLevel
from tests.retrieval.builders import audit_record, lookup_result

pytestmark = pytest.mark.django_db

URL = "/api/tools/lookup_knowledge"
QUERY = "how to set a redis ttl"  # the builders' query
MakeKey = Callable[..., tuple[ApiKey, str]]


def row_text(row: ToolInvocation) -> str:
    """Everything stored in the row, as one string to search."""
    return json.dumps(model_to_dict(row), default=str, ensure_ascii=False)


def client_for(plaintext: str | None = None) -> APIClient:
    client = APIClient()
    if plaintext:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


# --- the service, with results built by hand ---------------------------------------------

def test_ready_result_is_one_row_with_details_and_no_raw_text(make_key: MakeKey) -> None:
    key, _ = make_key()
    result = lookup_result()
    invocation_record(api_key=key, result=invocation_of(result), latency_ms=31.4159)

    row = ToolInvocation.objects.get()
    assert (row.tool_call_id, row.session_id, row.tool_name) == ("call-1", "s-1",
                                                                  "lookup_knowledge")
    assert (row.tenant_id, row.api_key_id) == (key.tenant_id, key.pk)
    assert (row.outcome, row.evidence_status, row.relevance_level) == ("ok", "READY", "PRECISE")
    assert (row.returned_count, row.config_version, row.latency_ms) == (2, 3, 31.416)
    # The details are the project's audit view, stored as JSON (NaN scores become null).
    assert row.details == {"retrievalDetails": json.loads(json.dumps(trace_details(result)))}
    details = row.details["retrievalDetails"]
    assert details["retry"] == {"ran": True, "reason": "filtered search below reference"}
    assert details["stages"][0]["candidates"][1] == {"evidence_key": "9#chunk-2", "score": None}
    # Privacy default: a keyed hash and the length, never the text or an excerpt body.
    assert (row.query_hash, row.query_length) == (query_fingerprint(QUERY), len(QUERY))
    assert row.query_text == ""
    assert QUERY not in row_text(row)
    assert "Redis TTL body" not in row_text(row) and "Second body" not in row_text(row)


def test_query_hash_is_keyed_not_a_plain_sha256() -> None:
    import hashlib

    assert query_fingerprint(QUERY) == query_fingerprint(QUERY)
    assert query_fingerprint(QUERY) != hashlib.sha256(QUERY.encode()).hexdigest()
    assert query_fingerprint(QUERY) != query_fingerprint(QUERY + "?")


def test_raw_query_is_stored_only_when_the_setting_is_on(make_key: MakeKey,
                                                         settings: Any) -> None:
    key, _ = make_key()
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    invocation_record(api_key=key, result=audit_record(), latency_ms=1.0)
    row = ToolInvocation.objects.get()
    assert row.query_text == QUERY
    assert "Redis TTL body" not in row_text(row)  # excerpts stay out whatever the setting


@pytest.mark.parametrize(("status", "outcome"), [(EvidenceStatus.EMPTY, "empty"),
                                                 (EvidenceStatus.UNAVAILABLE, "unavailable")])
def test_empty_and_unavailable_results(make_key: MakeKey, status: EvidenceStatus,
                                       outcome: str) -> None:
    key, _ = make_key()
    invocation_record(api_key=key, result=audit_record(status, relevance=RelevanceLevel.NONE),
                      latency_ms=5.0)
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.evidence_status, row.relevance_level) == (outcome, status.value,
                                                                       "NONE")
    # What the agent saw: EMPTY and UNAVAILABLE never carry evidence.
    assert row.returned_count == 0


@pytest.mark.parametrize(("error", "outcome"), [
    (exceptions.ValidationError({"query": ["This field may not be blank."]}), "invalid"),
    (exceptions.NotAuthenticated(), "unauthenticated"),
    (exceptions.AuthenticationFailed(), "unauthenticated"),
    (ApiError("no", code="forbidden", status_code=403), "forbidden"),
    (ApiError("unknown dataset ids: [9]", code="unknown_dataset"), "invalid"),
    (exceptions.MethodNotAllowed("GET"), "invalid"),
    (RuntimeError(f"boom while asking {QUERY!r}"), "error"),
])
def test_failures_before_a_result(make_key: MakeKey, error: Exception, outcome: str) -> None:
    key, _ = make_key()
    payload = {"query": QUERY, "tool_call_id": "call-9", "session_id": "s-9"}
    invocation_record(api_key=key, payload=payload, error=error, latency_ms=2.0)
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.tool_call_id, row.session_id) == (outcome, "call-9", "s-9")
    assert (row.evidence_status, row.relevance_level, row.returned_count) == ("", "", 0)
    assert (row.query_hash, row.query_length) == (query_fingerprint(QUERY), len(QUERY))
    assert row.error == type(error).__name__
    assert row.details["retrievalDetails"] is None
    assert row.details["failure"]["type"] == type(error).__name__
    assert QUERY not in row_text(row)  # an exception's message is not stored either


def test_a_rejected_body_keeps_only_plausible_ids(make_key: MakeKey) -> None:
    key, _ = make_key()
    payload = {"query": ["not", "a", "string"], "tool_call_id": "x" * 129, "session_id": 5}
    invocation_record(api_key=key, payload=payload, latency_ms=1.0,
                      error=exceptions.ValidationError({"query": ["Not a valid string."]}))
    row = ToolInvocation.objects.get()
    assert (row.tool_call_id, row.session_id, row.query_hash, row.query_length) == ("", "", "",
                                                                                    None)
    assert row.details["failure"]["codes"] == {"query": ["invalid"]}


@pytest.mark.django_db(transaction=True)
def test_a_failed_write_is_logged_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    # A key that does not exist in the database: the insert breaks its foreign key for real.
    ghost = ApiKey(pk=987654321, tenant=Tenant.objects.create(slug="ghost"), prefix="ghost")
    with caplog.at_level(logging.ERROR, logger="audit.services"):
        invocation_record(api_key=ghost, result=audit_record(), latency_ms=1.0)
    assert ToolInvocation.objects.count() == 0
    assert "audit: could not record tool call 'call-1'" in caplog.text


# --- through the tool endpoint: exactly one row per call, whatever the outcome ------------

def test_empty_answer_writes_one_row(make_key: MakeKey) -> None:
    key, plaintext = make_key()  # the tenant has no dataset: EMPTY without touching Milvus
    response = client_for(plaintext).post(URL, {"query": QUERY, "tool_call_id": "call-e",
                                                "session_id": "s-e"}, format="json")
    assert response.status_code == 200 and response.json()["evidence_status"] == "EMPTY"
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.tool_call_id, row.session_id) == ("empty", "call-e", "s-e")
    assert (row.tenant_id, row.api_key_id, row.returned_count) == (key.tenant_id, key.pk, 0)
    assert row.details["retrievalDetails"]["retry"]["reason"] == "no readable dataset"
    assert row.latency_ms > 0
    assert row.query_text == "" and QUERY not in row_text(row)


def test_validation_failure_writes_one_row(make_key: MakeKey) -> None:
    key, plaintext = make_key()
    response = client_for(plaintext).post(URL, {"query": "", "tool_call_id": "call-v"},
                                          format="json")
    assert response.status_code == 400
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.tool_call_id, row.api_key_id) == ("invalid", "call-v", key.pk)
    assert row.details["failure"] == {"type": "ValidationError", "status": 400,
                                      "codes": {"query": ["blank"]}}


def test_another_tenants_dataset_writes_one_row(make_key: MakeKey) -> None:
    other = Dataset.objects.create(tenant=Tenant.objects.create(slug="other"), name="secret")
    key, plaintext = make_key()
    response = client_for(plaintext).post(URL, {"query": QUERY, "dataset_ids": [other.pk]},
                                          format="json")
    assert response.status_code == 400  # as unknown as a dataset that does not exist
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.tenant_id, row.query_length) == ("invalid", key.tenant_id,
                                                              len(QUERY))


@pytest.mark.parametrize("plaintext", [None, "kb_nothere_0000000000000000000000000000"])
def test_missing_or_invalid_key_writes_one_row(make_key: MakeKey, plaintext: str | None) -> None:
    make_key()
    response = client_for(plaintext).post(URL, {"query": QUERY, "tool_call_id": "call-x"},
                                          format="json")
    assert response.status_code == 401
    row = ToolInvocation.objects.get()
    assert (row.outcome, row.tenant_id, row.api_key_id) == ("unauthenticated", None, None)
    # An unauthenticated body is not read: no ids, no hash.
    assert (row.tool_call_id, row.query_hash) == ("", "")


def test_wrong_method_and_bad_json_write_one_row_each(make_key: MakeKey) -> None:
    _, plaintext = make_key()
    client = client_for(plaintext)
    assert client.get(URL).status_code == 405
    assert client.post(URL, "{not json", content_type="application/json").status_code == 400
    assert sorted(ToolInvocation.objects.values_list("error", flat=True)) == [
        "MethodNotAllowed", "ParseError"]
    assert set(ToolInvocation.objects.values_list("outcome", flat=True)) == {"invalid"}


def test_a_query_with_a_lone_surrogate_still_has_a_fingerprint() -> None:
    """A command line's undecodable byte reaches the audit as a lone surrogate: hashed, not a
    failure that would leave the call without its row."""
    from audit.privacy import query_fingerprint

    assert query_fingerprint("\ud800") != query_fingerprint("\ud801")
    assert query_fingerprint("x") == query_fingerprint("x")
