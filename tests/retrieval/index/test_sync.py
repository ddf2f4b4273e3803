"""A sync writes the documents waiting behind it with its own: one Milvus write and flush for
a queue of uploads (Milvus Lite pays about a second per flush), each still checked and
recorded as its own sync would."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.services import document_store, tenant_get_or_create
from datasets.models import Dataset, Document
from retrieval.index.sync import BATCH, document_sync
from tests.datasets.builders import runbook

pytestmark = pytest.mark.django_db


def _waiting(dataset: Dataset, *topics: str) -> list[Document]:
    """Stored, their syncs not run yet (as when uploads queue up behind a busy worker)."""
    return [document_store(dataset=dataset, file_name=f"{t}.md", raw=runbook(t),
                           max_bytes=1 << 20, queue=False).document for t in topics]


def test_one_sync_writes_the_documents_waiting_behind_it(store: Any, monkeypatch: Any) -> None:
    dataset = Dataset.objects.create(tenant=tenant_get_or_create(slug="batch"), name="kb")
    first, *others = _waiting(dataset, "redis", "kafka", "nginx")
    flushes: list[str] = []
    from retrieval.index.milvus.writer import MilvusWriter

    real = MilvusWriter._flush
    monkeypatch.setattr(MilvusWriter, "_flush",
                        lambda self, collection: (flushes.append(collection),
                                                  real(self, collection))[1])

    document_sync(document_id=first.pk)

    assert len(flushes) == 1
    for document in [first, *others]:
        document.refresh_from_db()
        assert document.status == Document.Status.READY and not document.sync_pending
        assert len(store.chunk_ids(document.doc_id)) == document.chunk_count > 0
    # Their own syncs (still queued) find them written and do nothing more.
    document_sync(document_id=others[0].pk)
    assert len(flushes) == 1


def test_a_waiting_document_that_cannot_be_split_is_left_to_its_own_sync(store: Any) -> None:
    dataset = Dataset.objects.create(tenant=tenant_get_or_create(slug="batch"), name="kb")
    first, broken, fine = _waiting(dataset, "redis", "kafka", "nginx")
    # Past the chunk limit (as a document stored before the limit was lowered would be).
    Document.objects.filter(pk=broken.pk).update(
        source_text="".join(f"# h{n}\n\nx\n\n" for n in range(2_100)))

    document_sync(document_id=first.pk)

    statuses = dict(Document.objects.values_list("pk", "status"))
    assert statuses[first.pk] == statuses[fine.pk] == Document.Status.READY
    assert statuses[broken.pk] == Document.Status.PENDING  # untouched: its sync says why
    with pytest.raises(Exception, match="2,000"):
        document_sync(document_id=broken.pk)


def test_a_batch_is_bounded(store: Any) -> None:
    dataset = Dataset.objects.create(tenant=tenant_get_or_create(slug="batch"), name="kb")
    documents = _waiting(dataset, *[f"topic{n}" for n in range(BATCH + 2)])

    document_sync(document_id=documents[0].pk)

    ready = Document.objects.filter(status=Document.Status.READY).count()
    assert ready == BATCH


def test_a_sync_that_read_the_row_before_another_finished_never_shows_it_indexing_again(
        store: Any, monkeypatch: Any) -> None:
    """The worker's sync and a retry of the same content, the worker's mark coming after the
    retry made the document READY (as in a test that syncs in-process beside a worker)."""
    import retrieval.index.sync as sync

    dataset = Dataset.objects.create(tenant=tenant_get_or_create(slug="batch"), name="kb")
    (document,) = _waiting(dataset, "redis")
    mark, seen = sync.document_indexing, []

    def after_the_other_sync(**given: Any) -> None:
        monkeypatch.setattr(sync, "document_indexing", mark)
        document_sync(document_id=document.pk)  # the other sync runs to its end first
        mark(**given)
        seen.append(Document.objects.get(pk=document.pk).status)

    monkeypatch.setattr(sync, "document_indexing", after_the_other_sync)
    document_sync(document_id=document.pk)

    assert seen == [Document.Status.READY]
    document.refresh_from_db()
    assert document.status == Document.Status.READY
    assert len(store.chunk_ids(document.doc_id)) == document.chunk_count > 0
