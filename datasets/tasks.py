"""Celery tasks of the datasets app: fetch by id, call a service. Indexing tasks are
retrieval's (retrieval/tasks.py); this app only enqueues them by name."""

from __future__ import annotations

import logging
from pathlib import Path

from celery import shared_task

from datasets.ingestion.importer import knowledge_import
from datasets.jobs.progress import job_claim, job_fail
from datasets.models import Job
from datasets.sources.services import sources_sync_due
from datasets.sources.sync import source_sync

logger = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True)
def import_knowledge_task(self, job_id: int, root: str, tenant: str, dataset: str) -> None:  # type: ignore[no-untyped-def]
    job = Job.objects.get(pk=job_id)
    try:
        knowledge_import(root=Path(root), tenant_slug=tenant, dataset_name=dataset, job=job)
    except Exception as exc:
        job_fail(job, exc)
        raise


@shared_task(acks_late=True)
def sync_source_task(job_id: int) -> None:
    """One sync of a source (source_sync_request's job); a redelivered message does nothing."""
    job = job_claim(job_id)
    if job is None or job.source is None:
        return
    source_sync(source=job.source, job=job)


@shared_task
def sources_sync_due_task() -> None:
    """Enqueue the syncs that are due: sent by the periodic loop (kbplatform/tasks.py)."""
    jobs = sources_sync_due()
    if jobs:
        logger.info("scheduled syncs: jobs %s", [job.pk for job in jobs])
