"""A job always ends (issue 24): a task that fails, even on marking its own job, leaves its job
final or retries; the recovery ends a job whose task is gone, also when a neighbouring batch
indexed its document meanwhile; the admin's page, which polls until the job ends, stops."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from datasets.documents.services import document_store
from datasets.models import Document, Job
from retrieval.index.recovery import recover
from retrieval.tasks import sync_document
from tests.datasets.builders import runbook, upload
from tests.sqlite_lock import sqlite_locked


def _progress(admin_client: Any, job: Job) -> dict[str, Any]:
    """What the job's admin page polls."""
    response = admin_client.get(reverse("admin:datasets_job_progress", args=[job.pk]))
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.django_db
def test_the_recovery_ends_a_job_whose_document_a_neighbouring_batch_indexed(
        kb, store, applied, admin_client) -> None:
    # The test's transaction never commits: this upload's task never runs, as if it had
    # failed on the database lock before marking its job.
    lost = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("redis"))
    job = Job.objects.get(pk=lost.json()["job"]["id"])
    with applied():  # the next upload's sync writes redis.md with it, as a companion
        upload(kb.admin, kb.dataset.pk, "kafka.md", runbook("kafka"))
    redis = Document.objects.get(pk=job.document_id)
    assert redis.status == Document.Status.READY and not redis.sync_pending
    assert Job.objects.get(pk=job.pk).status == Job.Status.QUEUED
    assert _progress(admin_client, job)["finished"] is False

    recover(grace_seconds=0)

    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED
    assert job.detail["chunks"] == redis.chunk_count == 2
    assert _progress(admin_client, job)["finished"] is True
    assert kb.admin.get(f"/api/jobs/{job.pk}").json()["status"] == "succeeded"

    # Its message delivered late after all: an ended job stays as it ended.
    log = job.log
    sync_document.apply(args=(redis.pk, job.pk))
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED and job.log == log


@pytest.mark.django_db
def test_the_recovery_leaves_a_job_younger_than_the_grace_to_its_task(kb, store,
                                                                      applied) -> None:
    lost = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("redis"))
    with applied():
        upload(kb.admin, kb.dataset.pk, "kafka.md", runbook("kafka"))

    recover(grace_seconds=3600)

    assert Job.objects.get(pk=lost.json()["job"]["id"]).status == Job.Status.QUEUED


@pytest.mark.django_db
def test_an_import_whose_process_stopped_fails_at_the_next_recovery(kb, settings) -> None:
    job = Job.objects.create(tenant=kb.tenant, kind=Job.Kind.IMPORT, status=Job.Status.RUNNING)
    recover()
    assert Job.objects.get(pk=job.pk).status == Job.Status.RUNNING  # still writing
    silent = timezone.now() - timedelta(seconds=settings.KB_EVALUATION_STALE_SECONDS + 1)
    Job.objects.filter(pk=job.pk).update(updated_at=silent)

    recover()

    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "import again" in job.error


@pytest.mark.embedded  # SQLite's lock, held by another process
@pytest.mark.django_db(transaction=True)
def test_a_task_that_cannot_mark_its_job_retries_and_the_job_ends(kb, store, eager_tasks,
                                                                   admin_client) -> None:
    """Issue 24: the task failed on "database is locked" while marking its job running, and
    the job stayed queued for ever."""
    stored = document_store(dataset=kb.dataset, file_name="redis.md", raw=runbook("redis"),
                            max_bytes=settings.KB_MAX_UPLOAD_BYTES, queue=False)
    job = Job.objects.create(tenant=kb.tenant, dataset=kb.dataset, document=stored.document,
                             kind=Job.Kind.INDEX_DOCUMENT, total=1)
    with sqlite_locked(mode="IMMEDIATE", seconds=2.5, timeout=1):
        sync_document.apply(args=(stored.document.pk, job.pk))  # as in-process mode runs it

    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, (job.status, job.log)
    assert Document.objects.get(pk=stored.document.pk).status == Document.Status.READY
    assert _progress(admin_client, job)["finished"] is True
