"""Full rebuild (seed 000 §10.2) without downtime, rollback, and dropping a retired index.

The seed drops and recreates `biz`. Here every stored document is re-indexed into a new
collection, a batch at a time (source texts are read per batch, never all at once); then,
holding the writer lock, whatever changed meanwhile is brought over and the new version starts
serving. The previous version is retired, not dropped: `index_rollback` serves it again after
bringing it up to date, until an operator drops it. Source files on disk are never touched.
Only one rebuild or rollback runs at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from datasets.jobs.progress import job_update
from datasets.models import Document, Job
from kbplatform.tasks import send
from retrieval.index import milvus
from retrieval.index.embedders import embedder_named, get_embedder
from retrieval.index.models import IndexVersion
from retrieval.index.operations import IndexOperationRunning
from retrieval.index.reconcile import reconcile
from retrieval.index.sync import (
    Prepared,
    document_batches,
    prepare,
    record_written,
    write_prepared,
)
from retrieval.index.versions import (
    IndexNotReady,
    active_version,
    index_version_activate,
    index_version_create,
)
from retrieval.index.writer_lock import WriterBusy, milvus_writer, process_lock

logger = logging.getLogger(__name__)

CONFIRM_WORD = "REBUILD"
ROLLBACK_WORD = "ROLLBACK"
DROP_WORD = "DROP"
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Written:
    """A document as the rebuild wrote it."""

    revision: int
    content_hash: str
    readers: list[str]


def live_documents() -> Iterator[int]:
    """Pks of the documents a serving index holds (evaluation datasets have their own)."""
    return iter(Document.objects.filter(deleted=False, dataset__evaluation=False)
                .order_by("pk").values_list("pk", flat=True))


def index_lock() -> AbstractContextManager[None]:
    """Held for a whole rebuild or rollback; a dead holder releases it (recovery tests it)."""
    return process_lock("index-operation", timeout=0)


def _copy(prepared: Sequence[Prepared], *, version: IndexVersion) -> dict[int, Written]:
    """Write `prepared` into the new collection as the rows are now (not yet serving)."""
    written = write_prepared(prepared, collection=version.collection_name, record=False)
    return {d.pk: Written(d.revision, d.content_hash, list(d.readers)) for d in written}


def _catch_up(version: IndexVersion, written: dict[int, Written]) -> dict[int, Written]:
    """Under the writer lock: bring over every change made while copying."""
    writer = milvus.writer()
    rows = Document.objects.filter(dataset__evaluation=False).values_list(
        "pk", "doc_id", "revision", "deleted", "content_hash", "readers")
    reindex: list[int] = []
    for pk, doc_id, revision, deleted, content_hash, readers in rows.iterator():
        before = written.get(pk)
        if before is not None and before.revision == revision:
            continue
        if deleted:
            if before is not None:
                writer.delete_document(doc_id, collection=version.collection_name)
                del written[pk]
        elif before is None or (before.content_hash, before.readers) != (content_hash, readers):
            reindex.append(pk)  # its rows name its readers too
        else:
            written[pk] = Written(revision, content_hash, readers)
    for documents in document_batches(reindex):
        written.update(_copy(prepare(documents, chunking=version.chunking,
                                     embedder=embedder_named(version.embedder)),
                             version=version))
    return written


def rebuild_hybrid_knowledge(*, job: Job | None = None,
                             progress: Progress | None = None) -> IndexVersion:
    try:
        with index_lock():
            return _rebuild(job, progress)
    except WriterBusy as exc:
        raise IndexOperationRunning("a rebuild or rollback is already running") from exc


def _rebuild(job: Job | None, progress: Progress | None) -> IndexVersion:
    collections = milvus.collections()
    embedder = get_embedder()
    version = index_version_create(collections=collections, embedder=embedder)
    pks = list(live_documents())
    job_update(job, status=Job.Status.RUNNING, total=len(pks), done=0,
               detail={"collection": version.collection_name},
               log=f"building {version.collection_name} ({embedder.name}) from {len(pks)} "
                   f"documents")
    written: dict[int, Written] = {}
    try:
        done = 0
        for documents in document_batches(pks):
            written.update(_copy(prepare(documents, chunking=version.chunking, embedder=embedder),
                                 version=version))
            before, done = done, done + len(documents)
            tenth_passed = 10 * done // len(pks) > 10 * before // len(pks)  # the log's milestones
            job_update(job, done=done, log=f"indexed {done} of {len(pks)} documents"
                       if tenth_passed else None)
            IndexVersion.objects.filter(pk=version.pk).update(
                progress={"done": done, "total": len(pks)})
            if progress:
                progress(done, len(pks), documents[-1].source_path)
        job_update(job, log="catching up with changes made during the build")
        with milvus_writer():
            written = _catch_up(version, written)
            index_version_activate(version=version, collections=collections)
            record_written({pk: (w.revision, w.content_hash, w.readers)
                            for pk, w in written.items()}, version=version)
    except Exception as exc:
        abandon(version, exc)
        raise
    followed = _follow_up(written)
    job_update(job, status=Job.Status.SUCCEEDED, detail={"documents": len(written)},
               log=f"serving {version.collection_name}: {len(written)} documents"
                   + (f"; {followed} changed after the switch, synced on their own"
                      if followed else ""))
    return version


def abandon(version: IndexVersion, exc: BaseException) -> None:
    logger.error("building %s failed (%r); the serving index is unchanged",
                 version.collection_name, exc)
    IndexVersion.objects.filter(pk=version.pk).update(
        status=IndexVersion.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
    try:
        with milvus_writer():
            milvus.collections().drop(version.collection_name)
        IndexVersion.objects.filter(pk=version.pk).update(status=IndexVersion.Status.DROPPED)
    except Exception:
        logger.exception("could not drop the failed collection %s", version.collection_name)


def _follow_up(written: dict[int, Written]) -> int:
    """Changes made after the switch's read get a sync of their own, on the new index."""
    rows = Document.objects.filter(dataset__evaluation=False).values_list(
        "pk", "revision", "deleted")
    followed = 0
    for pk, revision, deleted in rows.iterator():
        changed = written[pk].revision != revision if pk in written else not deleted
        if changed:
            send("retrieval.tasks.sync_document", pk, None)
            followed += 1
    return followed


def index_rollback(*, to: IndexVersion | None = None, job: Job | None = None) -> IndexVersion:
    """Serve `to` (default: the latest retired version) again, brought up to date first."""
    try:
        with index_lock():
            target = to or IndexVersion.objects.filter(
                status=IndexVersion.Status.RETIRED).order_by("-activated_at", "-pk").first()
            if target is None or target.status != IndexVersion.Status.RETIRED:
                raise IndexNotReady("there is no retired index version to roll back to")
            job_update(job, status=Job.Status.RUNNING,
                       detail={"collection": target.collection_name},
                       log=f"bringing {target.collection_name} up to date")
            collections = milvus.collections()
            with milvus_writer():
                collections.load(target.collection_name)
                report = reconcile(version=target, repair=True)
                index_version_activate(version=target, collections=collections)
                record_written(report.revisions, version=target)
    except WriterBusy as exc:
        raise IndexOperationRunning("a rebuild or rollback is already running") from exc
    job_update(job, status=Job.Status.SUCCEEDED, detail={"repaired": report.summary()},
               log=f"serving {target.collection_name} again; repaired {report.line()}")
    return target


def index_version_drop(*, version: IndexVersion) -> None:
    """Drop a retired or failed version's collection; the serving one cannot be dropped."""
    serving = active_version()
    if serving is not None and serving.pk == version.pk:
        raise IndexNotReady("the serving index cannot be dropped: roll back or rebuild first")
    with milvus_writer():
        collections = milvus.collections()
        if version.collection_name in collections.names():
            collections.drop(version.collection_name)
        IndexVersion.objects.filter(pk=version.pk).update(status=IndexVersion.Status.DROPPED)
