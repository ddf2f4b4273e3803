"""Progress of background work, readable from the API and the admin."""

from __future__ import annotations

from typing import Any

from datasets.models import Job


def job_update(job: Job | None, *, status: str | None = None, done: int | None = None,
               total: int | None = None, error: str | None = None,
               detail: dict[str, Any] | None = None) -> None:
    if job is None:
        return
    fields: dict[str, Any] = {"status": status, "done": done, "total": total, "error": error}
    changes = {key: value for key, value in fields.items() if value is not None}
    if detail:
        changes["detail"] = {**job.detail, **detail}
    for key, value in changes.items():
        setattr(job, key, value)
    if changes:
        # .update() and not .save(): a worker must not overwrite fields it did not change.
        Job.objects.filter(pk=job.pk).update(**changes)
