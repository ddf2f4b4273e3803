"""Full rebuild: a new collection, then the switch; the old index serves until then and is
kept for a rollback."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command

from datasets.documents.services import document_delete
from datasets.models import Document, Job
from retrieval.index.embedders import get_embedder
from retrieval.models import EmbeddingCache, IndexVersion
from tests.conftest import wait_until
from tests.datasets.builders import (
    api_client,
    lookup,
    milvus_rows,
    runbook,
    top_doc_id,
)

pytestmark = pytest.mark.django_db

REBUILD = "/api/knowledge/rebuild-hybrid"


def test_rebuild_api_needs_confirm_and_a_platform_key(kb, make_key) -> None:
    _, secret = make_key(tenant="ops", role="platform")
    operator = api_client(secret)
    missing = operator.post(REBUILD)
    assert missing.status_code == 400
    assert missing.json()["code"] == "confirmation_required"
    assert "confirm=REBUILD" in missing.json()["message"]
    assert operator.post(f"{REBUILD}?confirm=rebuild").status_code == 400
    # A tenant's admin key cannot rebuild every tenant's index.
    refused = kb.admin.post(f"{REBUILD}?confirm=REBUILD")
    assert refused.status_code == 403, refused.content
    assert "platform" in refused.json()["message"]
    assert kb.tool.post(f"{REBUILD}?confirm=REBUILD").status_code == 403
    assert api_client("kb_x_y").post(f"{REBUILD}?confirm=REBUILD").status_code == 401
    assert not Job.objects.exists()


@pytest.fixture
def operator(make_key):  # type: ignore[no-untyped-def]
    """A platform operator's key (rebuild, rollback, reconcile, index versions)."""
    _, secret = make_key(tenant="platform-ops", role="platform")
    return api_client(secret)


@pytest.mark.integration  # a Celery worker process
@pytest.mark.django_db(transaction=True)
def test_rebuild_on_the_worker_switches_the_index_while_lookups_keep_working(
        celery_worker, store, kb, ingest, operator) -> None:
    topics = ["redis", "kafka", "nginx", "mysql", "kubelet", "coredns", "rabbitmq", "zookeeper"]
    documents = {topic: ingest(kb.dataset, f"{topic}.md", runbook(topic)) for topic in topics}
    old = store.serving
    # The worker's own syncs of these documents may still rewrite one (a rewrite is a delete
    # and an insert, which Milvus 2.5's engine counts apart for a moment).
    chunks = sum(document.chunk_count for document in documents.values())
    wait_until(lambda: store.count() == chunks, timeout=30, what="every chunk written")

    response = operator.post(f"{REBUILD}?confirm=REBUILD")

    assert response.status_code == 202, response.content
    job_id = response.json()["job"]["id"]
    assert response.json()["task_id"] == str(job_id)
    during_rebuild = 0

    def ended_after_a_lookup() -> bool:
        nonlocal during_rebuild
        before = operator.get(f"/api/jobs/{job_id}").json()["status"]
        if before in ("succeeded", "failed"):
            return True
        answer = lookup(kb.tool, "redis dashboard restart")
        assert answer["evidence_status"] == "READY", answer
        assert top_doc_id(answer) == documents["redis"].doc_key
        after = operator.get(f"/api/jobs/{job_id}").json()["status"]
        # It overlapped the rebuild's run: it began before the job ended and ended after the
        # job began (a quick rebuild may start and end within one lookup).
        during_rebuild += after != "queued"
        return False

    # No pause between rounds: a lookup must overlap the rebuild, however quick it is.
    wait_until(ended_after_a_lookup, timeout=300, what="the rebuild job to end", interval=0)
    job = operator.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job
    assert job["done"] == job["total"] == len(topics)
    assert during_rebuild > 0, "no lookup overlapped the rebuild"

    new = store.serving
    assert new != old and store.serves(new)
    assert sorted(store.collections()) == sorted([old, new])  # the old one, for a rollback
    wait_until(lambda: store.count() == chunks, timeout=30, what="every chunk copied")
    assert IndexVersion.objects.get(collection_name=old).status == IndexVersion.Status.RETIRED
    assert IndexVersion.objects.get(collection_name=new).status == IndexVersion.Status.ACTIVE
    assert top_doc_id(lookup(kb.tool, "kafka dashboard restart")) == documents["kafka"].doc_key


def test_a_failed_rebuild_leaves_the_old_index_serving(kb, store, ingest, eager_tasks,
                                                       operator, applied, stub,
                                                       openai_settings, settings) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    old = store.serving
    # The rebuild's new embedder is an endpoint that fails every request.
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    openai_settings(stub(500).url)

    with applied():
        response = operator.post(f"{REBUILD}?confirm=REBUILD")

    assert response.status_code == 202
    job = operator.get(f"/api/jobs/{response.json()['job']['id']}").json()
    assert job["status"] == "failed"
    # The owner reads a general message; the exception is for operators (admin, logs).
    assert "EmbeddingError" not in job["error"]
    assert "EmbeddingError" in Job.objects.get(pk=job["id"]).error_detail
    assert store.serves(old)
    assert store.collections() == [old]  # the half-built collection is gone
    failed = IndexVersion.objects.exclude(collection_name=old).get()
    assert failed.status == IndexVersion.Status.DROPPED
    assert IndexVersion.objects.get(collection_name=old).status == IndexVersion.Status.ACTIVE
    answer = lookup(kb.tool, "redis dashboard restart")  # with the old index's own embedder
    assert answer["evidence_status"] == "READY"
    assert top_doc_id(answer) == redis.doc_key


def test_a_stored_row_that_no_longer_parses_fails_alone_and_the_rebuild_goes_on(
        kb, store, ingest, eager_tasks, operator, applied) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    old = store.serving
    # A stored row the parser refuses (written before a stricter release, say).
    broken = Document.objects.create(
        dataset=kb.dataset, source_path="broken.md", file_name="broken.md",
        source_text="   ", content_hash="0" * 64, status=Document.Status.READY)

    with applied():
        response = operator.post(f"{REBUILD}?confirm=REBUILD")

    job = operator.get(f"/api/jobs/{response.json()['job']['id']}").json()
    assert job["status"] == "succeeded", job
    broken.refresh_from_db()
    assert broken.status == Document.Status.FAILED and "empty" in broken.error
    assert not store.serves(old)
    answer = lookup(kb.tool, "redis dashboard restart")
    assert answer["evidence_status"] == "READY"
    assert top_doc_id(answer) == redis.doc_key


@pytest.mark.django_db(transaction=True)
def test_rebuild_reads_the_database_never_the_source_files(kb, store, tmp_path,
                                                            eager_tasks) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    for topic in ("redis", "kafka", "nginx"):
        (root / f"{topic}.md").write_bytes(runbook(topic))
    call_command("import_knowledge", str(root), "--tenant", kb.tenant.slug, "--dataset",
                 kb.dataset.name, stdout=io.StringIO())
    nginx = Document.objects.get(source_path="nginx.md")
    document_delete(document=nginx)
    # The folder moves away: a rebuild must not need it, nor write to it.
    moved = Path(shutil.move(root, tmp_path / "elsewhere"))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in moved.iterdir()}
    old = store.serving

    version = _rebuild()

    assert store.serving == version.collection_name != old
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in moved.iterdir()} == before
    assert not root.exists()
    assert store.chunk_ids(nginx.doc_id) == []  # deleted documents are not carried over
    assert store.count() == 4
    for topic in ("redis", "kafka"):
        document = Document.objects.get(source_path=f"{topic}.md")
        assert len(store.chunk_ids(document.doc_id)) == 2
        assert top_doc_id(lookup(kb.tool, f"{topic} dashboard restart")) == document.doc_key


def test_rebuild_pays_no_embedding_for_unchanged_text(kb, store, ingest) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    marker = np.zeros(get_embedder().dimension, dtype="<f4")
    marker[3] = 1.0
    EmbeddingCache.objects.update(vector=marker.tobytes())

    _rebuild()

    vectors = [row["vector"] for row in milvus_rows(store, redis.doc_id, "vector")]
    assert len(vectors) == 2
    assert all(np.allclose(vector, marker) for vector in vectors)


@pytest.mark.embedded
@pytest.mark.django_db(transaction=True)  # commits as a request does: the task runs then
def test_rebuild_api_on_the_embedded_defaults_answers_the_jobs_true_status(
        kb, store, ingest, make_key, eager_tasks) -> None:
    """Tasks run in-process: the job is done when the answer is written, and says so (it
    answered "queued" for a finished rebuild)."""
    ingest(kb.dataset, "redis.md", runbook("redis"))
    _, secret = make_key(tenant="platform-ops", role="platform")
    response = api_client(secret).post(f"{REBUILD}?confirm=REBUILD")
    assert response.status_code == 202
    assert response.json()["job"]["status"] == "succeeded"


@pytest.mark.embedded
def test_rebuild_command_on_the_embedded_defaults(kb, store, ingest) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    ingest(kb.dataset, "kafka.md", runbook("kafka"))
    old = store.serving
    out = io.StringIO()

    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=out)

    new = store.serving
    assert out.getvalue().splitlines() == [
        "[2/2] kafka.md",
        f"rebuilt: {new} now serves ({get_embedder().name}, {get_embedder().dimension}d)"]
    assert new != old and sorted(store.collections()) == sorted([old, new])
    assert store.count() == 4
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == redis.doc_key


def _rebuild() -> IndexVersion:
    from retrieval.index.rebuild import rebuild_hybrid_knowledge

    return rebuild_hybrid_knowledge()


def test_a_rebuild_reads_the_stored_sources_a_batch_at_a_time(kb, store, ingest) -> None:
    """It loaded every document's source text into memory at once."""
    import re

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from retrieval.index.sync import BATCH

    for n in range(2 * BATCH + 5):
        ingest(kb.dataset, f"doc-{n}.md", runbook(f"topic{n}"))

    with CaptureQueriesContext(connection) as queries:
        _rebuild()

    reads = [q["sql"] for q in queries.captured_queries
             if "source_text" in q["sql"] and q["sql"].lstrip().upper().startswith("SELECT")]
    assert reads, "the rebuild read no source text"
    for sql in reads:
        listed = re.search(r"\.`?\"?id`?\"? IN \(([^)]*)\)", sql)
        assert listed, f"a read of source texts without a bound: {sql[:200]}"
        assert len(listed.group(1).split(",")) <= BATCH
