"""GET /api/diagnosis/{session_id}/trace: a session's calls, for people of the same tenant."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from audit.models import ToolInvocation
from audit.services import invocation_record
from datasets.models import ApiKey
from tests.retrieval.builders import audit_record

pytestmark = pytest.mark.django_db

MakeKey = Callable[..., tuple[ApiKey, str]]
QUERY = "how to set a redis ttl"


def client_for(plaintext: str | None = None) -> APIClient:
    client = APIClient()
    if plaintext:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture
def acme_session(make_key: MakeKey) -> ApiKey:
    """Session s-1 of tenant acme: a READY call, then an EMPTY call through the endpoint."""
    tool_key, plaintext = make_key("acme")
    invocation_record(api_key=tool_key, result=audit_record(), latency_ms=12.0)
    response = client_for(plaintext).post(
        "/api/tools/lookup_knowledge",
        {"query": QUERY, "tool_call_id": "call-2", "session_id": "s-1"}, format="json")
    assert response.status_code == 200
    client_for(plaintext).post("/api/tools/lookup_knowledge",
                               {"query": QUERY, "session_id": "s-other"}, format="json")
    return tool_key


def test_trace_replays_the_session_in_order(acme_session: ApiKey, make_key: MakeKey) -> None:
    _, admin = make_key("acme", role="admin")
    response = client_for(admin).get("/api/diagnosis/s-1/trace")
    assert response.status_code == 200
    body = response.json()
    assert body["session_id"] == "s-1"
    calls = body["toolInvocations"]
    assert [c["tool_call_id"] for c in calls] == ["call-1", "call-2"]
    ready, empty = calls
    assert (ready["evidence_status"], ready["relevance_level"]) == ("READY", "PRECISE")
    assert ready["latency_ms"] == 12.0 and ready["created_at"]
    stages = ready["retrievalDetails"]["stages"]
    assert stages[0]["stage"] == "search"
    assert stages[0]["candidates"][0] == {"evidence_key": "42#chunk-0", "score": 0.0328}
    assert ready["retrievalDetails"]["filters"] == {"tenant": 7, "datasets": [1, 2],
                                                    "category": "ops", "excluded_documents": 0,
                                                    "metadata": "", "call": {
                                                        "fields": [], "documents": None}}
    assert (empty["evidence_status"], empty["outcome"]) == ("EMPTY", "empty")
    # The trace is for replay, not a second copy of the answer.
    assert QUERY not in response.content.decode()
    assert "Redis TTL body" not in response.content.decode()


def test_failed_calls_are_in_the_trace(make_key: MakeKey) -> None:
    _, plaintext = make_key("acme")
    client_for(plaintext).post("/api/tools/lookup_knowledge",
                               {"query": "", "tool_call_id": "call-bad", "session_id": "s-2"},
                               format="json")
    _, admin = make_key("acme", role="admin")
    calls = client_for(admin).get("/api/diagnosis/s-2/trace").json()["toolInvocations"]
    assert [(c["tool_call_id"], c["outcome"], c["retrievalDetails"]) for c in calls] == [
        ("call-bad", "invalid", None)]


def test_another_tenants_session_is_not_found(acme_session: ApiKey, make_key: MakeKey) -> None:
    _, other_admin = make_key("globex", role="admin")
    response = client_for(other_admin).get("/api/diagnosis/s-1/trace")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert client_for(other_admin).get("/api/diagnosis/nope/trace").status_code == 404


def test_the_agents_tool_key_cannot_read_the_trace(acme_session: ApiKey,
                                                   make_key: MakeKey) -> None:
    _, tool = make_key("acme", role="tool")
    assert client_for(tool).get("/api/diagnosis/s-1/trace").status_code == 403


def test_no_key_is_401(acme_session: ApiKey) -> None:
    assert client_for().get("/api/diagnosis/s-1/trace").status_code == 401
    # Reading the trace is not a tool call: nothing more is audited.
    assert ToolInvocation.objects.count() == 3


def test_a_dataset_scoped_reader_sees_the_calls_within_its_datasets(make_key: MakeKey) -> None:
    from dataclasses import replace

    from audit.selectors import session_trace

    key, _ = make_key("acme")
    record = audit_record()  # searched datasets 1 and 2
    invocation_record(api_key=key, result=record, latency_ms=1.0)
    invocation_record(api_key=key, result=replace(record, tool_call_id="call-9", dataset_ids=(1,)),
                      latency_ms=1.0)

    def trace(readable: list[int]) -> list[str]:
        return [row.tool_call_id for row in session_trace(
            tenant_id=key.tenant_id, session_id="s-1", dataset_ids=readable)]

    assert trace([1]) == ["call-9"]
    assert trace([1, 2]) == ["call-1", "call-9"]
    assert trace([3]) == []
