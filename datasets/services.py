"""Writes: tenants, datasets, documents and their index (seed 003 §1, seed 000 §10.1)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from datasets.index_versions import active_index_version
from datasets.ingestion.parse import DocumentParseError, ParsedDocument, parse_markdown
from datasets.ingestion.pipeline import ChunkDraft, build_chunks
from datasets.jobs import job_update
from datasets.models import Chunk, Dataset, Document, Job, Tenant, evidence_key
from kbplatform.errors import ApiError
from retrieval.embedders import Embedder, get_embedder
from retrieval.store import ChunkRow, MilvusHybridKnowledgeStore, get_store

logger = logging.getLogger(__name__)

MARKDOWN_SUFFIXES = (".md", ".markdown")


class DuplicateName(ApiError):
    status_code = 409
    default_code = "duplicate"


class InvalidDocument(ApiError):
    """The upload is not ingestible markdown (encoding, binary, frontmatter...): a 400."""

    default_code = "invalid_document"


@dataclass(frozen=True)
class UploadOutcome:
    document: Document
    job: Job | None  # None when the content did not change: nothing to index
    changed: bool


def tenant_get_or_create(*, slug: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
    return tenant


def dataset_create(*, tenant: Tenant, name: str, description: str = "",
                   kb_scope: str = "") -> Dataset:
    try:
        with transaction.atomic():
            return Dataset.objects.create(tenant=tenant, name=name, description=description,
                                          kb_scope=kb_scope)
    except IntegrityError as exc:
        raise DuplicateName(f"dataset {name!r} already exists in tenant {tenant.slug!r}") from exc


def content_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def check_file_name(file_name: str) -> str:
    name = file_name.strip()
    if not name or len(name) > 255 or "\x00" in name or name.startswith("."):
        raise ApiError("the file name is missing or not valid", code="invalid_file_name")
    if not name.lower().endswith(MARKDOWN_SUFFIXES):
        raise ApiError(f"{name!r} is not a markdown file (.md or .markdown)",
                       code="unsupported_type")
    return name


def document_store(*, dataset: Dataset, file_name: str, raw: bytes, max_bytes: int,
                   source_path: str | None = None, replace: bool = False) -> UploadOutcome:
    """Validate everything first, then write the row (not the index).

    Bad input raises before anything is written. A new version of an existing document
    needs `replace=True` (the importer); an API upload of a taken name is a 409.
    """
    name = check_file_name(file_name.rsplit("/", 1)[-1])
    path = source_path or name
    try:
        parsed = parse_markdown(raw, file_name=name, max_bytes=max_bytes)
    except DocumentParseError as exc:
        # A ValueError would reach the client as a 500; the message is written for the user.
        raise InvalidDocument(str(exc)) from exc
    digest = content_hash(raw)
    with transaction.atomic():
        document = (Document.objects.select_for_update()
                    .filter(dataset=dataset, source_path=path).first())
        if document and not document.deleted:
            if document.content_hash == digest and document.status != Document.Status.FAILED:
                return UploadOutcome(document=document, job=None, changed=False)
            if not replace:
                raise DuplicateName(f"a document named {path!r} already exists in this dataset")
        document = document or Document(dataset=dataset, source_path=path)
        _fill(document, parsed, name=name, text=raw.decode("utf-8-sig"), digest=digest)
        document.save()
    return UploadOutcome(document=document, job=None, changed=True)


def document_upload(*, dataset: Dataset, file_name: str, raw: bytes,
                    max_bytes: int) -> UploadOutcome:
    """Store the document and index it in the background (202 + a job to follow)."""
    from datasets.tasks import index_document

    with transaction.atomic():
        outcome = document_store(dataset=dataset, file_name=file_name, raw=raw,
                                 max_bytes=max_bytes)
        if not outcome.changed:
            return outcome
        document = outcome.document
        job = Job.objects.create(tenant=dataset.tenant, kind=Job.Kind.INDEX_DOCUMENT,
                                 document=document, total=1)
        transaction.on_commit(lambda: index_document.delay(document.pk, job.pk))
    return UploadOutcome(document=document, job=job, changed=True)


def _fill(document: Document, parsed: ParsedDocument, *, name: str, text: str,
          digest: str) -> None:
    document.file_name = name
    document.title = parsed.title[:500]
    document.domain = parsed.domain[:100]
    document.category = parsed.category[:100]
    document.keywords = list(parsed.keywords)
    document.business_key = parsed.business_key[:200]
    document.source_text = text
    document.content_hash = digest
    document.deleted = False
    document.status = Document.Status.PENDING
    document.error = ""


def chunk_rows(document: Document, vectors: list[list[float]],
               drafts: list[ChunkDraft]) -> list[ChunkRow]:
    dataset = document.dataset
    rows = []
    for draft, vector in zip(drafts, vectors, strict=True):
        key = evidence_key(document.doc_id, draft.index)
        rows.append(ChunkRow(
            id=key, tenant_id=dataset.tenant_id, dataset_id=dataset.pk, doc_id=document.doc_id,
            activated=document.activated, category=document.category, content=draft.content,
            search_text=draft.search_text, vector=vector,
            metadata={"docId": str(document.doc_id), "chunkIndex": draft.index,
                      "title": document.title, "breadcrumb": draft.breadcrumb,
                      "source": document.source_path, "category": document.category,
                      "kb_scope": dataset.kb_scope, "datasetId": str(dataset.pk)}))
    return rows


def index_marker(document: Document, collection: str) -> str:
    # Hashed: "{sha256}:{collection}" does not fit the 64-character column (MariaDB refuses it).
    return hashlib.sha256(f"{document.content_hash}:{collection}".encode()).hexdigest()


def document_index(*, document: Document, collection: str | None = None,
                   force: bool = False) -> int:
    """Chunk, embed (cached), upsert to Milvus, then replace the DB chunks. Returns chunks."""
    # A rebuild names its new collection; everything else writes to the serving index.
    target = collection or active_index_version().collection_name
    if not force and document.indexed_hash == index_marker(document, target) \
            and document.status == Document.Status.READY:
        return document.chunk_count  # unchanged: no embedding work at all
    return documents_index(documents=[document], collection=target, store=get_store(),
                           embedder=get_embedder())[document.pk]


def documents_index(*, documents: Sequence[Document], collection: str,
                    store: MilvusHybridKnowledgeStore, embedder: Embedder) -> dict[int, int]:
    """Index several documents with one embedding call, one upsert and one flush."""
    Document.objects.filter(pk__in=[d.pk for d in documents]).update(
        status=Document.Status.INDEXING, error="")
    drafts = {}
    for document in documents:
        raw = document.source_text.encode("utf-8")
        drafts[document.pk] = build_chunks(
            parse_markdown(raw, file_name=document.file_name, max_bytes=len(raw) + 1))
    texts = [d.search_text for pk in drafts for d in drafts[pk]]
    vectors = iter(embedder.embed_documents(texts))
    rows = [row for document in documents
            for row in chunk_rows(document, [next(vectors) for _ in drafts[document.pk]],
                                  drafts[document.pk])]
    store.replace_documents([d.doc_id for d in documents], rows, collection=collection)
    with transaction.atomic():
        Chunk.objects.filter(document__in=documents).delete()
        Chunk.objects.bulk_create([
            Chunk(document=document, chunk_index=d.index, content=d.content,
                  breadcrumb=d.breadcrumb[:1000], metadata={"search_chars": len(d.search_text)})
            for document in documents for d in drafts[document.pk]])
        for document in documents:
            Document.objects.filter(pk=document.pk).update(
                status=Document.Status.READY, chunk_count=len(drafts[document.pk]),
                indexed_hash=index_marker(document, collection), error="")
    toggled = Document.objects.filter(pk__in=[d.pk for d in documents]).values_list(
        "pk", "activated")
    wanted = {d.pk: d.activated for d in documents}
    for pk, activated in toggled:
        if activated != wanted[pk]:  # toggled while we were embedding
            doc_id = next(d.doc_id for d in documents if d.pk == pk)
            store.set_document_activation(doc_id, activated, collection=collection)
    return {pk: len(chunks) for pk, chunks in drafts.items()}


def document_mark_failed(*, document_id: int, error: str) -> None:
    Document.objects.filter(pk=document_id).update(status=Document.Status.FAILED,
                                                   error=error[:2000])


def document_set_activation(*, document: Document, activated: bool) -> Document:
    """The DB row and the Milvus rows change together, or neither does."""
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        if locked.activated != activated:
            locked.activated = activated
            locked.save(update_fields=["activated", "updated_at"])
            if locked.chunk_count:
                get_store().set_document_activation(locked.doc_id, activated)
    return locked


def document_delete(*, document: Document) -> None:
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        get_store().delete_document(locked.doc_id)
        Chunk.objects.filter(document=locked).delete()
        locked.deleted = True
        locked.activated = False
        locked.chunk_count = 0
        locked.indexed_hash = ""
        locked.save()


def run_index_job(*, document_id: int, job_id: int | None) -> None:
    """What the worker does for one upload; failures are recorded, never lost silently."""
    job = Job.objects.filter(pk=job_id).first() if job_id else None
    document = Document.objects.select_related("dataset").get(pk=document_id)
    if document.deleted:
        job_update(job, status=Job.Status.SUCCEEDED, detail={"skipped": "deleted"})
        return
    job_update(job, status=Job.Status.RUNNING)
    chunks = document_index(document=document)
    job_update(job, status=Job.Status.SUCCEEDED, done=1, detail={"chunks": chunks})
