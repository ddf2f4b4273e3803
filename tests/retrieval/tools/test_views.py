"""POST /api/tools/lookup_knowledge end to end: real import, real Milvus Lite, real cache."""

from __future__ import annotations

import json
import uuid
from typing import Any, cast

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from audit.canonical import canonical_get
from audit.models import Outcome, ToolInvocation
from datasets.models import ApiKey
from retrieval.lookup import project
from tests.conftest import BOTH_RUNTIMES
from tests.retrieval.conftest import (
    CONTRACT_KEYS,
    EVIDENCE_KEYS,
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    import_runbooks,
    lookup,
    ready,
)

FORBIDDEN_KEYS = {"score", "raw_score", "quality", "dense_l2", "distance", "rrf", "traces",
                  "trace", "retrievalTrace", "hints", "filters", "config", "pack", "vector",
                  "metadata", "tenant_id", "dataset_id", "error", "timings_ms"}


def all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


KNOWN_QUESTIONS = {
    "my pod keeps restarting in CrashLoopBackOff, how do I find out why the container exits":
        "kubernetes/pod-crashloopbackoff.md",
    "Redis 集群里只有一个分片 CPU 打满，别的分片很空闲，怎么找到热 key": "cache/redis-hot-key.md",
    "java.lang.OutOfMemoryError: Java heap space, how do I get a heap dump and find the leak":
        "jvm/jvm-heap-oom.md",
}


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_a_known_question_about_the_sample_knowledge_base_finds_its_runbook(
        runtime: str, store: Any, make_key: MakeKey) -> None:
    import_runbooks(settings.KB_KNOWLEDGE_DIR, tenant="acme", dataset="knowledge-base")
    _, secret = make_key("acme")
    answers = {}
    for question in KNOWN_QUESTIONS:
        body = ready(lookup(client_for(secret), question))
        assert body["relevance_level"] in ("PRECISE", "REFERENCE")
        answers[question] = body["evidence"][0]["source"]
    assert answers == KNOWN_QUESTIONS


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_the_answer_is_the_agent_contract_with_no_score_or_trace(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    call = f"call-{uuid.uuid4().hex}"
    response = lookup(client_for(secret), "  nginx 502 bad gateway upstream connection refused  ",
                      tool_call_id=call, session_id=f"s-{uuid.uuid4().hex}")
    body = ready(response)

    assert set(body) == CONTRACT_KEYS
    assert body["tool_call_id"] == call
    assert body["query"] == "nginx 502 bad gateway upstream connection refused"  # trimmed
    assert body["returned_count"] == len(body["evidence"]) >= 1
    assert body["truncated"] is False
    first = body["evidence"][0]
    assert set(first) == EVIDENCE_KEYS
    nginx = acme.documents["nginx"]
    assert first["document_id"].startswith(f"{nginx.doc_key}#")
    assert (first["source"], first["title"]) == ("nginx.md", "Nginx 502 Bad Gateway")
    assert first["breadcrumb"].startswith("Nginx 502 Bad Gateway > ")
    excerpts = " ".join(e["excerpt"] for e in body["evidence"])
    assert "connect() failed (111: Connection refused)" in excerpts
    # No scores, traces, internals or store fields anywhere in what the agent sees.
    assert not all_keys(body) & FORBIDDEN_KEYS, all_keys(body) & FORBIDDEN_KEYS


@pytest.mark.django_db
def test_one_call_mints_one_id_and_builds_its_views_once(
        acme: Imported, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's view and the audit's details are built once per call and shared by the
    body, the audit row and the canonical record, under one id minted for a call without."""
    built: list[str] = []
    view_of, details_of = project.RagToolResult.of.__func__, project.trace_details

    def counted_view(cls: type[project.RagToolResult], result: Any) -> project.RagToolResult:
        built.append("view")
        return view_of(cls, result)

    def counted_details(result: Any) -> dict[str, Any]:
        built.append("details")
        return details_of(result)

    monkeypatch.setattr(project.RagToolResult, "of", classmethod(counted_view))
    monkeypatch.setattr(project, "trace_details", counted_details)
    _, secret = make_key("acme")
    body = ready(lookup(client_for(secret), "kafka consumer group lag keeps growing"))

    assert sorted(built) == ["details", "view"]
    call = body["tool_call_id"]
    assert call.startswith("call_")
    row = ToolInvocation.objects.get(tool_call_id=call)
    assert row.returned_count == body["returned_count"]
    record = canonical_get(tenant_id=acme.tenant.pk, tool_call_id=call)
    assert record is not None and [doc for doc, _ in record["ready"]] == evidence_ids(body)


@pytest.mark.integration  # reads Redis itself (the table of the embedded defaults: test_canonical)
@pytest.mark.django_db
def test_the_canonical_record_is_in_redis_under_the_tool_call_id_with_a_ttl(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    call = f"call-{uuid.uuid4().hex}"
    body = ready(lookup(client_for(secret), "kafka consumer group lag keeps growing",
                        tool_call_id=call))

    key = cache.make_key(f"kb:canonical:{acme.tenant.pk}:{call}")
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        assert client.exists(key) == 1, f"{key} is not in Redis"
        ttl = cast(int, client.ttl(key))
        assert 0 < ttl <= settings.KB_CANONICAL_TTL_SECONDS
        assert call.encode() in cast(bytes, client.get(key))
    finally:
        client.close()
    # What the agent received as READY, with the datasets it came from (the guard checks the
    # caller's scope against them); neither the query nor the excerpts (the audit has how
    # the answer was made).
    record = canonical_get(tenant_id=acme.tenant.pk, tool_call_id=call)
    assert record is not None
    assert [doc for doc, _ in record["ready"]] == evidence_ids(body)
    assert {dataset for _, dataset in record["ready"]} == {acme.dataset.pk}
    assert record["evidence_status"] == "READY"
    assert "query" not in record and "kafka" not in json.dumps(record)


@pytest.mark.django_db
def test_query_is_required_trimmed_and_at_most_kb_max_query_chars(
        acme: Imported, make_key: MakeKey) -> None:
    assert settings.KB_MAX_QUERY_CHARS == 4000
    _, secret = make_key("acme")
    client = client_for(secret)

    for body in ({}, {"query": ""}, {"query": "   \n\t "}, {"query": None}):
        response = client.post("/api/tools/lookup_knowledge", body, format="json")
        assert response.status_code == 400, (body, response.content)
        error = response.json()
        assert error["code"] == "invalid" and "query" in error["extra"]["fields"]

    too_long = lookup(client, "kafka consumer lag " * 210 + "x" * 11)  # 4001 characters
    assert too_long.status_code == 400
    assert "query" in too_long.json()["extra"]["fields"]

    # 3000 characters of real text is a fine question; the whole of it is searched.
    long_question = ("kafka consumer group lag keeps growing on every partition. " * 60)[:3000]
    body = ready(lookup(client, long_question))
    assert body["query"] == long_question.strip()
    assert {acme.stem_of(e) for e in evidence_ids(body)} == {"kafka"}

    exactly = lookup(client, "kafka consumer lag " * 210 + "x" * 10)  # 4000 characters
    assert exactly.status_code == 200, exactly.content


@pytest.mark.django_db
def test_without_a_key_or_with_a_bad_or_revoked_key_the_answer_is_401(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    forged = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    revoked_key, revoked = make_key("acme")
    ApiKey.objects.filter(pk=revoked_key.pk).update(revoked=True)

    for used in (None, "kb_nonsense", forged, revoked):
        response = lookup(client_for(used), "nginx 502 bad gateway")
        assert response.status_code == 401, (used, response.content)
        assert response.json()["code"] in ("not_authenticated", "authentication_failed")
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"Bad Gateway" not in response.content

    # The good key still works, and every refusal was audited as one.
    ready(lookup(client_for(secret), "nginx 502 bad gateway"))
    assert ToolInvocation.objects.filter(outcome=Outcome.UNAUTHENTICATED).count() == 4


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_a_deactivated_or_deleted_document_never_appears(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _, admin_secret = make_key("acme", role="admin")
    _, secret = make_key("acme")
    admin, tool = client_for(admin_secret), client_for(secret)
    question = "nginx 502 bad gateway upstream connection refused"
    nginx = acme.documents["nginx"]

    def nginx_evidence() -> list[str]:
        response = lookup(tool, question)
        assert response.status_code == 200, response.content
        return [e for e in evidence_ids(response.json()) if acme.stem_of(e) == "nginx"]

    assert nginx_evidence(), "the runbook is found while it is active"

    off = admin.patch(f"/api/documents/{nginx.doc_key}", {"activated": False}, format="json")
    assert off.status_code == 200 and off.json()["activated"] is False
    assert nginx_evidence() == []

    on = admin.patch(f"/api/documents/{nginx.doc_key}", {"activated": True}, format="json")
    assert on.status_code == 200
    assert nginx_evidence(), "reactivated, it is found again"

    assert admin.delete(f"/api/documents/{nginx.doc_key}").status_code == 204
    assert nginx_evidence() == []
    response = lookup(tool, question)
    assert response.json()["evidence_status"] == "EMPTY"  # nothing else is about a 502


@pytest.mark.django_db
def test_chunks_are_deduplicated_by_evidence_key_and_limited_per_document(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    body = ready(lookup(client_for(secret), "kafka consumer group lag keeps growing"))
    ids = evidence_ids(body)
    # All five kafka chunks match; the default max_chunks_per_document=2 keeps two of them,
    # each with its own chunk-level identity (not folded into one per document).
    assert len(ids) == len(set(ids)) == 2
    assert {acme.stem_of(e) for e in ids} == {"kafka"}
    assert len({e.split("#")[1] for e in ids}) == 2
    assert acme.documents["kafka"].chunk_count == 5
