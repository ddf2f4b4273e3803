"""One sync of a source: claim it (one sync of a source at a time, whichever worker runs it),
read what changed, store it through document_store (the row is the truth; the indexing queue
makes Milvus follow), and delete the documents whose files are gone, only when the source was
read whole. Each file is one line of the job's log: added, changed, unchanged, deleted,
failed (with the reason)."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from posixpath import basename

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from datasets.documents.services import (
    dataset_documents_changed,
    document_delete,
    document_readers_at_source_set,
    document_store,
)
from datasets.jobs.progress import job_fail, job_update
from datasets.models import Document, Job, Source
from datasets.sources.base import Deadline, Item, Reader, SyncFailed
from datasets.sources.confluence import ConfluenceReader
from datasets.sources.feishu import FeishuReader
from datasets.sources.folder import FolderReader
from datasets.sources.git import GitReader
from datasets.sources.s3 import S3Reader
from datasets.sources.web import WebReader
from datasets.sources.yuque import YuqueReader
from kbplatform.errors import ApiError

logger = logging.getLogger(__name__)

READERS: dict[str, type[GitReader | FolderReader | WebReader | S3Reader | ConfluenceReader
                        | YuqueReader | FeishuReader]] = {
    Source.Kind.GIT: GitReader, Source.Kind.FOLDER: FolderReader, Source.Kind.WEB: WebReader,
    Source.Kind.S3: S3Reader, Source.Kind.CONFLUENCE: ConfluenceReader,
    Source.Kind.YUQUE: YuqueReader, Source.Kind.FEISHU: FeishuReader}
SKIPPED = "skipped: another sync of this source is running"


def source_claim(source: Source) -> bool:
    """Take the source for one sync: one conditional UPDATE, so of two workers (or two
    threads) only one gets it. A claim older than KB_SOURCE_SYNC_TIMEOUT_SECONDS is a dead
    sync's, and may be taken."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.KB_SOURCE_SYNC_TIMEOUT_SECONDS)
    return Source.objects.filter(
        Q(syncing_since__isnull=True) | Q(syncing_since__lt=stale), pk=source.pk,
    ).update(syncing_since=now) == 1


def source_sync(*, source: Source, job: Job | None) -> Counter[str] | None:
    """Sync `source` now, in this process; the counts by outcome, None when another sync of
    it is running (the job then ends as skipped)."""
    if not source_claim(source):
        job_update(job, status=Job.Status.SUCCEEDED, detail={"skipped": True}, log=SKIPPED)
        return None
    deadline = Deadline()
    reader = READERS[source.kind](source, deadline)
    try:
        counts = _sync(source, reader, job, deadline)
    except SyncFailed as exc:
        _release(source, status=Source.Status.FAILED, error=str(exc))
        job_update(job, status=Job.Status.FAILED, error=str(exc),
                   log=f"failed, nothing deleted: {exc}")
        return None
    except Exception as exc:
        _release(source, status=Source.Status.FAILED, error="the sync failed on the "
                 "platform's side; the operators have the details")
        job_fail(job, exc)
        raise
    summary = ", ".join(f"{counts[k]} {k}" for k in
                        ("added", "changed", "unchanged", "deleted", "failed"))
    _release(source, status=Source.Status.SUCCEEDED, revision=reader.commit,
             state={"links": reader.links} if isinstance(reader, WebReader) else None)
    job_update(job, status=Job.Status.SUCCEEDED, detail={**counts, "commit": reader.commit},
               log=f"done: {summary}" + (f" at {reader.commit[:12]}" if reader.commit else ""))
    return counts


def _sync(source: Source, reader: Reader, job: Job | None, deadline: Deadline
          ) -> Counter[str]:
    prefix = f"{source.name}/"
    documents = {d.source_path.removeprefix(prefix): d for d in Document.objects.filter(
        source=source, deleted=False).select_related("dataset")}
    known = {path: d.source_version for path, d in documents.items()}
    job_update(job, status=Job.Status.RUNNING, log=f"reading {source.get_kind_display()} "
                                                   f"{source.location}")
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for number, item in enumerate(reader.items(known), 1):
        deadline.check()
        seen.add(item.path)
        outcome, reason = _apply(source, reader.commit, item, documents.get(item.path))
        counts[outcome] += 1
        line = f"{outcome}: {item.path}{f': {reason}' if reason else ''}"
        job_update(job, done=number, total=max(reader.expected, number),
                   log=None if outcome == "unchanged" else line)
    if reader.partial:
        job_update(job, log=f"the source was read in part ({reader.partial}): no document "
                            "is deleted")
        return counts
    for path, document in documents.items():
        if path not in seen:
            document_delete(document=document)
            counts["deleted"] += 1
            job_update(job, log=f"deleted: {path}: gone from the source")
    return counts


def _apply(source: Source, commit: str, item: Item,
           document: Document | None) -> tuple[str, str]:
    """Store one file: (outcome, reason). Who may read it follows the source, whether its body
    was read, is unchanged or failed to read."""
    moved = "who may read it changed at the source"
    if item.failure:
        if document is not None:
            _readers_follow(source, document, item)
        return "failed", item.failure
    if item.raw is None:
        if document is not None and item.url and not document.url:
            # Synced before documents kept their address: the same file, at the commit read.
            Document.objects.filter(pk=document.pk).update(url=item.url[:2000])
            dataset_documents_changed(dataset_id=source.dataset_id)  # lookups link to it
        if document is not None and _readers_follow(source, document, item):
            return "changed", moved
        return "unchanged", ""
    path = f"{source.name}/{item.path}"
    if document is None and Document.objects.filter(
            dataset=source.dataset_id, source_path=path, deleted=False).exists():
        return "failed", "the dataset has a document of that path that is not this source's"
    try:
        with transaction.atomic():  # the indexing is enqueued when the source fields are in
            # The source's row first, as source_update locks it and then its documents: a
            # change of its readers waits until this document is in, then applies to it.
            Source.objects.select_for_update().filter(pk=source.pk).values_list("pk").get()
            outcome = document_store(dataset=source.dataset, file_name=basename(item.path),
                                     raw=item.raw, max_bytes=settings.KB_MAX_UPLOAD_BYTES,
                                     source_path=path, replace=True)
            fields = {"source": source, "source_version": item.version[:300]}
            if outcome.changed:
                fields.update(source_commit=commit, url=item.url[:2000])
            Document.objects.filter(pk=outcome.document.pk).update(**fields)
            readers_moved = document_readers_at_source_set(
                source=source, document=outcome.document, readers=item.readers)
    except ApiError as exc:
        return "failed", str(exc.detail)
    if document is None:
        return "added", ""
    if outcome.changed:
        return "changed", ""
    return ("changed", moved) if readers_moved else ("unchanged", "")


def _readers_follow(source: Source, document: Document, item: Item) -> bool:
    """Its readers at the source as `item` says, when they moved since the last sync (only a
    sync writes them; a change of the source's own readers applies at once)."""
    return document.readers_at_source != list(item.readers) and \
        document_readers_at_source_set(source=source, document=document, readers=item.readers)


def _release(source: Source, *, status: str, error: str = "", revision: str = "",
             state: dict[str, object] | None = None) -> None:
    changes: dict[str, object] = {"syncing_since": None, "last_sync_at": timezone.now(),
                                  "last_status": status, "last_error": error[:2000]}
    if revision:
        changes["last_revision"] = revision
    if state is not None:
        changes["state"] = state
    Source.objects.filter(pk=source.pk).update(**changes)
