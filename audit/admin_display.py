"""How the audit admin lays out a trace: each stage's candidates as rows, each evidence key
beside the document it points to, and each value in a column named for what it holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.urls import reverse

from audit.types import DropReason
from datasets.documents.selectors import document_of, documents_by_doc_id
from datasets.models import Document

# The pack stage records the excerpt length handed to the agent for each item, not a score.
CHARS_STAGES = frozenset({"pack"})


@dataclass(frozen=True)
class DocumentLabel:
    title: str
    path: str
    url: str  # its admin page
    deleted: bool


@dataclass(frozen=True)
class Candidate:
    evidence_key: str
    document: DocumentLabel | None  # None: no such document of the tenant (or a fallback key)
    score: Any = None
    chars: Any = None
    reason: str = ""  # why a stage dropped it


@dataclass(frozen=True)
class Stage:
    stage: str
    elapsed_ms: Any
    note: str
    candidates: list[Candidate]
    dropped: list[Candidate]  # what the stage did not keep, each with its reason


def _labels(tenant_id: int | None, keys: Iterable[str]) -> dict[int, DocumentLabel]:
    doc_ids = {doc_id for key in keys if (doc_id := document_of(key)) is not None}
    if tenant_id is None or not doc_ids:
        return {}
    documents: Mapping[int, Document] = documents_by_doc_id(tenant_id=tenant_id,
                                                            doc_ids=doc_ids)
    return {doc_id: DocumentLabel(
        title=d.title, path=d.source_path, deleted=d.deleted,
        url=reverse("admin:datasets_document_change", args=[d.pk]))
        for doc_id, d in documents.items()}


REASONS: dict[str, str] = {
    DropReason.DUPLICATE: "a copy of a better-ranked hit",
    DropReason.SAME_TEXT: "the same text as a better-ranked hit (in its also_in)",
    DropReason.PER_DOCUMENT: "its document has max_chunks_per_document chunks kept already",
    DropReason.RETURN_N: "after the first return_n kept"}


def dropped_reason(code: str) -> str:
    """The words for a reason the gate recorded (retrieval/lookup/post_process.py)."""
    below = f"{DropReason.BELOW}:"
    if code.startswith(below):
        quality, _, support = code.removeprefix(below).partition("/")
        lexical = f", {support} with the query's words" if support else ""
        return f"below the reference threshold: quality {quality}{lexical}"
    return REASONS.get(code, code)


def trace_tables(details: Mapping[str, Any], tenant_id: int | None) -> dict[str, Any]:
    """`stages` and `pack_keys` of a stored retrievalDetails, documents read in one query."""
    stages = details.get("stages") or []
    pack_keys = (details.get("pack") or {}).get("evidence_keys") or []
    keys = [c.get("evidence_key", "") for s in stages
            for c in [*(s.get("candidates") or []), *(s.get("dropped") or [])]]
    labels = _labels(tenant_id, [*keys, *pack_keys])

    def candidate(key: str, value: Any = None, *, chars: bool = False) -> Candidate:
        document = labels.get(doc_id) if (doc_id := document_of(key)) is not None else None
        if chars:  # stored as a JSON number like the scores: 14.0 reads as 14
            count = int(value) if isinstance(value, float) and value.is_integer() else value
            return Candidate(key, document, chars=count)
        return Candidate(key, document, score=value)

    return {
        "stages": [Stage(stage=s.get("stage", ""), elapsed_ms=s.get("elapsed_ms"),
                         note=s.get("note", ""),
                         candidates=[candidate(c.get("evidence_key", ""), c.get("score"),
                                               chars=s.get("stage") in CHARS_STAGES)
                                     for c in s.get("candidates") or []],
                         dropped=[replace(candidate(d.get("evidence_key", "")),
                                          reason=dropped_reason(str(d.get("reason", ""))))
                                  for d in s.get("dropped") or []])
                   for s in stages],
        "pack_keys": [candidate(key) for key in pack_keys],
    }
