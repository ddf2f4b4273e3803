"""The indexing task owns its retries: transient failures are retried with a growing pause
(in-process too), permanent ones are not retried, and the uploader reads a message that is
theirs to read."""

from __future__ import annotations

import logging
import socket

import pytest

from datasets.models import Document, Job
from retrieval.index.embedders import get_embedder
from retrieval.index.milvus import reset_connection
from retrieval.index.versions import wanted_spec
from retrieval.models import IndexVersion
from tests.datasets.builders import runbook, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def milvus_down(settings):  # type: ignore[no-untyped-def]
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        settings.MILVUS_URI = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings.MILVUS_TIMEOUT_SECONDS = 1
    reset_connection()
    IndexVersion.objects.create(collection_name="biz_v1", status=IndexVersion.Status.ACTIVE,
                                **wanted_spec(get_embedder()))
    yield
    reset_connection()


def test_in_process_retries_pause_instead_of_failing_all_at_once(kb, milvus_down, applied,
                                                                 monkeypatch) -> None:
    """Eager mode ran the four retries back to back: a few milliseconds, then FAILED."""
    pauses: list[float] = []
    monkeypatch.setattr("retrieval.tasks.time.sleep", pauses.append)

    with applied():
        response = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("redis"))

    assert response.status_code == 202
    assert pauses == [1, 2, 4, 8]
    job = kb.admin.get(f"/api/jobs/{response.json()['job']['id']}").json()
    assert job["status"] == "failed"
    # Theirs to read: what happened and what to do; the address of Milvus is not.
    assert "unavailable" in job["error"] and "again" in job["error"]
    assert "127.0.0.1" not in job["error"]
    assert "VectorStoreUnavailable" in Job.objects.get(pk=job["id"]).error_detail
    document = Document.objects.get()
    assert document.status == Document.Status.FAILED and document.sync_pending


def test_a_failed_conversion_is_logged_with_its_document_format_and_reason(
        kb, store, caplog) -> None:
    """A sync without a job (a rebuild's or the recovery's) logged `job None failed`: the
    operator could not tell which file failed, nor why."""
    from datasets.documents.services import document_store
    from retrieval.tasks import sync_document

    stored = document_store(dataset=kb.dataset, file_name="rota.txt", raw=b"Rota \xff\xfe\n",
                            max_bytes=10_000, queue=False).document

    with caplog.at_level(logging.INFO):
        sync_document.apply(args=(stored.pk, None))

    lines = [record.getMessage() for record in caplog.records]
    assert not any("job None" in line for line in lines), lines
    assert any(str(stored.doc_id) in line and "rota.txt" in line and "txt" in line
               and "neither UTF-8 nor GB18030" in line for line in lines), lines
    # The uploader reads the reason, and nothing of the platform's insides.
    document = Document.objects.get()
    assert document.status == Document.Status.FAILED
    assert document.error == "the text is neither UTF-8 nor GB18030; save it as UTF-8"
