"""Index operations (platform operators): a rebuild, a rollback or a reconcile, one at a time,
queued as a platform job (no tenant) for the indexing worker."""

from __future__ import annotations

from django.db import transaction

from datasets.jobs.progress import GOING, JOB_ID, job_create
from datasets.models import Job
from kbplatform.errors import ApiError, ErrorCode

INDEX_TASKS = {Job.Kind.REBUILD: "retrieval.tasks.rebuild_task",
               Job.Kind.ROLLBACK: "retrieval.tasks.rollback_task",
               Job.Kind.RECONCILE: "retrieval.tasks.reconcile_task"}


class IndexOperationRunning(ApiError):
    """Another index operation is queued or running (the API's 409), or holds the index (a
    rebuild, rollback or repair refused in a command or task): one at a time."""

    status_code = 409
    default_code = ErrorCode.OPERATION_RUNNING


def index_operation_start(*, kind: str, args: tuple[object, ...] = (),
                          detail: dict[str, object] | None = None) -> Job:
    """Queue a platform-wide index operation (no tenant: only platform keys see it)."""
    with transaction.atomic():
        running = Job.objects.select_for_update().filter(
            tenant__isnull=True, kind__in=list(INDEX_TASKS),
            status__in=GOING).first()
        if running is not None:
            raise IndexOperationRunning(
                f"job {running.pk} ({running.kind}) is still {running.status}",
                extra={"job_id": running.pk})
        return job_create(kind=kind, task=INDEX_TASKS[Job.Kind(kind)], args=(JOB_ID, *args),
                          detail=detail)
