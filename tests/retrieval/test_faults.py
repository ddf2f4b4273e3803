"""Faults with real processes: the worker killed mid-ingest and mid-rebuild, Milvus stopped or
hung during uploads, activation and rebuilds, the database locked, and the races of several
writers. Expected: 503 UNAVAILABLE (never EMPTY, never a 500), no acknowledged chunk lost, and
the database and Milvus agree afterwards (reconcile finds no drift)."""

from __future__ import annotations

import random
import subprocess
import time
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from datasets.models import Document
from retrieval.index import milvus
from retrieval.index.milvus import VectorStoreUnavailable, reset_connection
from retrieval.index.reconcile import reconcile
from retrieval.index.versions import serving_index
from retrieval.models import EmbeddingCache, IndexVersion
from tests.conftest import wait_until
from tests.datasets.builders import api_client, found_doc_ids, markdown, runbook, upload

# integration: a Celery worker process and the Milvus server are killed, stopped or hung; the
# database is locked from MariaDB's own client (the SQLite lock: tests/kbplatform/test_errors.py).
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REBUILD = "/api/knowledge/rebuild-hybrid?confirm=REBUILD"


def long_runbook(topic: str, sections: int = 80) -> bytes:
    """Slow to embed (one chunk per section, text never embedded before)."""
    salt = uuid.uuid4().hex
    return markdown(f"{topic} runbook", {
        f"Step {n}": f"For {topic} ({salt}), step {n}: " + " ".join(
            f"check the {topic} dashboard panel {n}.{m} and restart {topic} if it is red."
            for m in range(8))
        for n in range(1, sections + 1)}, category="ops", keywords=[topic])


def status_of(document: Document) -> str:
    return str(Document.objects.get(pk=document.pk).status)


def job(client: Any, job_id: int) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"/api/jobs/{job_id}").json()
    return body


def finished(client: Any, job_id: int) -> bool:
    return job(client, job_id)["status"] in ("succeeded", "failed")


def assert_agree() -> None:
    """The serving collection holds exactly what the database says."""
    report = reconcile(version=serving_index().version)
    assert report.clean, report.summary()


def milvus_answers() -> bool:
    try:
        milvus.collections().names()
        return True
    except VectorStoreUnavailable:
        return False


@pytest.fixture
def operator(make_key):  # type: ignore[no-untyped-def]
    _, secret = make_key(tenant="platform-ops", role="platform")
    return api_client(secret)


@pytest.fixture
def milvus_back(milvus_server):  # type: ignore[no-untyped-def]
    """The session's Milvus server, running and answering again after the test."""
    yield milvus_server
    if milvus_server.process is None:
        milvus_server.start()
    else:
        milvus_server.resume()
    reset_connection()
    wait_until(milvus_answers, timeout=60, what="Milvus to answer again")


@pytest.fixture
def worker_back(celery_worker):  # type: ignore[no-untyped-def]
    """The session's worker, running again after the test."""
    yield celery_worker
    if celery_worker.process is None:
        celery_worker.start()


def test_a_worker_killed_mid_ingest_leaves_the_document_to_the_next_worker(
        worker_back, store, kb) -> None:
    response = upload(kb.admin, kb.dataset.pk, "redis.md", long_runbook("redis"))
    assert response.status_code == 202, response.content
    document = Document.objects.get()
    wait_until(lambda: status_of(document) == Document.Status.INDEXING, timeout=60,
               what="the worker to start indexing")

    worker_back.kill()
    time.sleep(1.5)  # older than the recovery's grace (1 s in the suite's worker)
    assert status_of(document) == Document.Status.INDEXING  # stuck: nobody works on it

    worker_back.start()  # a restarted worker picks up what was in flight

    # The job is what the uploader polls; it is marked a moment after the document is ready.
    job_id = response.json()["job"]["id"]
    wait_until(lambda: finished(kb.admin, job_id), timeout=180,
               what="the upload's job finished by the restarted worker")
    assert job(kb.admin, job_id)["status"] == "succeeded"
    document.refresh_from_db()
    assert document.status == Document.Status.READY
    assert len(store.chunk_ids(document.doc_id)) == document.chunk_count == 80
    assert_agree()


def test_a_worker_killed_mid_rebuild_restarts_it_and_the_old_index_serves_meanwhile(
        worker_back, store, kb, ingest, operator) -> None:
    documents = [ingest(kb.dataset, f"{topic}.md", long_runbook(topic, sections=25))
                 for topic in ("redis", "kafka", "nginx", "mysql")]
    old = store.serving
    EmbeddingCache.objects.all().delete()  # a rebuild that embeds again: long enough to kill
    started = operator.post(REBUILD)
    assert started.status_code == 202, started.content
    job_id = started.json()["job"]["id"]
    wait_until(lambda: IndexVersion.objects.filter(status="building").exists(), timeout=120,
               what="the rebuild under way")

    worker_back.kill()
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard restart"},
                          format="json").json()
    assert answer["evidence_status"] == "READY"  # the old index keeps serving
    worker_back.start()

    wait_until(lambda: finished(operator, job_id), timeout=300, what="the restarted rebuild")
    assert job(operator, job_id)["status"] == "succeeded", job(operator, job_id)
    statuses = dict(IndexVersion.objects.values_list("collection_name", "status"))
    new = store.serving
    assert new != old and statuses[old] == "retired"
    assert list(statuses.values()).count("active") == 1
    assert "building" not in statuses.values()  # the half-built one was dropped
    assert sorted(store.collections()) == sorted([old, new])
    assert store.count() == sum(d.chunk_count for d in documents)
    assert_agree()


def test_uploads_while_milvus_hangs_are_indexed_when_it_answers_again(
        celery_worker, milvus_back, store, kb, ingest) -> None:
    ingest(kb.dataset, "base.md", runbook("base"))  # the index exists
    milvus_back.pause()
    responses = [upload(kb.admin, kb.dataset.pk, f"{topic}.md", runbook(topic, sections=3))
                 for topic in ("redis", "kafka", "nginx")]
    assert all(r.status_code == 202 for r in responses)
    time.sleep(5)  # the worker's calls time out and are retried meanwhile
    milvus_back.resume()

    wait_until(lambda: Document.objects.filter(status=Document.Status.READY).count() == 4,
               timeout=180, what="every upload indexed after Milvus came back")
    reset_connection()
    assert store.count() == sum(Document.objects.values_list("chunk_count", flat=True)) == 11
    assert_agree()


def test_lookups_while_milvus_hangs_answer_503_within_the_timeout(
        milvus_back, store, kb, ingest, settings) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    settings.MILVUS_TIMEOUT_SECONDS = 2
    reset_connection()
    milvus_back.pause()

    started = time.monotonic()
    response = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                            format="json")
    elapsed = time.monotonic() - started

    assert response.status_code == 503, response.content
    assert response.json()["evidence_status"] == "UNAVAILABLE"
    assert elapsed < 15  # bounded by the timeout (a search and a reload), never a hang
    milvus_back.resume()
    wait_until(lambda: kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                                    format="json").status_code == 200, timeout=60,
               what="lookups to answer again")


def test_activation_and_deletion_while_milvus_is_down_apply_and_nothing_half_changes(
        celery_worker, milvus_back, store, kb, ingest) -> None:
    redis, kafka = (ingest(kb.dataset, f"{t}.md", runbook(t)) for t in ("redis", "kafka"))
    milvus_back.stop()

    flipped = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                             format="json")
    deleted = kb.admin.delete(f"/api/documents/{kafka.doc_key}")
    lookup = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                          format="json")

    assert flipped.status_code == 200 and flipped.json()["activated"] is False
    assert deleted.status_code == 204
    assert lookup.status_code == 503 and lookup.json()["evidence_status"] == "UNAVAILABLE"
    milvus_back.start()
    reset_connection()
    wait_until(milvus_answers, timeout=60, what="Milvus back")

    wait_until(lambda: store.chunk_ids(kafka.doc_id) == [], timeout=120,
               what="the deleted document's chunks removed once Milvus is back")
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard restart"},
                          format="json").json()
    assert {redis.doc_key, kafka.doc_key}.isdisjoint(found_doc_ids(answer))
    assert len(store.chunk_ids(redis.doc_id)) == 2  # deactivated, not removed
    assert_agree()


def test_an_upload_that_failed_in_an_outage_is_retried_by_uploading_it_again(
        celery_worker, milvus_back, store, kb, ingest) -> None:
    ingest(kb.dataset, "base.md", runbook("base"))
    milvus_back.stop()
    raw = runbook("redis")
    first = upload(kb.admin, kb.dataset.pk, "redis.md", raw)
    assert first.status_code == 202
    wait_until(lambda: finished(kb.admin, first.json()["job"]["id"]), timeout=120,
               what="the indexing to give up")  # four retries: 1 + 2 + 4 + 8 s
    failed = job(kb.admin, first.json()["job"]["id"])
    assert failed["status"] == "failed"
    assert "127.0.0.1" not in failed["error"] and "retry" in failed["error"]
    milvus_back.start()
    reset_connection()
    wait_until(milvus_answers, timeout=60, what="Milvus back")

    again = upload(kb.admin, kb.dataset.pk, "redis.md", raw)  # not a 409: the same document

    assert again.status_code == 202, again.content
    assert again.json()["document"]["document_id"] == first.json()["document"]["document_id"]
    wait_until(lambda: finished(kb.admin, again.json()["job"]["id"]), timeout=120,
               what="the retried indexing")
    assert job(kb.admin, again.json()["job"]["id"])["status"] == "succeeded"
    assert_agree()


def test_a_rebuild_when_milvus_stops_fails_and_the_old_index_serves_again(
        celery_worker, milvus_back, store, kb, ingest, operator) -> None:
    for topic in ("redis", "kafka", "nginx"):
        ingest(kb.dataset, f"{topic}.md", long_runbook(topic, sections=30))
    old = store.serving
    EmbeddingCache.objects.all().delete()  # a rebuild that embeds again: long enough to stop
    started = operator.post(REBUILD)
    job_id = started.json()["job"]["id"]
    wait_until(lambda: job(operator, job_id)["status"] == "running", timeout=60,
               what="the rebuild under way")
    milvus_back.stop()

    wait_until(lambda: finished(operator, job_id), timeout=180, what="the rebuild to fail")
    result = job(operator, job_id)
    assert result["status"] == "failed"
    assert "127.0.0.1" not in result["error"]  # the detail is the operators', not the API's
    milvus_back.start()
    reset_connection()
    wait_until(milvus_answers, timeout=60, what="Milvus back")
    assert store.serving == old
    assert IndexVersion.objects.exclude(collection_name=old).get().status in ("failed",
                                                                             "dropped")
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard restart"},
                          format="json")
    assert answer.status_code == 200 and answer.json()["evidence_status"] == "READY"
    assert_agree()


def _hold_lock(sql: str, seconds: float) -> subprocess.Popen[bytes]:
    """Another process takes a lock on the test database and holds it."""
    db = settings.DATABASES["default"]
    script = f"{sql}; SELECT SLEEP({seconds}); UNLOCK TABLES;"
    return subprocess.Popen(["mysql", "-h", db["HOST"] or "127.0.0.1",
                             "-P", str(db["PORT"] or 3306), "-u", db["USER"], db["NAME"],
                             "-e", script])


def test_a_locked_database_is_503_never_a_500_or_a_hang(store, kb, ingest) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    connection.close()
    connection.settings_dict["OPTIONS"]["init_command"] = (
        "SET SESSION lock_wait_timeout = 2, innodb_lock_wait_timeout = 2")
    holder = _hold_lock("LOCK TABLES api_document WRITE", 15)
    try:
        time.sleep(1)
        started = time.monotonic()
        lookup = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                              format="json")
        flip = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                              format="json")
        elapsed = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
        connection.close()
        connection.settings_dict["OPTIONS"]["init_command"] = (
            f"SET SESSION lock_wait_timeout = {settings.KB_DATABASE_TIMEOUT_SECONDS}, "
            f"innodb_lock_wait_timeout = {settings.KB_DATABASE_TIMEOUT_SECONDS}")

    assert lookup.status_code == 503, lookup.content
    assert lookup.json()["evidence_status"] == "UNAVAILABLE"
    assert flip.status_code == 503, flip.content
    assert flip.json()["code"] == "unavailable"
    assert elapsed < 12
    assert Document.objects.get(pk=redis.pk).activated  # nothing half-changed


# --- races of concurrent processes -----------------------------------------------------------

def test_a_deactivation_during_indexing_is_never_overwritten(celery_worker, store, kb) -> None:
    response = upload(kb.admin, kb.dataset.pk, "redis.md", long_runbook("redis", sections=40))
    document = Document.objects.get()
    wait_until(lambda: status_of(document) == Document.Status.INDEXING, timeout=60,
               what="indexing under way")

    flip = kb.admin.patch(f"/api/documents/{document.doc_key}", {"activated": False},
                          format="json")

    assert flip.status_code == 200
    wait_until(lambda: finished(kb.admin, response.json()["job"]["id"]), timeout=180,
               what="the indexing")
    assert Document.objects.get(pk=document.pk).activated is False
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard restart"},
                          format="json").json()
    assert document.doc_key not in found_doc_ids(answer)
    assert_agree()


def test_a_deletion_during_indexing_leaves_no_orphan_chunk(celery_worker, store, kb) -> None:
    response = upload(kb.admin, kb.dataset.pk, "redis.md", long_runbook("redis", sections=40))
    document = Document.objects.get()
    wait_until(lambda: status_of(document) == Document.Status.INDEXING, timeout=60,
               what="indexing under way")

    assert kb.admin.delete(f"/api/documents/{document.doc_key}").status_code == 204

    wait_until(lambda: not Document.objects.get(pk=document.pk).sync_pending, timeout=180,
               what="the deletion applied")
    assert finished(kb.admin, response.json()["job"]["id"])
    assert store.chunk_ids(document.doc_id) == []
    assert_agree()


def test_toggles_during_a_rebuild_are_all_honoured_after_the_switch(
        celery_worker, store, kb, ingest, operator) -> None:
    topics = ["redis", "kafka", "nginx", "mysql", "kubelet", "coredns"]
    documents = {t: ingest(kb.dataset, f"{t}.md", long_runbook(t, sections=12)) for t in topics}
    EmbeddingCache.objects.all().delete()  # a rebuild that embeds again: long enough to flip
    started = operator.post(REBUILD)
    job_id = started.json()["job"]["id"]
    rng = random.Random(7)
    flips = 0
    deadline = time.monotonic() + 600
    while not finished(operator, job_id):  # flip documents for as long as the rebuild runs
        assert time.monotonic() < deadline, "the rebuild did not end in 600 s"
        topic = rng.choice(topics)
        activated = not Document.objects.get(pk=documents[topic].pk).activated
        kb.admin.patch(f"/api/documents/{documents[topic].doc_key}", {"activated": activated},
                       format="json")
        flips += 1
        time.sleep(0.05)
    assert job(operator, job_id)["status"] == "succeeded"
    assert flips > 3

    for topic, document in documents.items():
        answer = kb.tool.post("/api/tools/lookup_knowledge",
                              {"query": f"{topic} dashboard restart"}, format="json").json()
        served = document.doc_key in found_doc_ids(answer)
        assert served == Document.objects.get(pk=document.pk).activated, topic
    assert_agree()

