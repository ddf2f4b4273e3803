"""A document as the index takes it, composed once: its original converted when that is due
(conversion.py), its markdown parsed once, split into chunk drafts (pipeline.py). The indexing
asks this one function for a document's chunks; what it does with them (embedding, Milvus,
the chunk rows) is retrieval's."""

from __future__ import annotations

from django.conf import settings

from datasets.ingestion.conversion import document_convert
from datasets.ingestion.formats import Format
from datasets.ingestion.parse import parse_markdown
from datasets.ingestion.pipeline import ChunkDraft, Chunking, build_chunks
from datasets.models import Document


def document_drafts(*, document: Document, chunking: Chunking) -> list[ChunkDraft]:
    """The document's chunk drafts; raises ConversionFailed or DocumentParseError, as
    `document_convert` does."""
    document, parsed = document_convert(document=document)
    if parsed is None:  # the text stored before: a field a later version refuses stays
        raw = document.source_text.encode("utf-8")
        parsed = parse_markdown(raw, file_name=document.file_name, max_bytes=len(raw) + 1,
                                stored=True)
    return build_chunks(parsed, chunking=chunking, redact=settings.KB_REDACT_SECRETS,
                        numbered=document.format == Format.MARKDOWN)
