"""Reads for datasets, documents and jobs, always through the caller's scope.

What a key may not see answers exactly as what does not exist: the same 404, the same words.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import NamedTuple

from django.db.models import Count, F, Q, QuerySet, Sum, Window
from django.db.models.functions import Coalesce, RowNumber

from datasets.documents.evidence import EvidenceKey
from datasets.documents.links import stored_lines
from datasets.models import Chunk, Dataset, Document, Job, Source, Tenant
from datasets.tenancy.keys import Caller
from datasets.tenancy.permissions import Access
from datasets.tenancy.slug_secrets import key_variable_of
from kbplatform.errors import NotFound

# The widest id a BIGINT column holds: a larger one cannot exist (and would overflow a query).
MAX_DB_ID = 2**63 - 1


def db_id(value: int | str) -> int | None:
    """An id from a URL or a body as the database could hold it, else None."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 19:  # "³".isdigit() is True
        return None
    number = int(text)
    return number if 0 < number <= MAX_DB_ID else None


def document_of(evidence_id: str) -> int | None:
    """The document id an evidence id names (either spelling), else None."""
    key = EvidenceKey.parse(evidence_id)
    return db_id(key.doc_id) if key else None


def dataset_list(*, caller: Caller) -> QuerySet[Dataset]:
    return caller.datasets().order_by("name")


def readable_datasets(*, caller: Caller) -> list[tuple[int, str]]:
    """(id, name) of what the caller's lookups may search, by name."""
    return list(caller.datasets().filter(activated=True).order_by("name")
                .values_list("pk", "name"))


def dataset_names(*, tenant_id: int, dataset_ids: Sequence[int]) -> list[tuple[int, str]]:
    """(id, name) of the tenant's datasets among `dataset_ids`, by name."""
    return list(Dataset.objects.filter(tenant_id=tenant_id, pk__in=list(dataset_ids))
                .order_by("name").values_list("pk", "name"))


def tenant_key_variable(tenant: Tenant) -> str:
    """KB_CHAT_API_KEY_<SLUG> ("-" as "_"): the one environment variable a tenant's RagConfig
    may name for its chat-model key; "" when another tenant's slug gives the same name
    (acme-eu, acme_eu), so that no config can name a key that is not its tenant's alone."""
    pattern = "^" + tenant.slug.replace("-", "_").replace("_", "[-_]") + "$"
    if Tenant.objects.filter(slug__regex=pattern).count() != 1:
        return ""
    return key_variable_of(tenant.slug)


def dataset_get(*, caller: Caller, dataset_id: int | str) -> Dataset:
    """A dataset the caller may see; otherwise 404."""
    pk = db_id(dataset_id)
    dataset = None
    if pk is not None:
        dataset = caller.datasets().select_related("tenant").filter(pk=pk).first()
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return dataset


def document_list(*, caller: Caller, dataset: Dataset) -> list[Document]:
    """Live documents; a tool key sees what its lookups may serve: the activated ones it may
    read, for no one in particular (documents without readers)."""
    documents = Document.objects.filter(dataset=dataset, deleted=False).order_by("source_path")
    if caller.is_admin:
        return list(documents)
    return [d for d in documents.filter(activated=True) if caller.access.may_read(d.readers)]


def document_get(*, caller: Caller, doc_id: str) -> Document:
    """A live document of a dataset the caller may change; otherwise 404."""
    pk = db_id(doc_id)
    document = None
    if pk is not None:
        document = Document.objects.select_related("dataset__tenant").filter(
            doc_id=pk, dataset_id__in=caller.writable_dataset_ids(), deleted=False).first()
    if document is None:
        raise NotFound(f"document {doc_id} does not exist")
    return document


def job_get(*, caller: Caller, job_id: int | str) -> Job:
    """A job of the caller's tenant and scope; platform jobs for platform keys only."""
    pk = db_id(job_id)
    job = None
    if pk is not None:
        # A job of a dataset the key may not see does not exist for it, like the dataset;
        # a tenant job of no dataset (an import) is for keys of the whole tenant.
        visible = Q(dataset_id__in=caller.datasets().values("pk"))
        if not caller.is_scoped:
            visible |= Q(dataset__isnull=True)
        mine = Q(tenant_id=caller.tenant.pk) & visible
        if caller.is_platform:
            mine |= Q(tenant__isnull=True)
        job = Job.objects.filter(mine, pk=pk).first()
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job


def datasets_in_scope(*, tenant_id: int, dataset_ids: Sequence[int],
                      kb_scope: str) -> tuple[int, ...]:
    """Those of `dataset_ids` whose kb_scope is `kb_scope` (RagConfig.kb_scope)."""
    return tuple(Dataset.objects.filter(tenant_id=tenant_id, pk__in=dataset_ids,
                                        kb_scope=kb_scope)
                 .order_by("pk").values_list("pk", flat=True))


def _servable(tenant_id: int, dataset_ids: Sequence[int]) -> Q:
    """Documents a lookup may serve right now: live, activated, in an activated dataset of
    the tenant among `dataset_ids`."""
    return Q(dataset_id__in=list(dataset_ids), dataset__tenant_id=tenant_id,
             dataset__activated=True, activated=True, deleted=False)


def live_doc_ids(*, tenant_id: int, dataset_ids: Sequence[int], doc_ids: Collection[int],
                 access: Access) -> set[int]:
    """Of `doc_ids`, those a lookup with `access` may serve right now. Lookups check every
    hit against this, whatever Milvus says."""
    return set(served_revisions(tenant_id=tenant_id, dataset_ids=dataset_ids, doc_ids=doc_ids,
                                access=access))


def served_revisions(*, tenant_id: int, dataset_ids: Sequence[int], doc_ids: Collection[int],
                     access: Access) -> dict[int, str]:
    """Of `doc_ids`, those a lookup with `access` may serve right now, with the content hash
    of what the serving index holds of each."""
    if not doc_ids:
        return {}
    rows = (Document.objects.filter(_servable(tenant_id, dataset_ids), doc_id__in=list(doc_ids))
            .values_list("doc_id", "indexed_hash", "readers"))
    return {doc_id: hashed for doc_id, hashed, readers in rows if access.may_read(readers)}


def servable_document(*, tenant_id: int, dataset_ids: Sequence[int], doc_id: int,
                      access: Access) -> Document | None:
    """The document `doc_id` if a lookup of these datasets with `access` may serve it right
    now, else None: another tenant's, or one restricted to others, answers as one that does
    not exist."""
    document = (Document.objects.filter(_servable(tenant_id, dataset_ids), doc_id=doc_id)
                .only("pk", "doc_id", "dataset_id", "title", "source_path", "source_commit",
                      "indexed_hash", "format", "url", "content_updated_at", "reviewed_at",
                      "valid_until", "owner", "readers")
                .first())
    return document if document is not None and access.may_read(document.readers) else None


def chunk_count_locked(*, document_pk: int) -> int:
    """The document's chunk count, its row locked until the transaction ends: indexing locks
    the row, replaces its chunks and writes the row in one transaction
    (services.document_indexed), so the chunks read under this lock are all of one indexing
    (0: the document is gone). On SQLite, where a transaction begins IMMEDIATE and takes the
    database's write lock, the same holds without a row lock."""
    count = (Document.objects.select_for_update().filter(pk=document_pk)
             .values_list("chunk_count", flat=True).first())
    return count or 0


def chunk_contents(*, keys: Collection[tuple[int, EvidenceKey]]) -> dict[EvidenceKey, str]:
    """The text of each (doc_id, key) whose key names a chunk of that document as it is now,
    by place or by anchor (the first chunk with it), in one query."""
    if not keys:
        return {}
    wanted = Q()
    for doc_id, key in keys:
        wanted |= (Q(document__doc_id=doc_id, anchor=key.anchor) if key.anchor
                   else Q(document__doc_id=doc_id, chunk_index=key.chunk_index))
    found: dict[tuple[int, int | str], str] = {}
    for doc_id, index, anchor, content in (
            Chunk.objects.filter(wanted).order_by("-chunk_index")
            .values_list("document__doc_id", "chunk_index", "anchor", "content")):
        found[doc_id, index] = content
        if anchor:  # rows come last-first: the first chunk with it is written last
            found[doc_id, anchor] = content
    named = ((doc_id, key, key.anchor or key.chunk_index) for doc_id, key in keys)
    return {key: found[doc_id, part] for doc_id, key, part in named
            if part is not None and (doc_id, part) in found}


def chunk_of_anchor(*, document_pk: int, anchor: str) -> int | None:
    """The index of the document's first chunk with `anchor`, None when none has it."""
    return (Chunk.objects.filter(document_id=document_pk, anchor=anchor)
            .order_by("chunk_index").values_list("chunk_index", flat=True).first())


def chunk_anchors(*, document_pk: int, indexes: Collection[int]) -> dict[int, str]:
    """The anchor of each of the document's chunks at `indexes` ("": none kept)."""
    return dict(Chunk.objects.filter(document_id=document_pk, chunk_index__in=list(indexes))
                .values_list("chunk_index", "anchor"))


def section_start(*, document_pk: int, breadcrumb: str) -> int | None:
    """The index of the document's first chunk under `breadcrumb`, None when none is."""
    return (Chunk.objects.filter(document_id=document_pk, breadcrumb=breadcrumb)
            .order_by("chunk_index").values_list("chunk_index", flat=True).first())


class ChunkText(NamedTuple):
    chunk_index: int
    breadcrumb: str
    content: str
    overlap: int  # characters it starts with that end the chunk before it (0: none known)
    location: object  # as its metadata stores it
    lines: tuple[int, int] | None  # the lines of the file it spans (markdown)
    anchor: str  # its id's content-addressed part; "": none kept (datasets/documents/evidence.py)


def chunks_from(*, document_pk: int, start: int, step: int, batch: int = 16
                ) -> Iterator[ChunkText]:
    """The document's chunks from `start` on, forward (`step` 1) or backward (-1), read
    `batch` at a time: a reader that stops early has read at most one batch more. It ends
    at the document's end, or at a missing index."""
    index = start
    while index >= 0:
        window = (index, index + batch - 1) if step > 0 else (max(index - batch + 1, 0), index)
        rows = list(Chunk.objects.filter(document_id=document_pk, chunk_index__range=window)
                    .order_by("chunk_index" if step > 0 else "-chunk_index")
                    .values_list("chunk_index", "breadcrumb", "content", "metadata", "anchor"))
        for chunk_index, breadcrumb, content, metadata, anchor in rows:
            if chunk_index != index:
                return
            meta = metadata if isinstance(metadata, dict) else {}
            overlap = meta.get("overlap")
            yield ChunkText(chunk_index, breadcrumb, content,
                            overlap if isinstance(overlap, int) else 0, meta.get("location"),
                            stored_lines(meta.get("lines")), anchor)
            index += step
        if len(rows) < batch:
            return


def documents_by_doc_id(*, tenant_id: int, doc_ids: Collection[int]) -> dict[int, Document]:
    """The tenant's documents among `doc_ids` (deleted ones too: history names them), in one
    query, with what names them: title, path and dataset."""
    if not doc_ids:
        return {}
    rows = (Document.objects.filter(doc_id__in=list(doc_ids), dataset__tenant_id=tenant_id)
            .only("pk", "doc_id", "title", "source_path", "deleted", "dataset_id"))
    return {row.doc_id: row for row in rows}


LIVE = Q(documents__deleted=False)
IN_PROGRESS = [Document.Status.PENDING, Document.Status.INDEXING]


def with_document_counts(datasets: QuerySet[Dataset]) -> QuerySet[Dataset]:
    """Each dataset with its live documents by status and its chunks: one grouped query for a
    page, not one per dataset; chunks are the documents' indexed chunk counts (a sum over
    documents, not a scan of the chunk table)."""
    return datasets.annotate(
        documents_live=Count("documents", filter=LIVE),
        documents_ready=Count("documents", filter=LIVE & Q(
            documents__status=Document.Status.READY)),
        documents_in_progress=Count("documents", filter=LIVE & Q(
            documents__status__in=IN_PROGRESS)),
        documents_failed=Count("documents", filter=LIVE & Q(
            documents__status=Document.Status.FAILED)),
        chunks=Coalesce(Sum("documents__chunk_count", filter=LIVE), 0),
    )


def last_ingestion_errors(*, dataset_ids: Collection[int], per_dataset: int = 3,
                          ) -> dict[int, list[Document]]:
    """The latest failed documents of each dataset, newest first: one query."""
    failed = (Document.objects.filter(dataset_id__in=dataset_ids, deleted=False,
                                      status=Document.Status.FAILED)
              .only("pk", "dataset_id", "source_path", "error", "updated_at")
              .annotate(rank=Window(RowNumber(), partition_by=F("dataset_id"),
                                    order_by=F("updated_at").desc()))
              .filter(rank__lte=per_dataset).order_by("dataset_id", "rank"))
    found: dict[int, list[Document]] = {pk: [] for pk in dataset_ids}
    for document in failed:
        found[document.dataset_id].append(document)
    return found


def source_list(*, caller: Caller) -> QuerySet[Source]:
    """The sources of the datasets the caller may change (admin keys; a scoped key: its
    datasets' only)."""
    return (Source.objects.filter(dataset_id__in=caller.writable_dataset_ids())
            .select_related("dataset").order_by("dataset__name", "name"))


def source_get(*, caller: Caller, source_id: int | str) -> Source:
    """A source of a dataset the caller may change; otherwise 404."""
    pk = db_id(source_id)
    source = source_list(caller=caller).filter(pk=pk).first() if pk is not None else None
    if source is None:
        raise NotFound(f"source {source_id} does not exist")
    return source
