"""Indexing: make Milvus follow a document's row (seed 003 §1: transform → split → batched
embedding → store), on the single-writer indexing queue.

The slow part (split, embed) runs without the writer lock. The write runs under it, and
re-reads the row first: a document deleted or given new content meanwhile is not written
(its own sync, queued with that change, writes it). Activation is never written: lookups
filter on the row (retrieval/index/milvus/expressions.py). What the index holds is recorded in
the document's row and Chunk rows through datasets' services: datasets owns those rows.

A document's chunks come from one datasets function (datasets/ingestion/compose.py: its
original converted when due, its markdown parsed once, split). A document uploaded in another
format than markdown is converted by it here, in the sync, not by a task of its own on the
`celery` queue before it: the sync is the one idempotent task that makes the index follow a
row, which the recovery re-sends and a rebuild repeats, so each of them converts what is due
with no second task to hand over to, lose or race with. The conversion runs outside the writer
lock, bounded by KB_CONVERT_* (in a child process); what it costs is an indexing worker for
that time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from datasets.documents.evidence import EvidenceKey
from datasets.documents.services import (
    chunks_replace,
    document_indexed,
    document_indexing,
    document_mark_failed,
    document_synced,
)
from datasets.ingestion.compose import document_drafts
from datasets.ingestion.formats import CONVERTER_VERSION, ConversionFailed, Format
from datasets.ingestion.parse import DocumentParseError
from datasets.ingestion.pipeline import ChunkDraft, Chunking
from datasets.models import Document
from retrieval.index import milvus
from retrieval.index.embedders import Embedder
from retrieval.index.milvus.writer import ChunkRow
from retrieval.index.models import IndexVersion
from retrieval.index.versions import serving_index
from retrieval.index.writer_lock import milvus_writer

logger = logging.getLogger(__name__)


# Documents read, split, embedded and written per step of a rebuild, a reconciliation or a
# switch: memory follows this many documents (each at most KB_MAX_UPLOAD_BYTES), never the
# whole corpus.
BATCH = 20


def document_batches(pks: Sequence[int]) -> Iterator[list[Document]]:
    """The documents of `pks` (with their datasets), BATCH at a time, in pk order."""
    ordered = sorted(pks)
    for start in range(0, len(ordered), BATCH):
        yield list(Document.objects.select_related("dataset")
                   .filter(pk__in=ordered[start:start + BATCH]).order_by("pk"))


@dataclass(frozen=True)
class Prepared:
    """A document split and embedded as it was read: the work done outside the lock."""

    document: Document
    drafts: list[ChunkDraft]
    vectors: list[list[float]]


def lock_scope(document: Document) -> str:
    return f"doc:{document.pk}"


def prepare(documents: Sequence[Document], *, chunking: Chunking,
            embedder: Embedder) -> list[Prepared]:
    """Split every document and embed all their chunks in one call. A document whose
    conversion fails (a rebuild after the converters changed), or that no longer splits
    (more chunks than the limit at the index's chunk size), is marked FAILED with its reason
    and left out: one file must not stop a rebuild."""
    kept: list[Document] = []
    drafts: list[list[ChunkDraft]] = []
    for document in documents:
        try:
            drafts.append(document_drafts(document=document, chunking=chunking))
        except (ConversionFailed, DocumentParseError) as exc:
            document_mark_failed(document_id=document.pk, error=str(exc))
            continue
        kept.append(document)
    return _embedded(kept, drafts, embedder)


def _embedded(documents: Sequence[Document], drafts: Sequence[list[ChunkDraft]],
              embedder: Embedder) -> list[Prepared]:
    vectors = iter(embedder.embed_documents([c.search_text for chunks in drafts for c in chunks]))
    return [Prepared(document=d, drafts=chunks, vectors=[next(vectors) for _ in chunks])
            for d, chunks in zip(documents, drafts, strict=True)]


def _companions(document: Document) -> list[Document]:
    """Other documents waiting for their first index (their syncs are queued behind this
    one), to write with it: Milvus Lite pays about a second per flush, whatever it holds, so
    one write for BATCH documents makes a queue of small uploads as fast as the embedder.
    Only with the single writer (Milvus Lite): with per-document locks each has its own."""
    if not settings.KB_MILVUS_SINGLE_WRITER:
        return []
    # Not those still to convert: a conversion may take seconds, their own syncs do it.
    converted = Q(format=Format.MARKDOWN) | Q(converter_version=CONVERTER_VERSION)
    return list(Document.objects.select_related("dataset")
                .filter(converted, status=Document.Status.PENDING, deleted=False,
                        dataset__evaluation=False)
                .exclude(pk=document.pk).order_by("pk")[:BATCH - 1])


def _prepare_with_companions(document: Document, *, chunking: Chunking,
                             embedder: Embedder) -> list[Prepared]:
    """`document` prepared (its errors raise), with what of its companions splits cleanly:
    a companion that does not is left to its own sync, which records why."""
    documents, drafts = [document], [document_drafts(document=document, chunking=chunking)]
    for companion in _companions(document):
        try:
            drafts.append(document_drafts(document=companion, chunking=chunking))
        except Exception:  # noqa: BLE001 - its own sync fails it, with its reason
            logger.debug("document %s is left to its own sync", companion.pk, exc_info=True)
            continue
        documents.append(companion)
    return _embedded(documents, drafts, embedder)


def chunk_rows(document: Document, prepared: Prepared) -> list[ChunkRow]:
    """Milvus rows of `prepared`, carrying `document` as read under the lock."""
    dataset = document.dataset
    return [ChunkRow(
        id=str(EvidenceKey(str(document.doc_id), draft.index)), tenant_id=dataset.tenant_id,
        dataset_id=dataset.pk, doc_id=document.doc_id, activated=True,
        category=document.category, domain=document.domain,
        business_key=document.business_key, file_name=document.file_name,
        updated_at=int(document.content_updated_at.timestamp()),
        readers=tuple(document.readers), content=draft.content,
        search_text=draft.search_text, vector=vector,
        metadata={"docId": str(document.doc_id), "chunkIndex": draft.index,
                  "title": document.title, "breadcrumb": draft.breadcrumb,
                  "source": document.source_path, "category": document.category,
                  "kb_scope": dataset.kb_scope, "datasetId": str(dataset.pk),
                  "contentHash": document.content_hash, "commit": document.source_commit,
                  "location": draft.location.as_dict() if draft.location else None,
                  "lines": list(draft.lines) if draft.lines else None,
                  "anchor": draft.anchor})
        for draft, vector in zip(prepared.drafts, prepared.vectors, strict=True)]


def _fresh(pks: Sequence[int]) -> dict[int, Document]:
    return {d.pk: d for d in Document.objects.select_related("dataset").filter(pk__in=pks)}


def write_prepared(prepared: Sequence[Prepared], *, collection: str, scope: str = "all",
                   record: bool = True) -> list[Document]:
    """Write what is still current into `collection`; the documents written, as read under
    the lock. `record`: the rows say so (not for a collection that does not serve yet).

    A document deleted, or given new content, since it was prepared is skipped: its own
    sync (queued with that change) writes it.
    """
    with milvus_writer(scope):
        fresh = _fresh([p.document.pk for p in prepared])
        current = [(fresh[p.document.pk], p) for p in prepared
                   if p.document.pk in fresh and not fresh[p.document.pk].deleted
                   and fresh[p.document.pk].content_hash == p.document.content_hash]
        rows = [row for document, p in current for row in chunk_rows(document, p)]
        milvus.writer().replace_documents([d.doc_id for d, _ in current], rows,
                                          collection=collection, scope=scope)
        if not record:
            return [document for document, _ in current]
        with transaction.atomic():
            for document, p in current:
                document_indexed(document_id=document.pk, drafts=p.drafts,
                                 revision=document.revision, content_hash=document.content_hash,
                                 readers=document.readers)
    return [document for document, _ in current]


def document_sync(*, document_id: int) -> Document | None:
    """Make the serving index follow the document's row; the row as applied (None: gone)."""
    document = Document.objects.select_related("dataset").filter(pk=document_id).first()
    if document is None or document.dataset.evaluation:
        return document  # gone, or a suite's document: `evaluate` indexes those itself
    index = serving_index(collections=milvus.collections())
    scope = lock_scope(document)
    if document.deleted:
        return _remove(document, scope=scope)
    if document.status == Document.Status.READY and document.indexed_hash == \
            document.content_hash and document.indexed_readers == document.readers:
        # indexed already, its rows naming its readers: nothing to follow
        document_synced(document_id=document.pk, revision=document.revision)
        return document
    document_indexing(document_id=document.pk, content_hash=document.content_hash)
    try:
        prepared = _prepare_with_companions(document, chunking=index.chunking,
                                            embedder=index.embedder)
    except ConversionFailed:
        fresh = _fresh([document.pk]).get(document.pk)
        if fresh is None or fresh.content_hash != document.content_hash:
            return fresh  # other bytes uploaded meanwhile (its original replaced): its sync
        raise
    with milvus_writer(scope):
        current = serving_index()
        if current.version.pk != index.version.pk:  # a rebuild switched meanwhile
            return document_sync(document_id=document_id)
        written = write_prepared(prepared, collection=index.collection, scope=scope)
    mine = [d for d in written if d.pk == document.pk]
    return mine[0] if mine else _fresh([document.pk]).get(document.pk)


def _remove(document: Document, *, scope: str) -> Document | None:
    with milvus_writer(scope):
        fresh = _fresh([document.pk]).get(document.pk)
        if fresh is None or not fresh.deleted:
            return fresh  # uploaded again since: that upload's sync indexes it
        milvus.writer().delete_document(fresh.doc_id, collection=serving_index().collection,
                                        scope=scope)
        chunks_replace(document_id=fresh.pk, drafts=())
        document_synced(document_id=fresh.pk, revision=fresh.revision)
        return fresh


def record_written(written: dict[int, tuple[int, str, list[str]]], *,
                   version: IndexVersion) -> None:
    """After a switch to `version`: the rows say what it holds, {pk: (revision, content
    hash, readers)}, and their Chunk rows follow its splitter settings."""
    for batch in document_batches(list(written)):
        with transaction.atomic():
            for document in batch:
                revision, content_hash, readers = written[document.pk]
                if document.content_hash != content_hash:
                    continue  # new content since: its own sync writes it
                drafts = document_drafts(document=document, chunking=version.chunking)
                document_indexed(document_id=document.pk, drafts=drafts,
                                 revision=revision, content_hash=content_hash,
                                 readers=readers)
