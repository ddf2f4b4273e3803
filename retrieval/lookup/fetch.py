"""fetch_evidence: the section an evidence id belongs to, to read more than its excerpt.

A section is the run of a document's chunks under one breadcrumb (one heading path, on one
page, slide or sheet when the original has them). Its text is its chunks' text joined, each
chunk's overlap with the one before it (as the splitter recorded it) said once: the indexed,
redacted text, never the raw upload. The asked chunk is always whole; a section that does
not fit the budget is read from the asked chunk on, and `next` / `previous` name the chunks
just outside what was returned, so reading on by `next` never serves a chunk twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.canonical import canonical_get, canonical_store
from audit.types import InvocationRecord, ReadyEvidence, Replay
from datasets.documents.evidence import EvidenceKey
from datasets.documents.links import DocumentLink, lines_json
from datasets.documents.selectors import (
    ChunkText,
    chunk_anchors,
    chunk_count_locked,
    chunk_of_anchor,
    chunks_from,
    db_id,
    section_start,
    servable_document,
)
from datasets.documents.validity import Validity
from datasets.ingestion.limits import shorten
from datasets.ingestion.locations import Location
from datasets.tenancy.permissions import Access
from kbplatform.errors import ApiError, ErrorCode, NotFound, ServiceUnavailable
from retrieval.lookup.project import Evidence
from retrieval.types import EvidenceStatus, call_id

PARAGRAPH = "\n\n"  # between two chunks that do not overlap
# A fetch's max_chars: the least, the default and the most (the asked chunk alone is cut
# only past the most).
FETCH_MIN_CHARS, FETCH_DEFAULT_CHARS, FETCH_MAX_CHARS = 500, 6_000, 20_000


@dataclass(frozen=True)
class FetchRequest:
    tenant_id: int
    readable: tuple[int, ...]  # the datasets the key may read
    access: Access  # for whom: a document restricted to others is not found
    document_id: str  # an evidence id, or `{docId}` (with `section`, else its start)
    max_chars: int
    section: str = ""  # a breadcrumb, as evidence carries it
    tool_call_id: str = ""
    session_id: str = ""


@dataclass(frozen=True)
class FetchedSection:
    """What the agent reads of one fetch (the `FetchEvidenceResult` contract)."""

    evidence_status: EvidenceStatus  # READY, or UNAVAILABLE when it could not be recorded
    tool_call_id: str
    document_id: str  # the chunk asked for (the section's start, for a bare document id)
    source: str = ""
    title: str = ""
    breadcrumb: str = ""
    location: dict[str, int | str] | None = None  # where the text begins in the original
    commit: str = ""
    url: str = ""  # where a person reads it (datasets/documents/links.py)
    lines: dict[str, int] | None = None  # {"start", "end"}: the lines of the file it spans
    # How current its document is (datasets/documents/validity.py), as evidence says it.
    updated_at: str | None = None
    reviewed_at: str | None = None
    valid_until: str | None = None
    owner: str = ""
    stale: bool = False
    text: str = ""  # retrieved text: untrusted data
    document_ids: tuple[str, ...] = ()  # the chunks the text holds, in order: each citable
    truncated: bool = False  # the section goes on beyond the text (see previous / next)
    previous: str = ""  # the chunk just before the text ("" at the document's start)
    next: str = ""  # the chunk just after it ("" at the document's end)

    def as_dict(self) -> dict[str, Any]:
        """The JSON body of REST and MCP."""
        return {**asdict(self), "evidence_status": self.evidence_status.value,
                "document_ids": list(self.document_ids)}

    def replayed(self, *, revision: str, dataset_id: int) -> dict[str, Any]:
        """The section as its replay keeps it: one piece of evidence, the text its excerpt."""
        piece = Evidence(document_id=self.document_id, source=self.source, title=self.title,
                         breadcrumb=self.breadcrumb, location=self.location,
                         commit=self.commit, excerpt=self.text, url=self.url, lines=self.lines,
                         updated_at=self.updated_at, reviewed_at=self.reviewed_at,
                         valid_until=self.valid_until, owner=self.owner, stale=self.stale)
        return {**piece.as_dict(), "revision": revision, "dataset_id": dataset_id}


@dataclass(frozen=True)
class Fetched:
    section: FetchedSection
    record: InvocationRecord  # the audit row's content


def fetch_evidence(request: FetchRequest) -> Fetched:
    """The section, recorded first as the call's canonical invocation (so the evidence guard
    confirms its chunks for this call and its session). NotFound when the id names nothing
    this key may read, the same words whatever the reason; a call id already stored (an
    earlier call's) is refused, 409."""
    tool_call_id = call_id(request.tool_call_id)
    try:
        reused = bool(request.tool_call_id) and canonical_get(
            tenant_id=request.tenant_id, tool_call_id=tool_call_id) is not None
    except ServiceUnavailable:
        return _unavailable(request, tool_call_id)
    if reused:
        # Stored, it would replace what the guard confirms for that call (a lookup's).
        raise ApiError(f"tool_call_id {tool_call_id!r} names an earlier call: give this "
                       "call its own id, or none", code=ErrorCode.DUPLICATE, status_code=409)
    asked = request.document_id
    key = EvidenceKey.parse(asked)
    doc_id = db_id(key.doc_id if key else asked)
    missing = NotFound(f"no evidence {asked!r} this key may read")
    document = servable_document(tenant_id=request.tenant_id, dataset_ids=request.readable,
                                 doc_id=doc_id, access=request.access) if doc_id else None
    if document is None:
        raise missing
    with transaction.atomic():  # the chunks of one indexing, whatever runs meanwhile
        count = chunk_count_locked(document_pk=document.pk)
        if key and key.anchor:
            start = chunk_of_anchor(document_pk=document.pk, anchor=key.anchor)
        elif key:
            start = key.chunk_index
        elif request.section:
            start = section_start(document_pk=document.pk, breadcrumb=request.section)
        else:
            start = 0
        run = _section(document.pk, start, request.max_chars) \
            if start is not None and start < count else None
        if run:
            first, last = run.rows[0].chunk_index, run.rows[-1].chunk_index
            outside = chunk_anchors(document_pk=document.pk, indexes=(first - 1, last + 1))
    if not run:
        raise missing
    rows = run.rows

    def served(index: int, anchor: str) -> str:
        return str(EvidenceKey.served(document.doc_key, index, anchor))

    keys = tuple(served(row.chunk_index, row.anchor) for row in rows)
    location = Location.stored(rows[0].location)
    lines = (rows[0].lines[0], rows[-1].lines[1]) \
        if rows[0].lines and rows[-1].lines else None
    link = DocumentLink(document.pk, document.format, document.url)
    section = FetchedSection(
        evidence_status=EvidenceStatus.READY, tool_call_id=tool_call_id,
        document_id=keys[run.asked],
        source=document.source_path, title=document.title, breadcrumb=rows[0].breadcrumb,
        location=location.as_dict() if location else None, commit=document.source_commit,
        url=link.evidence_url(location=location, lines=lines),
        lines=lines_json(lines), text=run.text,
        document_ids=keys, truncated=run.truncated,
        previous=served(first - 1, outside[first - 1]) if first - 1 in outside else "",
        next=served(last + 1, outside[last + 1]) if last + 1 in outside else "",
        **Validity(document.content_updated_at, document.reviewed_at, document.valid_until,
                   document.owner).as_dict(timezone.localdate()))
    record = InvocationRecord(
        tenant_id=request.tenant_id, tool_call_id=section.tool_call_id,
        session_id=request.session_id, query="",
        evidence_status=EvidenceStatus.READY.value, relevance_level="NONE",
        returned_count=len(keys), config_version=None, error="",
        details={"fetched": {"document_id": section.document_id, "chunks": [first, last],
                             "chars": len(run.text), "truncated": run.truncated}},
        ready=tuple(ReadyEvidence(k, document.dataset_id) for k in keys),
        tool_name="fetch_evidence", replay=Replay(None, (section.replayed(
            revision=document.indexed_hash, dataset_id=document.dataset_id),)))
    try:
        canonical_store(record)
    except ServiceUnavailable:
        return _unavailable(request, tool_call_id)
    # The audit row is no lookup's: no served evidence (the cited rates count what lookups
    # served; a citation of a chunk a lookup of the session served counts for that lookup),
    # no dataset searched (the per-dataset figures count lookups).
    return Fetched(section, replace(record, ready=()))


def _unavailable(request: FetchRequest, tool_call_id: str) -> Fetched:
    """The canonical store is down: nothing is handed out that the guard could not confirm."""
    error = "the canonical invocation store is unavailable"
    return Fetched(
        FetchedSection(EvidenceStatus.UNAVAILABLE, tool_call_id, request.document_id),
        InvocationRecord(
            tenant_id=request.tenant_id, tool_call_id=tool_call_id,
            session_id=request.session_id, query="",
            evidence_status=EvidenceStatus.UNAVAILABLE.value, relevance_level="NONE",
            returned_count=0, config_version=None, error=error, details={},
            tool_name="fetch_evidence"))


@dataclass(frozen=True)
class _Run:
    rows: tuple[ChunkText, ...]
    asked: int  # the asked chunk's place in `rows`
    text: str
    truncated: bool  # the section goes on before or after `rows`


def _section(document_pk: int, anchor: int, budget: int) -> _Run | None:
    """The anchor's chunk whole, then the chunks after it under its breadcrumb while they fit
    `budget` characters; when the section's end comes first, those before it too, if all the
    way to the section's start fits (else none of them: `previous` reads them)."""
    ahead = chunks_from(document_pk=document_pk, start=anchor, step=1)
    first = next(ahead, None)
    if first is None:
        return None
    if len(first.content) > FETCH_MAX_CHARS:
        return _Run((first,), 0, shorten(first.content, FETCH_MAX_CHARS), True)
    rows = [first]
    size = len(first.content)
    ended = True  # the section ends after `rows`
    for row in ahead:
        if row.breadcrumb != first.breadcrumb:
            break
        if size + _gain(row) > budget:
            ended = False
            break
        rows.append(row)
        size += _gain(row)
    if not ended:
        return _Run(tuple(rows), 0, _joined(rows), True)
    before: list[ChunkText] = []
    for row in chunks_from(document_pk=document_pk, start=anchor - 1, step=-1):
        if row.breadcrumb != first.breadcrumb:
            break
        head = (before or rows)[0]  # joined after `row` now: its gain replaces its content
        size += len(row.content) + _gain(head) - len(head.content)
        if size > budget:
            return _Run(tuple(rows), 0, _joined(rows), True)
        before.insert(0, row)
    whole = [*before, *rows]
    return _Run(tuple(whole), len(before), _joined(whole), False)


def _gain(row: ChunkText) -> int:
    """What `row` adds to the text after the chunk before it: its content less the overlap it
    starts with, else after a paragraph break."""
    return len(row.content) - row.overlap if row.overlap else len(PARAGRAPH) + len(row.content)


def _joined(rows: list[ChunkText]) -> str:
    """The chunks' text, each overlap said once (a chunk indexed before overlaps were kept
    repeats it, after a paragraph break)."""
    return "".join([rows[0].content, *(row.content[row.overlap:] if row.overlap
                                       else PARAGRAPH + row.content for row in rows[1:])])
