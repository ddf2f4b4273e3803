"""Uploading markdown through the API: bad input is a clear 4xx and leaves nothing written."""

from __future__ import annotations

import pytest

from datasets.models import Chunk, Document, Job
from retrieval.models import EmbeddingCache
from tests.datasets.builders import (
    api_client,
    lookup,
    markdown,
    md_file,
    milvus_rows,
    runbook,
    top_doc_id,
    upload,
)

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"

BAD_UPLOADS = [
    # (file name, bytes, error code, words the user reads in the message)
    ("gbk.md", "# 标题\n\n这是 GBK 编码的文本。\n".encode("gbk"), "invalid_document",
     "not valid UTF-8"),
    ("empty.md", b"", "invalid_document", "empty"),
    ("blank.md", b" \n\n\t\n", "invalid_document", "empty"),
    ("image.md", PNG, "invalid_document", "binary"),
    ("utf16.md", "# Title\n\nText\n".encode("utf-16"), "invalid_document", "UTF-16"),
    ("yaml.md", b"---\ntitle: [unclosed\n---\n# Body\n\nText.\n", "invalid_document",
     "malformed YAML frontmatter"),
    ("open.md", b"---\ntitle: never closed\n\n# Body\n\nText.\n", "invalid_document",
     "never closed"),
    ("list.md", b"---\n- a\n- b\n---\n# Body\n\nText.\n", "invalid_document", "YAML mapping"),
    ("nobody.md", b"---\ntitle: Only frontmatter\n---\n\n", "invalid_document", "no markdown body"),
]


def _nothing_written(store) -> bool:  # type: ignore[no-untyped-def]
    """No row in the database and not even a collection in Milvus."""
    return not (Document.objects.exists() or Job.objects.exists() or Chunk.objects.exists()
                or EmbeddingCache.objects.exists() or store.collections())


@pytest.mark.parametrize(("name", "raw", "code", "words"), BAD_UPLOADS,
                         ids=[case[0] for case in BAD_UPLOADS])
def test_bad_upload_is_a_clear_4xx_and_writes_nothing(kb, store, name, raw, code,
                                                      words) -> None:
    response = upload(kb.admin, kb.dataset.pk, name, raw)

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code
    assert words in body["message"]
    assert set(body) == {"code", "message", "extra"}
    assert _nothing_written(store)
    assert kb.admin.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"] == []


@pytest.mark.parametrize(("name", "raw"), [
    ("tool.exe", b"MZ\x90\x00" + b"\x00" * 60),  # a suffix no converter reads
    ("photo.pdf", PNG),  # a name that lies about its content
])
def test_unsupported_type_is_415_and_writes_nothing(kb, store, name, raw) -> None:
    response = upload(kb.admin, kb.dataset.pk, name, raw)

    assert response.status_code == 415, response.content
    assert response.json()["code"] == "unsupported_type"
    assert _nothing_written(store)


@pytest.mark.parametrize("name", ["pdf-notes.txt", "pdf-files.csv", "pdf-page.html"])
def test_a_file_that_quotes_a_pdf_header_is_taken_for_what_its_name_says(kb, name) -> None:
    raw = b"The first bytes of report.pdf, %PDF-1.7, say that it is a PDF.\n"

    response = upload(kb.admin, kb.dataset.pk, name, raw)

    assert response.status_code == 202, response.content
    assert response.json()["document"]["format"] == name.rsplit(".", 1)[1]


def test_oversized_upload_is_413_and_writes_nothing(kb, store, settings) -> None:
    settings.KB_MAX_UPLOAD_BYTES = 2_000
    big = runbook("kafka", sections=40)
    assert len(big) > 2_000

    response = upload(kb.admin, kb.dataset.pk, "kafka.md", big)

    assert response.status_code == 413, response.content
    assert response.json()["code"] == "too_large"
    assert "2000" in response.json()["message"]
    assert _nothing_written(store)


@pytest.fixture
def existing(kb, ingest):  # type: ignore[no-untyped-def]
    """A document that already serves, to prove a refused upload changes nothing of it."""
    return ingest(kb.dataset, "redis.md", runbook("redis"))


def _snapshot(store, document):  # type: ignore[no-untyped-def]
    document.refresh_from_db()
    return (document.content_hash, document.status, document.chunk_count,
            list(Chunk.objects.filter(document=document).values_list("pk", "content")),
            milvus_rows(store, document.doc_id, "content"), store.count())


def test_duplicate_name_is_409_and_the_original_keeps_serving(kb, store, existing) -> None:
    before = _snapshot(store, existing)
    jobs = Job.objects.count()

    response = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("postgres"))

    assert response.status_code == 409, response.content
    assert response.json()["code"] == "duplicate"
    assert "redis.md" in response.json()["message"]
    assert _snapshot(store, existing) == before
    assert Job.objects.count() == jobs
    answer = lookup(kb.tool, "redis dashboard restart")
    assert answer["evidence_status"] == "READY"
    assert top_doc_id(answer) == existing.doc_key


def test_identical_reupload_is_200_unchanged_without_a_job(kb, store, existing) -> None:
    EmbeddingCache.objects.all().delete()
    jobs = Job.objects.count()

    response = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("redis"))

    assert response.status_code == 200, response.content
    assert response.json()["changed"] is False and response.json()["job"] is None
    assert response.json()["document"]["document_id"] == existing.doc_key
    assert Job.objects.count() == jobs
    assert not EmbeddingCache.objects.exists()  # nothing was embedded again


def test_duplicate_dataset_name_is_409(kb) -> None:
    response = kb.admin.post("/api/datasets", {"name": "ops"}, format="json")

    assert response.status_code == 409, response.content
    assert response.json()["code"] == "duplicate"
    assert kb.admin.get("/api/datasets").json()["datasets"][0]["name"] == "ops"
    assert len(kb.admin.get("/api/datasets").json()["datasets"]) == 1


def test_upload_without_a_file_field_is_400(kb) -> None:
    response = kb.admin.post(f"/api/datasets/{kb.dataset.pk}/documents", {"other": "x"},
                             format="multipart")

    assert response.status_code == 400
    assert response.json()["code"] == "missing_file"


def test_only_an_admin_key_of_the_tenant_may_upload(kb, make_key) -> None:
    raw = runbook("redis")
    assert upload(kb.tool, kb.dataset.pk, "a.md", raw).status_code == 403
    assert upload(api_client("kb_nope_nope"), kb.dataset.pk, "a.md", raw).status_code == 401
    _, stranger = make_key(tenant="other", role="admin")
    response = upload(api_client(stranger), kb.dataset.pk, "a.md", raw)
    assert response.status_code == 404  # another tenant's dataset does not exist for them
    assert not Document.objects.exists() and not Job.objects.exists()


@pytest.mark.embedded
@pytest.mark.django_db(transaction=True)  # commits as a request does: the task runs then
def test_upload_is_indexed_and_found_on_the_embedded_defaults(kb, store, eager_tasks) -> None:
    raw = markdown("Kafka consumer lag", {
        "Symptoms": "The consumer group lag grows and `kafka-consumer-groups.sh` shows "
                    "partitions stuck on one member.",
        "Fix": "Rebalance the group, then raise `max.poll.records` only after the slow "
               "handler is fixed.",
    }, category="messaging", keywords=["kafka", "consumer lag"])

    response = kb.admin.post(f"/api/datasets/{kb.dataset.pk}/documents",
                             {"file": md_file("kafka.md", raw)}, format="multipart")

    assert response.status_code == 202, response.content
    # The answer tells the truth: the task ran in-process before it was written.
    assert response.json()["job"]["status"] == "succeeded"
    assert response.json()["document"]["status"] == "ready"
    job = kb.admin.get(f"/api/jobs/{response.json()['job']['id']}").json()
    assert job["status"] == "succeeded", job
    assert job["updated_at"] > job["created_at"]  # it said when it last moved
    document = kb.admin.get(f"/api/documents/{response.json()['document']['document_id']}")
    assert document.json()["status"] == "ready" and document.json()["chunk_count"] == 2
    answer = lookup(kb.tool, "kafka consumer group lag")
    assert answer["evidence_status"] == "READY"
    assert top_doc_id(answer) == response.json()["document"]["document_id"]
    assert answer["evidence"][0]["source"] == "kafka.md"


def test_a_category_over_100_bytes_is_refused_at_the_door(kb, store) -> None:
    """A Chinese category of 40 characters is 120 bytes: it overflowed Milvus's field and the
    indexing retried it as if the failure were transient."""
    raw = markdown("缓存", {"步骤": "检查内存。"}, category="缓" * 40)

    response = upload(kb.admin, kb.dataset.pk, "cache.md", raw)

    assert response.status_code == 400, response.content
    assert "category" in response.json()["message"] and "100" in response.json()["message"]
    assert _nothing_written(store)


def test_a_secret_in_a_heading_reaches_neither_the_title_nor_the_stored_source(
        kb, store, applied) -> None:
    raw = b"# Deploy with token: ghp_abcdefghijklmnopqrstuvwxyz0123456789AB\n\nRun it.\n"

    with applied():
        response = upload(kb.admin, kb.dataset.pk, "deploy.md", raw)

    assert response.status_code == 202, response.content
    document = Document.objects.get()
    assert "ghp_" not in document.title and "ghp_" not in document.source_text
    assert "[REDACTED]" in document.title
    assert all("ghp_" not in c for c in Chunk.objects.values_list("content", flat=True))


def test_a_document_stuck_indexing_is_indexed_again_by_the_same_upload(kb, store,
                                                                      applied) -> None:
    """Its worker died: the document stayed `indexing` and the same bytes answered
    `200 changed=false`, so nothing could ever index it again."""
    raw = runbook("redis")
    upload(kb.admin, kb.dataset.pk, "redis.md", raw)  # its task never ran (no commit here)
    Document.objects.update(status=Document.Status.INDEXING)

    with applied():
        again = upload(kb.admin, kb.dataset.pk, "redis.md", raw)

    assert again.status_code == 202, again.content
    assert again.json()["changed"] is False and again.json()["job"] is not None
    document = Document.objects.get()
    assert (document.status, document.chunk_count) == (Document.Status.READY, 2)
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == document.doc_key


def test_the_reindex_endpoint_indexes_a_failed_document_again(kb, store, ingest,
                                                             applied) -> None:
    document = ingest(kb.dataset, "redis.md", runbook("redis"))
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED,
                                                   error="the vector store was down")

    assert kb.tool.post(f"/api/documents/{document.doc_key}/reindex").status_code == 403
    with applied():
        response = kb.admin.post(f"/api/documents/{document.doc_key}/reindex")

    assert response.status_code == 202, response.content
    job = kb.admin.get(f"/api/jobs/{response.json()['job']['id']}").json()
    assert (job["status"], job["detail"]) == ("succeeded", {"chunks": 2})
    document.refresh_from_db()
    assert (document.status, document.error, document.sync_pending) == ("ready", "", False)
