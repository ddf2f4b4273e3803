"""markdown → frontmatter + body → transformers → heading-aware splitter → chunk drafts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.conf import settings

from datasets.ingestion.parse import ParsedDocument
from datasets.ingestion.splitter import MarkdownSplitter
from datasets.ingestion.transformers import SecretRedactor, transform_document


@dataclass(frozen=True)
class ChunkDraft:
    index: int
    content: str  # the raw chunk text an agent reads
    breadcrumb: str
    search_text: str  # Title + Path + Content: the BM25 input and the embedding input


@cache
def _redactor() -> SecretRedactor | None:
    return SecretRedactor() if settings.KB_REDACT_SECRETS else None


def build_chunks(parsed: ParsedDocument) -> list[ChunkDraft]:
    body = transform_document(parsed.body, redactor=_redactor())
    splitter = MarkdownSplitter(chunk_size=settings.KB_CHUNK_SIZE,
                                chunk_overlap=settings.KB_CHUNK_OVERLAP)
    return [
        ChunkDraft(index=segment.index, content=segment.content, breadcrumb=segment.breadcrumb,
                   search_text=search_text(parsed.title, segment.breadcrumb, segment.content))
        for segment in splitter.split(body)
    ]


def search_text(title: str, breadcrumb: str, content: str) -> str:
    return "\n".join(part for part in (title, breadcrumb, content) if part)
