"""How the datasets admin shows documents, chunks and jobs: previews, a document's chunk table,
list filters whose choices stay small however many documents there are, a job's progress."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from datasets.admin.scope import admin_datasets, scoped
from datasets.documents.selectors import db_id
from datasets.ingestion.transformers import SecretRedactor
from datasets.models import Document, Job

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

PREVIEW_CHARS = 120
CHUNKS_SHOWN = 200  # a document may have 2,000 chunks: its page lists the first ones
# Wrapped and scrollable: a long line or a long document stays inside the page.
SOURCE_BOX = ("max-height: 32em; max-width: 100%; overflow: auto; white-space: pre-wrap; "
              "overflow-wrap: anywhere; font-family: var(--font-family-monospace, monospace); "
              "border: 1px solid var(--hairline-color, #ccc); padding: 8px; margin: 0;")


def redacted(text: str) -> str:
    # New rows are stored with their body redacted; this also covers rows stored before that,
    # and a document's frontmatter, which is stored as uploaded so that it parses again.
    return SecretRedactor().redact(text)


def preview(content: str) -> str:
    """One line of a chunk's text: redacted first, so that no secret is cut in half."""
    return Truncator(" ".join(redacted(content).split())).chars(PREVIEW_CHARS)


def source_box(text: str) -> SafeString:
    return format_html('<pre class="kb-source" style="{}">{}</pre>', SOURCE_BOX, redacted(text))


def original_link(document: Document) -> SafeString:
    """A download link to the original file (scoped like the page: DocumentAdmin.original)."""
    if not document.original:
        return mark_safe("none: a markdown upload is its own source (below)")
    url = reverse("admin:datasets_document_original", args=[document.pk])
    return format_html('<a id="document-original" href="{}" download>{}</a> ({})', url,
                       document.file_name, document.format)


def chunk_list_url(document: Document) -> str:
    return (f"{reverse('admin:datasets_chunk_changelist')}"
            f"?{DocumentFilter.parameter_name}={document.pk}")


def chunk_table(document: Document) -> SafeString:
    """The document's first CHUNKS_SHOWN chunks, and a link to all of them in the chunk list."""
    chunks = list(document.chunks.order_by("chunk_index")
                  .only("pk", "document", "chunk_index", "breadcrumb", "content")[:CHUNKS_SHOWN])
    if not chunks:
        return mark_safe("No chunks yet: they are written when the document is indexed.")
    rows = format_html_join("", '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td>'
                                '<td style="text-align: right">{}</td></tr>',
                            ((reverse("admin:datasets_chunk_change", args=[c.pk]), c.chunk_index,
                              c.breadcrumb, preview(c.content), len(c.content)) for c in chunks))
    total = len(chunks) if len(chunks) < CHUNKS_SHOWN else document.chunks.count()
    shown = (f"The first {len(chunks)} of {total} chunks" if total > len(chunks)
             else f"{total} chunk{'s' if total != 1 else ''}")
    return format_html(
        '<table id="document-chunks"><thead><tr><th>#</th><th>breadcrumb</th><th>preview</th>'
        "<th>chars</th></tr></thead><tbody>{}</tbody></table>"
        '<p>{}. <a href="{}">All chunks of this document in the chunk list</a></p>',
        rows, shown, chunk_list_url(document))


class DatasetFilter(admin.RelatedFieldListFilter):
    """Datasets named with their tenant, read in one query (not one per dataset)."""

    def field_choices(self, field: Any, request: HttpRequest,
                      model_admin: Any) -> list[tuple[str, str | StrPromise]]:
        return [(str(dataset.pk), str(dataset)) for dataset in admin_datasets(request)]


class DocumentFilter(admin.SimpleListFilter):
    """The chunks of one document, reached by the link on its page: a list of every document
    to choose from would be as long as the documents table. Shown only while it applies."""

    title = "document"
    parameter_name = "document__id__exact"

    def _pk(self) -> int | None:
        value = self.value()
        return db_id(value) if value is not None else None  # "²" is a digit, not an id

    def has_output(self) -> bool:
        # Also for an id that names no document: it filters down to nothing, not to everything.
        return self.value() is not None

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        pk = self._pk()
        if pk is None:
            return []
        document = scoped(Document.objects.filter(pk=pk), request, "dataset__tenant").only(
            "source_path").first()
        return [(str(pk), document.source_path)] if document is not None else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is None:
            return queryset
        pk = self._pk()
        return queryset.filter(document_id=pk) if pk is not None else queryset.none()


def job_progress(job: Job) -> dict[str, Any]:
    """What a job's page shows and polls: progress, the log, and the end state in words."""
    finished = job.status in (Job.Status.SUCCEEDED, Job.Status.FAILED)
    took = (job.updated_at - job.created_at).total_seconds()
    if job.status == Job.Status.SUCCEEDED:
        end = f"Succeeded in {took:.0f} s."
    elif job.status == Job.Status.FAILED:
        end = f"Failed after {took:.0f} s: {job.error}"
    else:
        end = ""
    return {"id": job.pk, "kind": job.kind, "status": job.status, "done": job.done,
            "total": job.total, "finished": finished, "end": end, "log": job.log}
