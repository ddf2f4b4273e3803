"""The canonical invocation store: every call of a session remembered, for its whole TTL,
without the raw query or excerpts (Redis in production, a table of its own without it)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.canonical import canonical_get, canonical_store, ready_evidence, session_tool_calls
from audit.models import CanonicalInvocation
from datasets.documents.services import tenant_get_or_create
from retrieval.lookup.project import invocation_of
from retrieval.types import ContextPack, PackedEvidence
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.builders import runbook
from tests.retrieval.builders import chunk, lookup_result


def _record(tenant_id: int, call: str, session: str = "", n: int = 1, query: str = "q"):  # type: ignore[no-untyped-def]
    result = replace(lookup_result(), tool_call_id=call, session_id=session, query=query,
                     pack=ContextPack(items=(PackedEvidence(chunk(f"{n}#chunk-0"), "text",
                                                            False),),
                                      total_chars=4, truncated=False))
    return replace(invocation_of(result), tenant_id=tenant_id)


@BOTH_RUNTIMES
@pytest.mark.django_db(transaction=True)
def test_parallel_calls_of_one_session_are_all_remembered(runtime: str) -> None:
    """Agents call tools in parallel: every call of the session must count for the guard."""
    tenant = tenant_get_or_create(slug=f"t-{uuid.uuid4().hex[:12]}").pk
    session = f"s-{uuid.uuid4().hex}"
    calls = [f"call-{n}-{uuid.uuid4().hex}" for n in range(8)]
    records = [_record(tenant, call, session, n + 1) for n, call in enumerate(calls)]
    start = threading.Barrier(len(records))

    def store(record: object) -> None:
        start.wait()  # finish together, as parallel requests of one agent step do
        canonical_store(record)  # type: ignore[arg-type]

    threads = [threading.Thread(target=store, args=(r,)) for r in records]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(session_tool_calls(tenant_id=tenant, session_id=session)) == sorted(calls)
    evidence = [f"{n + 1}#chunk-0" for n in range(len(calls))]
    verdicts = ready_evidence(tenant_id=tenant, session_id=session, document_ids=evidence)
    assert verdicts == dict.fromkeys(evidence, 1)  # READY, from dataset 1


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_the_first_call_is_still_confirmed_after_hundreds_more(runtime: str) -> None:
    """The guard forgot after ~150 lookups on the embedded defaults: the records lived in a
    database cache that culls a third of its entries when it holds 300."""
    tenant = tenant_get_or_create(slug="acme").pk
    for n in range(400):
        canonical_store(_record(tenant, f"call-{n}", "s-long", n + 1))

    assert ready_evidence(tenant_id=tenant, tool_call_id="call-0",
                          document_ids=["1#chunk-0"]) == {"1#chunk-0": 1}
    assert ready_evidence(tenant_id=tenant, session_id="s-long",
                          document_ids=["1#chunk-0", "400#chunk-0"]) == {
        "1#chunk-0": 1, "400#chunk-0": 1}


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_the_record_keeps_no_raw_query_and_no_excerpt(runtime: str, settings) -> None:
    tenant = tenant_get_or_create(slug="acme").pk
    canonical_store(_record(tenant, "call-private", query="who earns the most in payroll"))
    record = canonical_get(tenant_id=tenant, tool_call_id="call-private")
    assert record is not None
    assert "payroll" not in str(record) and "text" not in str(record.values())
    assert record["ready"] == [["1#chunk-0", 1]]

    # Nor where raw queries are kept: nothing reads it back from here, and a record lives
    # for the guard's TTL, not a tenant's retention of its questions.
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    canonical_store(_record(tenant, "call-kept", query="who earns the most in payroll"))
    kept = canonical_get(tenant_id=tenant, tool_call_id="call-kept")
    assert kept is not None and "payroll" not in str(kept)


@pytest.mark.embedded
@pytest.mark.django_db
def test_pruning_deletes_expired_records_and_keeps_live_ones(settings) -> None:
    tenant = tenant_get_or_create(slug="acme").pk
    canonical_store(_record(tenant, "call-old"))
    canonical_store(_record(tenant, "call-new"))
    CanonicalInvocation.objects.filter(tool_call_id="call-old").update(
        expires_at=timezone.now() - timedelta(seconds=1))

    call_command("prune_tool_invocations", "--days", "30", stdout=None)

    assert list(CanonicalInvocation.objects.values_list("tool_call_id", flat=True)) == \
        ["call-new"]
    assert canonical_get(tenant_id=tenant, tool_call_id="call-old") is None


@pytest.mark.embedded
@pytest.mark.django_db
def test_no_table_keeps_the_raw_query_by_default(kb, store, ingest) -> None:
    """The full query and excerpts sat for 7 days in the cache table, whatever
    KB_AUDIT_STORE_RAW_QUERY said."""
    import base64
    import hashlib
    import pickle

    from django.db import connection

    from audit.models import ToolInvocation

    ingest(kb.dataset, "redis.md", runbook("redis"))
    query = "how do I restart redis on the payroll cluster"
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": query, "session_id": "s-p"},
                          format="json")
    assert answer.status_code == 200

    plain_hash = hashlib.sha256(query.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT cache_key, value FROM kb_cache")
        # The database cache keeps base64 pickles: read what they hold.
        cached = " ".join(f"{k} {pickle.loads(base64.b64decode(v))!r}"  # noqa: S301
                          for k, v in cursor.fetchall())
    stored = " ".join(str(r) for r in CanonicalInvocation.objects.values_list("record",
                                                                            flat=True))
    audit = " ".join(str(r) for r in ToolInvocation.objects.values_list("details", "query_text"))
    for where in (cached, stored, audit):
        assert "payroll" not in where and plain_hash not in where
