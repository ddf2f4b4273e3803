"""Writes of sources: create, change, delete, and ask for a sync (a job on the indexing
queue: the API's, the admin's, the command's and the schedule's one way in)."""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from datasets.documents.services import DuplicateName, document_delete, source_readers_due
from datasets.jobs.progress import GOING, JOB_ID, job_create
from datasets.models import Dataset, Job, Source
from datasets.sources.git import cache_dir
from datasets.sources.locations import source_refusals
from kbplatform.errors import ApiError, ErrorCode

SYNC_TASK = "datasets.tasks.sync_source_task"
FIELDS = ("name", "kind", "location", "branch", "subfolder", "include", "max_depth",
          "max_pages", "max_page_bytes", "region", "interval_minutes")


class InvalidSource(ApiError):
    default_code = ErrorCode.INVALID_SOURCE


class SyncRunning(ApiError):
    status_code = 409
    default_code = ErrorCode.OPERATION_RUNNING


def _checked(source: Source) -> Source:
    refusals = source_refusals(source)
    if refusals:
        raise InvalidSource("; ".join(f"{k}: {v}" for k, v in refusals.items()),
                            extra={"fields": refusals})
    return source


def source_create(*, dataset: Dataset, **fields: Any) -> Source:
    source = _checked(Source(dataset=dataset, **fields))
    try:
        with transaction.atomic():
            source.save()
    except IntegrityError as exc:
        raise DuplicateName(f"the dataset has a source named {source.name!r}") from exc
    return source


def source_update(*, source: Source, **fields: Any) -> Source:
    """Change the source's settings; its kind and name (its documents' paths) stay. A new
    location drops the credential variable unless it is named again: the credential goes
    where the location points. New readers are its documents' at once."""
    with transaction.atomic():
        locked = Source.objects.select_for_update().get(pk=source.pk)
        if fields.get("location", locked.location) != locked.location:
            fields = {"secret_env": "", **fields}
        readers = locked.readers
        for name, value in fields.items():
            if name not in ("kind", "name"):
                setattr(locked, name, value)
        _checked(locked)
        locked.save()
        if locked.readers != readers:
            # Its documents are read by whom it names from now on, not after the next sync.
            source_readers_due(source=locked)
    return locked


def source_delete(*, source: Source) -> None:
    """The source and the documents it made (their chunks leave Milvus through the indexing
    queue); refused while it syncs."""
    with transaction.atomic():
        locked = Source.objects.select_for_update().get(pk=source.pk)
        running = _going_sync(locked)
        if locked.syncing_since is not None or running is not None:
            raise SyncRunning("the source is syncing; delete it when the sync has ended",
                              extra={"job_id": running.pk if running else None})
        for document in locked.documents.filter(deleted=False):
            document_delete(document=document)
        cache = cache_dir(locked)
        locked.delete()
        transaction.on_commit(lambda: shutil.rmtree(cache, ignore_errors=True))


def _going_sync(source: Source) -> Job | None:
    return Job.objects.filter(source=source, kind=Job.Kind.SYNC_SOURCE,
                              status__in=GOING).first()


def source_sync_request(*, source: Source) -> Job:
    """A sync job, enqueued on commit; 409 while another sync job of the source is queued or
    running (the row lock makes two requests take turns). Two jobs that still meet in two
    workers are kept apart by the sync's claim (datasets/sources/sync.py)."""
    with transaction.atomic():
        locked = Source.objects.select_for_update().select_related("dataset").get(pk=source.pk)
        running = _going_sync(locked)
        if running is not None:
            raise SyncRunning(f"a sync of this source is already queued or running "
                              f"(job {running.pk})", extra={"job_id": running.pk})
        return job_create(kind=Job.Kind.SYNC_SOURCE, task=SYNC_TASK, args=(JOB_ID,),
                          tenant_id=locked.dataset.tenant_id, dataset=locked.dataset,
                          source=locked)


def sources_due() -> list[Source]:
    """Sources whose interval has passed since their last sync (or never synced)."""
    now = timezone.now()
    return [source for source in Source.objects.filter(interval_minutes__isnull=False,
                                                       syncing_since__isnull=True)
            if source.last_sync_at is None
            or source.last_sync_at + timedelta(minutes=source.interval_minutes or 0) <= now]


def sources_sync_due() -> list[Job]:
    """A sync job for each source that is due and not syncing (the periodic loop's)."""
    jobs = []
    for source in sources_due():
        try:
            jobs.append(source_sync_request(source=source))
        except SyncRunning:
            continue
    return jobs
