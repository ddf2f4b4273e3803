"""Celery tasks of the index: fetch by id, call a service, own the retries.

All run on the `indexing` queue (the evaluation app's task runs on `celery`). Every Milvus write
inside them takes the cross-process writer lock, so even two workers (or a worker and a command)
never write at once.
"""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.db import DatabaseError

from datasets.documents.services import document_mark_failed
from datasets.ingestion.conversion import conversion_due
from datasets.ingestion.formats import ConversionFailed
from datasets.ingestion.parse import DocumentParseError
from datasets.jobs.progress import (
    GENERIC_ERROR,
    GOING,
    job_claim,
    job_fail,
    job_indexed,
    job_update,
)
from datasets.models import Document, Job
from retrieval.index.embedders import EmbeddingAuthError, EmbeddingError
from retrieval.index.milvus import VectorStoreRejected, VectorStoreUnavailable
from retrieval.index.models import IndexVersion
from retrieval.index.operations import IndexOperationRunning
from retrieval.index.rebuild import index_rollback, rebuild_hybrid_knowledge
from retrieval.index.recovery import reconcile_serving, recover
from retrieval.index.sync import document_sync
from retrieval.index.versions import IndexNotReady
from retrieval.index.writer_lock import WriterBusy

logger = logging.getLogger(__name__)

# Checked first: the same request fails the same way again (EmbeddingAuthError is also an
# EmbeddingError, which is transient otherwise).
PERMANENT = (DocumentParseError, ConversionFailed, VectorStoreRejected, EmbeddingAuthError)
# OSError: the file storage holding the originals (a missing file is ConversionFailed).
TRANSIENT = (VectorStoreUnavailable, EmbeddingError, WriterBusy, DatabaseError, OSError)
MAX_RETRIES = 4  # 1 + 2 + 4 + 8 s of backoff


def public_error(exc: BaseException) -> str:
    """What the uploader reads: their own document's problem in full, ours in general."""
    if isinstance(exc, DocumentParseError | ConversionFailed):
        return str(exc)
    if isinstance(exc, VectorStoreRejected):
        return "the vector store refused this document; the operators have the details"
    if isinstance(exc, EmbeddingAuthError):
        return "the embedding service refused the platform's credentials; ask the operators"
    if isinstance(exc, TRANSIENT):
        return ("a platform service was unavailable while indexing; upload the same file "
                "again or re-index the document to retry")
    return GENERIC_ERROR


def _give_up(document_id: int, job: Job | None, exc: BaseException) -> None:
    message = public_error(exc)
    try:
        document_mark_failed(document_id=document_id, error=message)
    except DatabaseError:  # the document stays due: the recovery syncs it again
        logger.exception("document %s: its failure could not be recorded", document_id)
    job_fail(job, exc, public=message, subject=f"indexing document {document_id}")


def _going(job_id: int | None) -> Job | None:
    """The job this sync reports to, unless it has ended: a late or repeated delivery (the
    recovery ends a job whose task was lost) never reopens it."""
    return Job.objects.filter(pk=job_id, status__in=GOING).first() if job_id else None


@shared_task(bind=True, max_retries=MAX_RETRIES, acks_late=True)
def sync_document(self, document_id: int, job_id: int | None = None) -> None:  # type: ignore[no-untyped-def]
    """Make the serving index follow one document's row (content, activation, deletion).

    Whatever fails, the job ends or the task retries: marking the job itself is inside, so a
    database lock on it is retried like the sync (a sync is idempotent).
    """
    job = None
    try:
        job = _going(job_id)
        attempt = self.request.retries + 1
        job_update(job, status=Job.Status.RUNNING,
                   log="indexing" if attempt == 1 else f"indexing, attempt {attempt}")
        _converting(job, document_id)
        _synced_job(job, document_sync(document_id=document_id))
    except PERMANENT as exc:
        _give_up(document_id, job, exc)
    except TRANSIENT as exc:
        if self.request.retries >= self.max_retries:
            _give_up(document_id, job, exc)
            return
        countdown = 2 ** self.request.retries
        logger.warning("syncing document %s failed (%r); retry in %s s", document_id, exc,
                       countdown)
        try:
            job_update(job, log=f"a platform service was unavailable; retry in {countdown} s")
        except DatabaseError:
            pass  # a line of the log: the retry matters, not the line
        if self.request.is_eager:
            # Eager retries run at once: without a pause they would all fail together.
            time.sleep(countdown)
        raise self.retry(exc=exc, countdown=countdown) from exc
    except Exception as exc:  # our own bug: recorded, and raised for the worker's log
        _give_up(document_id, job, exc)
        raise


def _converting(job: Job | None, document_id: int) -> None:
    """Say so in the job's log when the sync converts the original first (it may take long)."""
    document = Document.objects.filter(pk=document_id).only(
        "format", "converter_version").first()
    if job is not None and document is not None and conversion_due(document):
        job_update(job, log=f"converting the {document.format} file")


def _synced_job(job: Job | None, document: Document | None) -> None:
    if document is not None:
        # Written by the sync with update().
        document.refresh_from_db(fields=["chunk_count", "conversion_notes"])
        for note in document.conversion_notes:
            job_update(job, log=f"conversion: {note}")
    job_indexed(job, document)


@shared_task(acks_late=True)
def rebuild_task(job_id: int) -> None:
    job = job_claim(job_id)
    if job is None:
        return
    try:
        rebuild_hybrid_knowledge(job=job)
    except Exception as exc:
        job_fail(job, exc)


@shared_task(acks_late=True)
def rollback_task(job_id: int, version_id: int | None) -> None:
    job = job_claim(job_id)
    if job is None:
        return
    try:
        target = IndexVersion.objects.filter(pk=version_id).first() if version_id else None
        index_rollback(to=target, job=job)
    except IndexNotReady as exc:
        job_fail(job, exc, public=str(exc))
    except Exception as exc:
        job_fail(job, exc)


@shared_task(acks_late=True)
def reconcile_task(job_id: int, repair: bool) -> None:
    job = job_claim(job_id)
    if job is None:
        return
    try:
        report = reconcile_serving(repair=repair)
        job_update(job, status=Job.Status.SUCCEEDED, detail=report.summary(),
                   log=("repaired " if repair else "checked ") + report.line())
    except (IndexNotReady, IndexOperationRunning) as exc:
        job_fail(job, exc, public=str(exc))
    except Exception as exc:
        job_fail(job, exc)


@shared_task
def recover_task() -> None:
    recover()
