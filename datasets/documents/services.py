"""Writes: tenants, datasets and documents (seed 003 §1, seed 000 §10.1).

A document's row is the truth. Every change the vector store must follow (new content, a
deletion, a re-index) bumps `Document.revision` and enqueues one idempotent task,
`retrieval.tasks.sync_document`, on the single-writer indexing queue; the task makes Milvus
match the row as it is when the task runs. Activation is the row alone: lookups filter on it.
Lookups check the rows too, so a deactivated or deleted document is never served, whatever
Milvus still holds.

Markdown is parsed here, at the door. Every other format is only sniffed here (suffix and
content, cheaply) and its original stored; the worker converts it
(datasets/ingestion/conversion.py).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePosixPath

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from datasets.documents.originals import (
    original_delete_on_commit,
    original_discard,
    original_name,
    original_save,
)
from datasets.ingestion.formats import SUFFIXES, Format, FormatRefused, sniff
from datasets.ingestion.language import text_language
from datasets.ingestion.limits import MAX_TITLE_CHARS, shorten
from datasets.ingestion.parse import (
    DocumentParseError,
    DocumentTooLarge,
    ParsedDocument,
    parse_markdown,
)
from datasets.ingestion.pipeline import ChunkDraft, Chunking, build_chunks
from datasets.ingestion.source import stored_source
from datasets.jobs.progress import JOB_ID, job_create
from datasets.models import (
    Chunk,
    Dataset,
    Document,
    Job,
    Source,
    Tenant,
    validate_filterable_fields,
)
from datasets.sources.secrets import slug_refusals
from datasets.tenancy.permissions import readers_checked, readers_within
from kbplatform.errors import ApiError, ErrorCode, ServiceUnavailable
from kbplatform.tasks import enqueue_on_commit

logger = logging.getLogger(__name__)

SYNC_TASK = "retrieval.tasks.sync_document"
UPDATE_BATCH = 500  # documents one UPDATE names by id


class DuplicateName(ApiError):
    status_code = 409
    default_code = ErrorCode.DUPLICATE


class InvalidDocument(ApiError):
    """The upload is not ingestible markdown (encoding, binary, frontmatter...): a 400."""

    default_code = ErrorCode.INVALID_DOCUMENT


class UnsupportedFormat(ApiError):
    """Not a format the platform reads, or a file whose content is not what its name says: a
    415."""

    status_code = 415
    default_code = ErrorCode.UNSUPPORTED_TYPE


class DocumentTooBig(ApiError):
    """The upload is valid markdown but exceeds a size bound: a 413."""

    status_code = 413
    default_code = ErrorCode.TOO_LARGE


@dataclass(frozen=True)
class UploadOutcome:
    document: Document
    job: Job | None  # None when nothing is to be done: the document is indexed and unchanged
    changed: bool  # new content (False for an unchanged re-upload, retried or not)


@dataclass(frozen=True)
class Validated:
    name: str
    format: Format
    parsed: ParsedDocument  # for another format than markdown: the fields from its name only
    digest: str  # of the bytes uploaded
    source: str  # what is stored: the body's secrets redacted ("" until converted)
    original: bytes | None  # the file to keep (every format but markdown)


def tenant_get_or_create(*, slug: str) -> Tenant:
    """The tenant `slug`, made when there is none (not under a slug whose credential
    variables another tenant's sources name: datasets/sources/secrets.py)."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is not None:
        return tenant
    refusals = slug_refusals(slug)
    if refusals:
        raise ApiError(refusals[0], code=ErrorCode.INVALID)
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
        raise ApiError("the file name is missing or not valid", code=ErrorCode.INVALID_FILE_NAME)
    return name


def configured_chunking() -> Chunking:
    """The chunking the settings ask for (an index keeps the one it was built with)."""
    return Chunking(size=settings.KB_CHUNK_SIZE, overlap=settings.KB_CHUNK_OVERLAP,
                    whole_document=settings.KB_WHOLE_DOCUMENT_CHARS)


def document_validate(*, file_name: str, raw: bytes, max_bytes: int) -> Validated:
    """Everything an upload must pass before a row is written; raises a 4xx ApiError.

    Markdown: the chunk count is checked here too, so a document that could never be indexed
    is refused at the door instead of failing later in the worker. Another format: its size
    and what `sniff` reads (suffix, magic bytes, zip directory) only; converting it is the
    worker's (a PDF may take seconds of CPU), which checks the chunk count after.
    """
    name = check_file_name(file_name.rsplit("/", 1)[-1])
    if len(raw) > max_bytes:  # first: it is cheap and bounds every later step
        raise DocumentTooBig(f"the file is {len(raw):,} bytes; the limit is {max_bytes:,} bytes")
    # Markdown is judged by its parser below, which says more than a type check would
    # (UTF-16, the offset of a bad byte...); every other format by what sniff reads.
    fmt = SUFFIXES.get(PurePosixPath(name).suffix.lower())
    if fmt is not Format.MARKDOWN:
        try:
            fmt = sniff(name, raw)
        except FormatRefused as exc:
            raise UnsupportedFormat(str(exc)) from exc
        return Validated(name=name, format=fmt, parsed=_named(name), digest=content_hash(raw),
                         source="", original=raw)
    try:
        parsed = parse_markdown(raw, file_name=name, max_bytes=max_bytes)
        build_chunks(parsed, chunking=configured_chunking(), redact=settings.KB_REDACT_SECRETS)
    except DocumentTooLarge as exc:
        raise DocumentTooBig(str(exc)) from exc
    except DocumentParseError as exc:
        # A ValueError would reach the client as a 500; the message is written for the user.
        raise InvalidDocument(str(exc)) from exc
    text = raw.decode("utf-8-sig")
    source = stored_source(text, redact=settings.KB_REDACT_SECRETS)
    if source != text:
        # The fields (a title from a heading too) come from what is stored: no secret in them.
        parsed = parse_markdown(source.encode("utf-8"), file_name=name,
                                max_bytes=len(source.encode("utf-8")) + 1)
    return Validated(name=name, format=fmt, parsed=parsed, digest=content_hash(raw),
                     source=source, original=None)


def _named(name: str) -> ParsedDocument:
    """A document known by its name until the worker converts it (then its heading)."""
    return ParsedDocument(title=shorten(PurePosixPath(name).stem, MAX_TITLE_CHARS), body="",
                          domain="", keywords=(), category="", business_key="")


def document_store(*, dataset: Dataset, file_name: str, raw: bytes, max_bytes: int,
                   source_path: str | None = None, replace: bool = False,
                   queue: bool = True) -> UploadOutcome:
    """Validate everything first, then write the row; the sync is enqueued on commit.

    The same bytes again: nothing to do when the document is indexed and in sync, otherwise
    the sync is retried (a document left `failed` or `indexing` by an outage or a dead
    worker comes back this way, with its identity). New bytes for a taken name need
    `replace=True` (the importer); an API upload of a taken name is a 409. `queue=False`
    writes the row only (evaluation suites index into collections of their own). The original
    of a format other than markdown is stored before the row: a storage failure is a 503 and
    writes nothing.
    """
    valid = document_validate(file_name=file_name, raw=raw, max_bytes=max_bytes)
    return document_store_valid(dataset=dataset, valid=valid, source_path=source_path,
                                replace=replace, queue=queue)


def document_store_valid(*, dataset: Dataset, valid: Validated, source_path: str | None = None,
                         replace: bool = False, queue: bool = True) -> UploadOutcome:
    """`document_store` of an upload `document_validate` passed already (a form that showed
    its errors first): a markdown file is not parsed and split once more."""
    path = source_path or valid.name
    try:
        return _stored(dataset, valid, path, replace=replace, queue=queue)
    except IntegrityError as exc:  # the same new name uploaded by another request at once
        raise DuplicateName(f"a document named {path!r} was just uploaded by another "
                            "request; upload it again to see its state") from exc


def _stored(dataset: Dataset, valid: Validated, path: str, *, replace: bool,
            queue: bool) -> UploadOutcome:
    with transaction.atomic():
        document = (Document.objects.select_for_update()
                    .filter(dataset=dataset, source_path=path).first())
        if document and not document.deleted:
            if document.content_hash == valid.digest:
                if document.status == Document.Status.READY and not document.sync_pending:
                    return UploadOutcome(document=document, job=None, changed=False)
                _due(document, status=Document.Status.PENDING)
                return UploadOutcome(document=document, job=_sync_job(document, queue),
                                     changed=False)
            if not replace:
                raise DuplicateName(f"a document named {path!r} already exists in this dataset")
        if document is None:
            document = Document(dataset=dataset, source_path=path)
        elif document.deleted:  # the name is taken again: a live document, as a new one is
            document.activated = True
        stored = _keep_original(document, valid)
        try:
            _fill(document, valid)
            _due(document, status=Document.Status.PENDING)
        except BaseException:  # e.g. the same new name uploaded at once: no row names the file
            if stored:
                original_discard(document.original)
            raise
        return UploadOutcome(document=document, job=_sync_job(document, queue), changed=True)


def _keep_original(document: Document, valid: Validated) -> bool:
    """Store the upload's original (if it has one) and drop the one it replaces on commit;
    whether a file was stored."""
    name, stored = "", False
    if valid.original is not None:
        name = original_name(tenant_id=document.dataset.tenant_id, doc_id=document.doc_id,
                             digest=valid.digest, suffix=valid.format.value)
        try:
            stored = original_save(name, valid.original)
        except OSError as exc:
            logger.exception("the original of %s could not be stored", document.source_path)
            raise ServiceUnavailable("the file storage is unavailable; try again later") from exc
    if document.original and document.original != name:
        original_delete_on_commit(document.original)
    document.original = name
    return stored


def _fill(document: Document, valid: Validated) -> None:
    parsed = valid.parsed
    document.file_name = valid.name
    document.format = valid.format.value
    document.converter_version = ""  # converted by the worker, from the original
    document.conversion_notes = []
    document.title = parsed.title[:500]
    document.domain = parsed.domain[:100]
    document.category = parsed.category[:100]
    document.keywords = list(parsed.keywords)
    document.business_key = parsed.business_key[:200]
    document.reviewed_at, document.valid_until = parsed.reviewed_at, parsed.valid_until
    document.owner = parsed.owner
    document.fields = {name: list(values) for name, values in parsed.fields.items()}
    document.source_text = valid.source
    document.language = text_language(valid.source)
    document.content_hash = valid.digest
    document.content_updated_at = timezone.now()
    document.deleted = False
    document.error = ""


def _due(document: Document, **changes: object) -> None:
    """Save the row with its next revision; the indexing worker will make Milvus follow."""
    for name, value in changes.items():
        setattr(document, name, value)
    if document.pk:
        document.revision += 1
    document.save()
    dataset_documents_changed(dataset_id=document.dataset_id)


def _sync_job(document: Document, queue: bool = True) -> Job | None:
    if not queue:
        return None
    return job_create(kind=Job.Kind.INDEX_DOCUMENT, task=SYNC_TASK, args=(document.pk, JOB_ID),
                      tenant_id=document.dataset.tenant_id, dataset=document.dataset,
                      document=document, total=1)


def document_set_activation(*, document: Document, activated: bool) -> Document:
    """Flip the row, and that is all: lookups exclude deactivated documents in their own
    filter, so Milvus is not written (a rewritten row loses its BM25 ranking on Milvus Lite)."""
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        if locked.activated != activated and not locked.deleted:
            locked.activated = activated
            locked.save(update_fields=["activated", "updated_at"])
            dataset_documents_changed(dataset_id=locked.dataset_id)
    return locked


def document_readers_set(*, document: Document, readers: Sequence[str]) -> Document:
    """Who may read it (datasets/tenancy/permissions.py; ValidationError naming what is wrong); a
    synced document's readers are its source's, set there. Lookups hold them at once (by
    the document's id until the indexing worker has written them into its rows)."""
    checked = readers_checked(readers)
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        if locked.source_id is not None:
            raise ValidationError(f"its readers are its source's: set them on source "
                                  f"{locked.source_id}")
        if locked.readers != checked and not locked.deleted:
            _due(locked, readers=checked)
            enqueue_on_commit(SYNC_TASK, locked.pk, None)
    return locked


def source_readers_due(*, source: Source) -> None:
    """The source's documents take its readers (within those the source keeps for each), as
    document_readers_set gives one its own: lookups hold them at once (by the documents' ids
    until the indexing worker has written them into their rows)."""
    alike: dict[tuple[str, ...], list[int]] = {}
    for pk, at_source in Document.objects.filter(source=source, deleted=False).values_list(
            "pk", "readers_at_source"):
        alike.setdefault(tuple(at_source), []).append(pk)
    for at_source, pks in alike.items():
        for start in range(0, len(pks), UPDATE_BATCH):
            Document.objects.filter(pk__in=pks[start:start + UPDATE_BATCH]).update(
                readers=readers_within(source.readers, at_source), revision=F("revision") + 1)
    dataset_documents_changed(dataset_id=source.dataset_id)
    for pk in sorted(pk for pks in alike.values() for pk in pks):
        enqueue_on_commit(SYNC_TASK, pk, None)


def document_readers_at_source_set(*, source: Source, document: Document,
                                   readers: Sequence[str]) -> bool:
    """A synced document's readers at `source` as a sync read them: its readers follow (within
    the source's own) and lookups hold them at once (the indexing worker writes them into its
    rows); whether they moved."""
    at_source = list(readers)
    with transaction.atomic():  # the source first, as source_update locks it, then its documents
        source_readers = Source.objects.select_for_update().filter(
            pk=source.pk).values_list("readers", flat=True).get()
        locked = Document.objects.select_for_update().get(pk=document.pk)
        within = readers_within(source_readers, at_source)
        if locked.deleted or locked.source_id != source.pk or \
                (locked.readers, locked.readers_at_source) == (within, at_source):
            return False
        _due(locked, readers=within, readers_at_source=at_source)
        enqueue_on_commit(SYNC_TASK, locked.pk, None)
    return True


def dataset_documents_changed(*, dataset_id: int) -> None:
    """Lookups in every process see the dataset's documents anew (retrieval/lookup/l0.py)."""
    _documents_renewed(Dataset.objects.filter(pk=dataset_id))


def _documents_renewed(datasets: QuerySet[Dataset]) -> None:
    # A fresh random value, not a count: a count reached again after a rolled-back change
    # (a savepoint, a failed request) would pass a view of the discarded state for current.
    datasets.update(documents_revision=secrets.randbits(62))


def tenant_fields_declare(*, tenant: Tenant, names: list[str]) -> None:
    """`names` are the frontmatter fields the tenant's calls may filter on (ValidationError
    naming what is wrong)."""
    validate_filterable_fields(names)
    with transaction.atomic():
        tenant.filterable_fields = list(names)
        tenant.save(update_fields=["filterable_fields"])
        tenant_documents_changed(tenant_id=tenant.pk)


def tenant_documents_changed(*, tenant_id: int) -> None:
    """Lookups in every process see each of the tenant's datasets anew: the view of its
    documents keeps the fields the tenant declared, and those only (retrieval/lookup/l0.py)."""
    _documents_renewed(Dataset.objects.filter(tenant_id=tenant_id))


def document_delete(*, document: Document) -> None:
    """Gone for lookups at once; the worker removes its Milvus rows."""
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        if locked.deleted:
            return
        Chunk.objects.filter(document=locked).delete()
        original_delete_on_commit(locked.original)
        _due(locked, deleted=True, activated=False, chunk_count=0, indexed_hash="", original="")
        enqueue_on_commit(SYNC_TASK, locked.pk, None)


def document_reindex(*, document: Document) -> Job:
    """Index again from the stored source, whatever state it is in (failed, stuck...); a
    document with an original is converted from it again (a conversion that timed out)."""
    with transaction.atomic():
        locked = Document.objects.select_for_update().select_related("dataset").get(
            pk=document.pk)
        _due(locked, status=Document.Status.PENDING, indexed_hash="", error="",
             converter_version="")
        job = _sync_job(locked)
        assert job is not None
        return job


def documents_sync_due(*, older_than_seconds: float = 0) -> list[int]:
    """Documents whose last change Milvus has not followed yet (the worker's recovery)."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    return list(Document.objects.exclude(synced_revision=F("revision"))
                .filter(updated_at__lte=cutoff).order_by("pk").values_list("pk", flat=True))


# --- what the index holds of a document: written by retrieval's indexing, through these -----
# Single-column .update()s, never .save(): the indexing worker must not overwrite what an
# upload, a deletion or an activation changed in the row meanwhile.

def chunks_replace(*, document_id: int, drafts: Sequence[ChunkDraft]) -> None:
    """The document's Chunk rows become `drafts` (none: its chunks are gone)."""
    with transaction.atomic():
        Chunk.objects.filter(document_id=document_id).delete()
        Chunk.objects.bulk_create([
            Chunk(document_id=document_id, chunk_index=d.index, content=d.content,
                  breadcrumb=d.breadcrumb[:1000], metadata=_chunk_metadata(d),
                  anchor=d.anchor)
            for d in drafts])


def _chunk_metadata(draft: ChunkDraft) -> dict[str, object]:
    location = {"location": draft.location.as_dict()} if draft.location else {}
    lines = {"lines": list(draft.lines)} if draft.lines else {}
    # Always written: a chunk without it was indexed before it was kept (fetch_evidence).
    return {"search_chars": len(draft.search_text), "overlap": draft.overlap, **location,
            **lines}


def document_indexing(*, document_id: int, content_hash: str) -> None:
    """The document is being indexed: INDEXING, unless the row already says `content_hash` is
    indexed. Two syncs of the same content (a worker's and a retry's) never show a document
    that one of them made READY as indexing again."""
    Document.objects.filter(pk=document_id).exclude(
        status=Document.Status.READY, indexed_hash=content_hash).update(
        status=Document.Status.INDEXING)


def document_indexed_hash_set(*, document_id: int, indexed_hash: str) -> None:
    """Record what the index holds for the document; the rest of the row is left alone."""
    Document.objects.filter(pk=document_id).update(indexed_hash=indexed_hash)


def document_synced(*, document_id: int, revision: int) -> None:
    """Milvus follows the row up to `revision` (the mark never moves backwards)."""
    Document.objects.filter(pk=document_id, synced_revision__lt=revision).update(
        synced_revision=revision)


def document_indexed(*, document_id: int, drafts: Sequence[ChunkDraft], revision: int,
                     content_hash: str, readers: Sequence[str]) -> None:
    """The row says what the index holds: READY with these chunks naming these readers,
    synced up to `revision`.
    The row is locked first, so a reader that locks it (fetch_evidence) waits for the whole
    change rather than deadlocking against the chunks' inserts."""
    with transaction.atomic():
        before = Document.objects.select_for_update().filter(pk=document_id).values_list(
            "dataset_id", "indexed_readers").first()
        chunks_replace(document_id=document_id, drafts=drafts)
        Document.objects.filter(pk=document_id).update(
            status=Document.Status.READY, chunk_count=len(drafts), indexed_hash=content_hash,
            indexed_readers=list(readers), error="")
        document_synced(document_id=document_id, revision=revision)
        if before is not None and before[1] != list(readers):
            # Lookups compare its rows' readers again, no longer its id.
            dataset_documents_changed(dataset_id=before[0])


def document_mark_failed(*, document_id: int, error: str) -> None:
    """FAILED with a message the uploader may read; it stays re-indexable (re-upload,
    reindex API or admin action) with its identity."""
    # A deleted document is not "failed": its removal stays due, and the recovery retries it.
    Document.objects.filter(pk=document_id, deleted=False).update(
        status=Document.Status.FAILED, error=error[:2000])
