"""fetch_evidence: the section an evidence id belongs to, to read more than its excerpt.

A section is the run of a document's chunks under one breadcrumb (one heading path, on one
page, slide or sheet when the original has them). Its text is its chunks' text joined, each
chunk's overlap with the one before it said once, so what an agent reads is the indexed
(redacted) text, never the raw upload. A section longer than the budget is read from the
asked chunk on (then back, when its end comes first); `next` and `previous` name the chunks
just outside what was returned, to read on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

from audit.canonical import canonical_store
from audit.types import InvocationRecord, ReadyEvidence
from datasets.evidence import EvidenceKey
from datasets.ingestion.limits import shorten
from datasets.ingestion.locations import Location
from datasets.selectors import (
    ChunkText,
    chunks_from,
    db_id,
    section_start,
    servable_document,
)
from kbplatform.errors import NotFound, ServiceUnavailable
from retrieval.types import EvidenceStatus, call_id

PARAGRAPH = "\n\n"  # between two chunks that do not overlap
FETCH_CHARS = (500, 6_000, 20_000)  # a fetch's max_chars: least, default, most
# What may precede an overlap's start: the splitter starts one at a line or a sentence.
_BOUNDARY = frozenset("。！？；\"'”’)）」』")


@dataclass(frozen=True)
class FetchRequest:
    tenant_id: int
    readable: tuple[int, ...]  # the datasets the key may read
    document_id: str  # `{docId}#chunk-{n}`, or `{docId}` (with `section`, else its start)
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
    text: str = ""  # retrieved text: untrusted data
    document_ids: tuple[str, ...] = ()  # the chunks the text holds, in order: each citable
    truncated: bool = False  # the section goes on beyond the text (see previous / next)
    previous: str = ""  # the chunk just before the text ("" at the document's start)
    next: str = ""  # the chunk just after it ("" at the document's end)

    def as_dict(self) -> dict[str, Any]:
        """The JSON body of REST and MCP."""
        return {**asdict(self), "evidence_status": self.evidence_status.value,
                "document_ids": list(self.document_ids)}


@dataclass(frozen=True)
class Fetched:
    section: FetchedSection
    record: InvocationRecord  # the audit row's content


def fetch_evidence(request: FetchRequest) -> Fetched:
    """The section, recorded first as the call's canonical invocation (so the evidence guard
    confirms its chunks for this call and its session). NotFound when the id names nothing
    this key may read, the same words whatever the reason."""
    asked = request.document_id
    key = EvidenceKey.parse(asked)
    doc_id = db_id(key.doc_id if key else asked)
    missing = NotFound(f"no evidence {asked!r} this key may read")
    document = servable_document(tenant_id=request.tenant_id, dataset_ids=request.readable,
                                 doc_id=doc_id) if doc_id else None
    if document is None:
        raise missing
    anchor = key.chunk_index if key else \
        section_start(document_pk=document.pk, breadcrumb=request.section) \
        if request.section else 0
    if anchor is None or anchor >= document.chunk_count:
        raise missing
    run = _section(document.pk, anchor, request.max_chars)
    if not run.rows:
        raise missing
    keys = tuple(str(EvidenceKey(document.doc_key, row[0])) for row in run.rows)
    first, last = run.rows[0][0], run.rows[-1][0]
    location = Location.stored(run.rows[0][3].get("location"))
    section = FetchedSection(
        evidence_status=EvidenceStatus.READY, tool_call_id=call_id(request.tool_call_id),
        document_id=str(EvidenceKey(document.doc_key, anchor)), source=document.source_path,
        title=document.title, breadcrumb=run.rows[0][1],
        location=location.as_dict() if location else None, commit=document.source_commit,
        text=run.text, document_ids=keys, truncated=run.truncated,
        previous=str(EvidenceKey(document.doc_key, first - 1)) if first > 0 else "",
        next=str(EvidenceKey(document.doc_key, last + 1))
        if last + 1 < document.chunk_count else "")
    record = InvocationRecord(
        tenant_id=request.tenant_id, tool_call_id=section.tool_call_id,
        session_id=request.session_id, query="",
        evidence_status=EvidenceStatus.READY.value, relevance_level="NONE",
        returned_count=len(keys), config_version=None, error="",
        details={"fetched": {"document_id": section.document_id, "chunks": [first, last],
                             "chars": len(run.text), "truncated": run.truncated}},
        dataset_ids=(document.dataset_id,),
        ready=tuple(ReadyEvidence(k, document.dataset_id) for k in keys),
        tool_name="fetch_evidence")
    try:
        canonical_store(record)
    except ServiceUnavailable:
        section = FetchedSection(EvidenceStatus.UNAVAILABLE, section.tool_call_id,
                                 section.document_id)
        record = replace(record, evidence_status=EvidenceStatus.UNAVAILABLE.value,
                         returned_count=0, details={},
                         error="the canonical invocation store is unavailable")
    # The audit row is no lookup's: no served evidence (the cited rates count what lookups
    # served; a citation of a chunk a lookup of the session served counts for that lookup),
    # no dataset searched (the per-dataset figures count lookups).
    return Fetched(section, replace(record, ready=(), dataset_ids=()))


@dataclass(frozen=True)
class _Run:
    rows: tuple[ChunkText, ...]
    text: str
    truncated: bool


def _section(document_pk: int, anchor: int, budget: int) -> _Run:
    """The chunks of the anchor's section that fit `budget` characters, joined: from the
    anchor forward, then backward; the anchor alone cut to the budget when it is longer."""
    ahead = chunks_from(document_pk=document_pk, start=anchor, step=1)
    first = next(ahead, None)
    if first is None or first[0] != anchor:
        return _Run((), "", False)
    breadcrumb = first[1]
    if len(first[2]) > budget:
        return _Run((first,), shorten(first[2], budget), True)
    rows: deque[ChunkText] = deque([first])
    text = first[2]
    truncated = False
    for row in ahead:
        if row[1] != breadcrumb:
            break
        joined = text + _tail(text, row[2])
        if len(joined) > budget:
            truncated = True
            break
        rows.append(row)
        text = joined
    if anchor > 0 and not truncated:  # the section's end came first: read back
        for row in chunks_from(document_pk=document_pk, start=anchor - 1, step=-1):
            if row[1] != breadcrumb:
                break
            joined = _head(row[2], text) + text
            if len(joined) > budget:
                truncated = True
                break
            rows.appendleft(row)
            text = joined
    return _Run(tuple(rows), text, truncated)


def _tail(before: str, chunk: str) -> str:
    """What `chunk` adds after `before`: without the start it repeats of `before`'s end (the
    splitter's overlap), else after a paragraph break."""
    overlap = _overlap(before, chunk)
    return chunk[overlap:] if overlap else PARAGRAPH + chunk


def _head(chunk: str, after: str) -> str:
    """What `chunk` adds before `after`."""
    overlap = _overlap(chunk, after)
    return chunk[: len(chunk) - overlap] if overlap else chunk + PARAGRAPH


def _overlap(before: str, after: str) -> int:
    """The longest end of `before` that `after` starts with, where it starts a line or a
    sentence of `before` (the splitter overlaps whole sentences or lines); 0 for none."""
    if not after:
        return 0
    at = before.find(after[0], max(len(before) - len(after), 0))
    while at != -1:
        starts = at == 0 or before[at - 1].isspace() or before[at - 1] in _BOUNDARY
        if starts and after.startswith(before[at:]):
            return len(before) - at
        at = before.find(after[0], at + 1)
    return 0
