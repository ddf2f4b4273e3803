"""A failed backend is UNAVAILABLE with a 503, never "no results"; the service recovers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from audit.canonical import canonical_get
from audit.models import EvidenceReplay, Outcome, ToolInvocation
from retrieval.index import milvus
from retrieval.index.milvus import VectorStoreUnavailable, reset_connection
from retrieval.models import RagConfig
from retrieval.ragconfig.services import rag_config_update
from tests.conftest import wait_until
from tests.retrieval.conftest import (
    CONTRACT_KEYS,
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    lookup,
    ready,
)

QUESTION = "nginx 502 bad gateway upstream connection refused"


def milvus_reachable() -> bool:
    # gRPC waits out a reconnect backoff after the server comes back; calls fail until then.
    try:
        milvus.collections().names()
    except VectorStoreUnavailable:
        return False
    return True


def assert_unavailable(response: Any, call: str) -> None:
    assert response.status_code == 503, response.content
    body = response.json()
    assert set(body) == CONTRACT_KEYS  # the agent's contract, not an error page
    assert body["evidence_status"] == "UNAVAILABLE"
    assert body["tool_call_id"] == call
    assert (body["evidence"], body["returned_count"], body["relevance_level"]) == ([], 0, "NONE")


@pytest.mark.integration  # stops and restarts the Milvus server process
@pytest.mark.django_db
def test_milvus_stopped_is_503_unavailable_and_the_same_process_recovers(
        acme: Imported, make_key: MakeKey, milvus_server: Any, settings: Any) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    assert ready(lookup(client, QUESTION))
    settings.MILVUS_TIMEOUT_SECONDS = 3  # fail fast; the behaviour is the same with 10 s
    reset_connection()
    assert ready(lookup(client, QUESTION))  # connected with the short timeout

    calls = [f"call-{uuid.uuid4().hex}" for _ in range(2)]
    milvus_server.stop()
    try:
        # A connected client whose server went away ...
        assert_unavailable(lookup(client, QUESTION, tool_call_id=calls[0]), calls[0])
        # ... and a process that starts while Milvus is down.
        reset_connection()
        assert_unavailable(lookup(client, QUESTION, tool_call_id=calls[1]), calls[1])
    finally:
        milvus_server.start()
        wait_until(milvus_reachable, timeout=60, what="Milvus to accept calls again")

    rows = ToolInvocation.objects.filter(tool_call_id__in=calls)
    assert {r.outcome for r in rows} == {Outcome.UNAVAILABLE} and rows.count() == 2
    assert all("VectorStoreUnavailable" in r.error for r in rows)
    record = canonical_get(tenant_id=acme.tenant.pk, tool_call_id=calls[0])
    assert record is not None
    assert (record["evidence_status"], record["ready"]) == ("UNAVAILABLE", [])

    # Milvus is back (with its collections released): lookups are READY again, in the same
    # process, without a restart.
    body = ready(lookup(client, QUESTION))
    assert {acme.stem_of(e) for e in evidence_ids(body)} == {"nginx"}


@pytest.mark.django_db
def test_a_stored_config_that_no_longer_validates_is_503_unavailable(
        acme: Imported, make_key: MakeKey) -> None:
    key, secret = make_key("acme")
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 2},
                               changed_by="test")
    # A hand edit the database accepts but the converter does not (excerpt > context).
    RagConfig.objects.filter(pk=config.pk).update(max_context_chars=300, max_excerpt_chars=900)
    call = f"call-{uuid.uuid4().hex}"

    response = lookup(client_for(secret), QUESTION, tool_call_id=call)
    assert_unavailable(response, call)
    # The operator reads which setting is broken; the agent does not.
    assert b"max_excerpt_chars" not in response.content
    row = ToolInvocation.objects.get(tool_call_id=call)
    assert row.outcome == Outcome.UNAVAILABLE
    assert "RagConfigError" in row.error and "max_excerpt_chars" in row.error

    # Fixing the row brings the answers back.
    RagConfig.objects.filter(pk=config.pk).update(max_context_chars=6000)
    assert ready(lookup(client_for(secret), QUESTION))["returned_count"] <= 2


def stop_redis_for_this_test(settings: Any) -> None:
    # Nothing listens on port 1: to this process the cache (Redis) is down until the test ends.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}


@pytest.mark.integration  # the production cache: Redis
@pytest.mark.django_db
def test_redis_down_makes_the_evidence_guard_503_not_a_500(make_key: MakeKey,
                                                           settings: Any) -> None:
    _, secret = make_key("acme")
    stop_redis_for_this_test(settings)
    for body in ({"tool_call_id": "call-1", "document_ids": ["1#chunk-0"]},
                 {"session_id": "s-1", "document_ids": ["1#chunk-0"]}):
        response = client_for(secret).post("/api/tools/evidence_guard", body, format="json")
        assert response.status_code == 503, response.content
        assert response.json()["code"] == "unavailable"


@pytest.mark.integration  # the production cache: Redis
@pytest.mark.django_db
def test_redis_down_makes_a_lookup_503_not_a_500(acme: Imported, make_key: MakeKey,
                                                 settings: Any) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    assert ready(lookup(client, QUESTION))
    stop_redis_for_this_test(settings)
    call = f"call-{uuid.uuid4().hex}"

    response = lookup(client, QUESTION, tool_call_id=call)
    # Evidence the guard could never confirm must not reach the agent as READY, and the
    # agent reads its own contract (UNAVAILABLE), not a generic error body.
    assert_unavailable(response, call)
    assert b"Bad Gateway" not in response.content
    row = ToolInvocation.objects.get(tool_call_id=call)
    assert row.outcome == Outcome.UNAVAILABLE and "canonical" in row.error
    # Nor can it be replayed: the replay written before the record went with it.
    assert not EvidenceReplay.objects.filter(tool_call_id=call).exists()


@pytest.mark.integration  # the production cache: Redis
@pytest.mark.django_db
def test_redis_down_makes_a_fetch_unavailable_not_unconfirmable(
        acme: Imported, make_key: MakeKey, settings: Any) -> None:
    _, secret = make_key("acme")
    asked = f"{acme.documents['nginx'].doc_key}#chunk-0"
    stop_redis_for_this_test(settings)

    response = client_for(secret).post("/api/tools/fetch_evidence",
                                       {"document_id": asked, "tool_call_id": "f-down"},
                                       format="json")
    # A section the guard could never confirm is not handed out.
    assert response.status_code == 503, response.content
    body = response.json()
    assert (body["evidence_status"], body["text"], body["document_ids"]) == \
        ("UNAVAILABLE", "", [])
    row = ToolInvocation.objects.get(tool_call_id="f-down")
    assert row.outcome == Outcome.UNAVAILABLE and "canonical" in row.error
