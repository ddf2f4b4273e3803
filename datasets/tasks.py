"""Celery tasks: fetch by id, call a service, own the retries. All run on the indexing queue."""

from __future__ import annotations

import logging

from celery import shared_task

from datasets.index_versions import IndexMismatch
from datasets.ingestion.parse import DocumentParseError
from datasets.jobs import job_update
from datasets.models import Document, Job
from datasets.services import document_mark_failed, run_index_job
from retrieval.embedders import EmbeddingAuthError, EmbeddingError
from retrieval.store import VectorStoreUnavailable

logger = logging.getLogger(__name__)

TRANSIENT = (VectorStoreUnavailable, EmbeddingError)
PERMANENT = (DocumentParseError, IndexMismatch, EmbeddingAuthError)


def _fail(job_id: int | None, document_id: int | None, exc: Exception) -> None:
    message = f"{type(exc).__name__}: {exc}"
    if document_id is not None:
        document_mark_failed(document_id=document_id, error=message)
    job_update(Job.objects.filter(pk=job_id).first() if job_id else None,
               status=Job.Status.FAILED, error=message)


@shared_task(bind=True, max_retries=4, acks_late=True)
def index_document(self, document_id: int, job_id: int | None = None) -> None:  # type: ignore[no-untyped-def]
    try:
        run_index_job(document_id=document_id, job_id=job_id)
    except Document.DoesNotExist:
        logger.info("document %s is gone; nothing to index", document_id)
    except PERMANENT as exc:
        _fail(job_id, document_id, exc)
    except TRANSIENT as exc:
        if self.request.retries >= self.max_retries:
            _fail(job_id, document_id, exc)
            return
        logger.warning("indexing document %s failed (%s); retrying", document_id, exc)
        raise self.retry(exc=exc, countdown=2 ** self.request.retries) from exc
    except Exception as exc:
        _fail(job_id, document_id, exc)
        raise


@shared_task(bind=True, acks_late=True)
def import_knowledge_task(self, job_id: int, root: str, tenant: str, dataset: str) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from datasets.importer import knowledge_import

    job = Job.objects.get(pk=job_id)
    try:
        knowledge_import(root=Path(root), tenant_slug=tenant, dataset_name=dataset, job=job)
    except Exception as exc:
        _fail(job_id, None, exc)
        raise


@shared_task(bind=True, acks_late=True)
def rebuild_task(self, job_id: int) -> None:  # type: ignore[no-untyped-def]
    from datasets.rebuild import rebuild_hybrid_knowledge

    job = Job.objects.get(pk=job_id)
    try:
        rebuild_hybrid_knowledge(job=job)
    except Exception as exc:
        _fail(job_id, None, exc)
        raise
