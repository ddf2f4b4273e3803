"""Progress of background work, readable from the API and the admin."""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from datasets.models import Dataset, Document, Job, Source
from kbplatform.tasks import enqueue_on_commit

logger = logging.getLogger(__name__)

# What a job's owner reads when the cause is not theirs to fix; the exception itself goes to
# `error_detail` (admin) and the log, never to a tenant.
GENERIC_ERROR = "the job failed on the platform's side; the operators have the details"


# A job's log keeps its last lines: a rebuild of many documents logs milestones, not each one.
LOG_LINES = 200
GOING = (Job.Status.QUEUED, Job.Status.RUNNING)  # a job in one of these has not ended yet


class _JobId:
    """Where the new job's id goes among its task's arguments (most tasks take it first, the
    document sync last: it also runs without a job)."""


JOB_ID = _JobId()


def job_create(*, kind: str, task: str, args: tuple[object, ...],
               tenant_id: int | None = None, dataset: Dataset | None = None,
               document: Document | None = None, source: Source | None = None,
               total: int = 0, detail: dict[str, Any] | None = None) -> Job:
    """A queued job, and its task enqueued by name with `args` (JOB_ID: the job's id) once the
    surrounding transaction commits: a worker never looks for a job that is not stored yet."""
    job = Job.objects.create(kind=kind, tenant_id=tenant_id, dataset=dataset, document=document,
                             source=source, total=total, detail=detail or {})
    enqueue_on_commit(task, *(job.pk if arg is JOB_ID else arg for arg in args))
    return job


def job_update(job: Job | None, *, status: str | None = None, done: int | None = None,
               total: int | None = None, error: str | None = None,
               detail: dict[str, Any] | None = None, error_detail: str | None = None,
               log: str | None = None) -> None:
    """Record a job's progress; `log` adds a line its owner reads (no exception text)."""
    if job is None:
        return
    fields: dict[str, Any] = {"status": status, "done": done, "total": total, "error": error,
                              "error_detail": error_detail}
    changes = {key: value for key, value in fields.items() if value is not None}
    if detail:
        changes["detail"] = {**job.detail, **detail}
    if not changes and not log:
        return
    with transaction.atomic():
        if log:  # appended to the stored log: another process may have written a line since
            stored = Job.objects.select_for_update().filter(pk=job.pk).values_list(
                "log", flat=True).first() or []
            line = {"at": timezone.now().isoformat(timespec="seconds"), "message": log[:500]}
            changes["log"] = [*stored, line][-LOG_LINES:]
        for key, value in changes.items():
            setattr(job, key, value)
        # .update() and not .save(): a worker must not overwrite fields it did not change.
        Job.objects.filter(pk=job.pk).update(**changes, updated_at=timezone.now())


def job_fail(job: Job | None, exc: BaseException, *, public: str = GENERIC_ERROR,
             subject: str = "") -> None:
    """Failed, with `public` for the owner and the exception for operators; `subject` names
    the work in the log line (a sync without a job has only that). A database that cannot
    take even that leaves the job to the recovery, which ends it
    (retrieval/index/recovery.py)."""
    named = ", ".join(part for part in (f"job {job.pk}" if job else "", subject) if part)
    logger.error("%s failed: %s: %s", named or "work without a job", type(exc).__name__, exc)
    try:
        job_update(job, status=Job.Status.FAILED, error=public[:2000],
                   error_detail=f"{type(exc).__name__}: {exc}"[:4000], log=f"failed: {public}")
    except DatabaseError:
        logger.exception("job %s: its failure could not be recorded", job.pk if job else None)


def job_indexed(job: Job | None, document: Document | None, *, note: str = "") -> None:
    """An indexing job's success: Milvus follows `document` (None: gone)."""
    if document is None or document.deleted:
        job_update(job, status=Job.Status.SUCCEEDED, done=1, detail={"skipped": "deleted"},
                   log="nothing to index: the document is deleted")
        return
    job_update(job, status=Job.Status.SUCCEEDED, done=1, detail={"chunks": document.chunk_count},
               log=f"ready, chunks: {document.chunk_count}{note}")


def job_claim(job_id: int) -> Job | None:
    """The job, if this delivery is the one that runs it (a redelivered message is not)."""
    if Job.objects.filter(pk=job_id, status=Job.Status.QUEUED).update(
            status=Job.Status.RUNNING, updated_at=timezone.now()) != 1:
        logger.info("job %s is not queued any more; this delivery does nothing", job_id)
        return None
    job = Job.objects.get(pk=job_id)
    job_update(job, log="started by a worker")
    return job
