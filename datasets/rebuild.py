"""Full rebuild (seed 000 §10.2), done without downtime.

The seed drops and recreates `biz`. Here every stored document is re-indexed into a new
collection, the alias switches at the end, and only then is the old collection dropped: lookups
keep working during a rebuild, and a failed rebuild leaves the old index serving. Source files
on disk are never touched (documents are re-read from the database).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from datasets.index_versions import index_version_activate, index_version_create
from datasets.jobs import job_update
from datasets.models import Document, IndexVersion, Job
from datasets.services import document_index
from retrieval.embedders import get_embedder
from retrieval.store import get_store

logger = logging.getLogger(__name__)

CONFIRM_WORD = "REBUILD"


def _live_documents() -> QuerySet[Document]:
    return (Document.objects.filter(deleted=False, dataset__evaluation=False)
            .select_related("dataset").order_by("pk"))


def _changed_since(started: datetime) -> QuerySet[Document]:
    return Document.objects.filter(updated_at__gte=started, dataset__evaluation=False) \
        .select_related("dataset")


def rebuild_hybrid_knowledge(*, job: Job | None = None,
                             progress: Callable[[int, int, str], None] | None = None,
                             ) -> IndexVersion:
    store = get_store()
    started = timezone.now()
    previous = IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).first()
    try:
        version = index_version_create(store=store, embedder=get_embedder())
    except Exception:
        IndexVersion.objects.filter(status=IndexVersion.Status.BUILDING,
                                    created_at__gte=started).update(
            status=IndexVersion.Status.FAILED, error="the collection could not be created")
        raise
    documents = list(_live_documents())
    job_update(job, status=Job.Status.RUNNING, total=len(documents), done=0,
               detail={"collection": version.collection_name})
    try:
        for number, document in enumerate(documents, 1):
            document_index(document=document, collection=version.collection_name, force=True)
            job_update(job, done=number)
            IndexVersion.objects.filter(pk=version.pk).update(
                progress={"done": number, "total": len(documents)})
            if progress:
                progress(number, len(documents), document.source_path)
        # Documents changed while we were copying: bring them over before the switch.
        for document in _changed_since(started):
            if document.deleted:
                store.delete_document(document.doc_id, collection=version.collection_name)
            else:
                document_index(document=document, collection=version.collection_name, force=True)
        index_version_activate(version=version, store=store)
    except Exception as exc:
        logger.exception("rebuild into %s failed; the old index keeps serving",
                         version.collection_name)
        IndexVersion.objects.filter(pk=version.pk).update(
            status=IndexVersion.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
        try:
            store.drop_collection(version.collection_name)
        except Exception:
            logger.exception("could not drop the failed collection %s", version.collection_name)
        raise
    if previous is not None:
        store.drop_collection(previous.collection_name)
    job_update(job, status=Job.Status.SUCCEEDED, detail={"documents": len(documents)})
    return version
