"""A document's markdown made from its original file, in the worker (never the web process).

Indexing reads `Document.source_text`. For markdown that is the upload itself; for every other
format it is what `datasets.ingestion.formats.convert` (sandboxed in a child process) made of
the original, recorded with the converters' version: a document converted by an older version
(an upgrade, a reindex) or not yet (a fresh upload) is converted again from its original first.
"""

from __future__ import annotations

import logging

from django.conf import settings

from datasets.documents.originals import original_read
from datasets.documents.services import dataset_documents_changed
from datasets.ingestion.formats import (
    CONVERTER_VERSION,
    ConversionFailed,
    Converted,
    Format,
    convert,
)
from datasets.ingestion.language import text_language
from datasets.ingestion.parse import ParsedDocument, parse_markdown
from datasets.ingestion.source import stored_source
from datasets.models import Document

logger = logging.getLogger(__name__)


def document_named(document: Document) -> str:
    """The document as the operators' log names it: its ids, file name and format."""
    return f"document {document.pk} (doc_id {document.doc_id}, {document.file_name!r}, " \
           f"{document.format})"


def conversion_due(document: Document) -> bool:
    return document.format != Format.MARKDOWN and document.converter_version != CONVERTER_VERSION


def document_convert(*, document: Document) -> tuple[Document, ParsedDocument | None]:
    """`document` with its converted markdown current, and that markdown parsed when it was
    converted now (None: it was current already); raises ConversionFailed (the reason is the
    uploader's to read) or DocumentParseError (the converted text is not indexable).

    The row is updated only while it still holds the content converted: an upload of new
    bytes meanwhile has its own sync. Two processes converting the same document at once
    write the same text.
    """
    if not conversion_due(document):
        return document, None
    try:
        converted = _converted(document)
    except ConversionFailed as exc:
        # Every path that converts (an upload's sync, a rebuild, a source's sync) comes here:
        # the one line that says which file failed and why (the child's traceback, when a
        # library failed, is logged by the sandbox).
        logger.warning("%s was not converted: %s", document_named(document), exc)
        raise
    source = stored_source(converted.markdown, redact=settings.KB_REDACT_SECRETS)
    encoded = source.encode("utf-8")
    parsed = parse_markdown(encoded, file_name=document.file_name, max_bytes=len(encoded) + 1)
    changes = {"source_text": source, "converter_version": CONVERTER_VERSION,
               "conversion_notes": list(converted.notes), "title": parsed.title[:500],
               "language": text_language(source)}
    seen = (document.title, document.language)  # what lookups know of it (its L0 title)
    if Document.objects.filter(pk=document.pk, content_hash=document.content_hash).update(
            **changes) and seen != (changes["title"], changes["language"]):
        dataset_documents_changed(dataset_id=document.dataset_id)
    for name, value in changes.items():
        setattr(document, name, value)
    return document, parsed


def _converted(document: Document) -> Converted:
    try:
        raw = original_read(document.original)
    except FileNotFoundError as exc:
        raise ConversionFailed("the original file is missing from the storage; upload it "
                               "again") from exc
    converted = convert(Format(document.format), raw)
    if not converted.markdown.strip():
        raise ConversionFailed("no text was found in the file")
    return converted
