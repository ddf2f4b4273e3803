"""Celery tasks of the datasets app: fetch by id, call a service. Indexing tasks are
retrieval's (retrieval/tasks.py); this app only enqueues them by name."""

from __future__ import annotations

import logging
from pathlib import Path

from celery import shared_task

from datasets.importer import knowledge_import
from datasets.jobs import job_fail
from datasets.models import Job

logger = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True)
def import_knowledge_task(self, job_id: int, root: str, tenant: str, dataset: str) -> None:  # type: ignore[no-untyped-def]
    job = Job.objects.get(pk=job_id)
    try:
        knowledge_import(root=Path(root), tenant_slug=tenant, dataset_name=dataset, job=job)
    except Exception as exc:
        job_fail(job, exc)
        raise
