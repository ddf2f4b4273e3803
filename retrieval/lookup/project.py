"""Projection of the internal LookupResult: the agent's view and the audit's view.

The agent sees only the RagToolResult contract (DESIGN.md "Agent-facing result", seed 000 §9):
no scores, traces, pack internals or store fields. The audit sees how the answer was made, but
not the raw query or excerpt bodies (seed 000 §9.1), which the canonical invocation keeps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from django.utils import timezone

from audit.types import InvocationRecord, ReadyEvidence, Replay
from datasets.documents.links import lines_json
from retrieval.index.milvus.expressions import metadata_clauses
from retrieval.types import EvidenceStatus, LookupResult, RelevanceLevel


def _number(value: float) -> float | None:
    # JSON has no NaN/Infinity; an audit row must always serialise.
    return round(value, 6) if math.isfinite(value) else None


def titled(title: str, breadcrumb: str) -> str:
    """A piece of evidence's heading as one line: `title > breadcrumb`."""
    return " > ".join(part for part in (title, breadcrumb) if part)


@dataclass(frozen=True)
class Copy:
    """Where the same text as a piece of evidence also is (the `EvidenceCopy` component)."""

    document_id: str
    source: str


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence as the agent sees it (the `Evidence` component)."""

    document_id: str  # the evidence key `<docId>#chunk-<n>`
    source: str
    title: str
    breadcrumb: str
    location: dict[str, Any] | None  # the page, slide or sheet it begins on
    commit: str
    excerpt: str
    also_in: tuple[Copy, ...] = ()  # lower-ranked copies of its text, collapsed into it
    url: str = ""  # where a person reads it (datasets/documents/links.py)
    lines: dict[str, int] | None = None  # {"start", "end"}: the lines of the file it spans
    # How current its document is (datasets/documents/validity.py), judged when it was served.
    updated_at: str | None = None
    reviewed_at: str | None = None
    valid_until: str | None = None
    owner: str = ""
    stale: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "also_in": [asdict(c) for c in self.also_in]}


@dataclass(frozen=True)
class RagToolResult:
    """What the agent sees of a lookup (the `RagToolResult` contract): built once per call."""

    evidence_status: EvidenceStatus
    tool_call_id: str
    query: str
    evidence: tuple[Evidence, ...]
    relevance_level: RelevanceLevel
    truncated: bool
    # EMPTY only: the datasets searched (id, name) and the topics they cover, nearest first.
    searched_datasets: tuple[tuple[int, str], ...] = ()
    covered_topics: tuple[str, ...] = ()

    @classmethod
    def of(cls, result: LookupResult) -> RagToolResult:
        ready = result.evidence_status is EvidenceStatus.READY
        empty = result.evidence_status is EvidenceStatus.EMPTY
        # EMPTY and UNAVAILABLE never carry evidence, whatever a stage left in the pack.
        items = result.pack.items if ready else ()
        today = timezone.localdate()
        return cls(
            evidence_status=result.evidence_status, tool_call_id=result.tool_call_id,
            query=result.query,
            evidence=tuple(Evidence(
                document_id=item.chunk.evidence_key, source=item.chunk.source,
                title=item.chunk.title, breadcrumb=item.chunk.breadcrumb,
                location=item.chunk.location.as_dict() if item.chunk.location else None,
                commit=item.chunk.commit, excerpt=item.excerpt,
                also_in=tuple(Copy(c.evidence_key, c.source) for c in item.chunk.also_in),
                url=item.chunk.url, lines=lines_json(item.chunk.lines),
                **(item.chunk.validity.as_dict(today) if item.chunk.validity else {}))
                for item in items),
            relevance_level=result.relevance_level if ready else RelevanceLevel.NONE,
            truncated=result.pack.truncated if ready else False,
            searched_datasets=result.searched if empty else (),
            covered_topics=result.covered_topics if empty else ())

    @property
    def returned_count(self) -> int:
        return len(self.evidence)

    def as_dict(self) -> dict[str, Any]:
        """The JSON body of REST and MCP."""
        return {"evidence_status": self.evidence_status.value,
                "tool_call_id": self.tool_call_id, "query": self.query,
                "evidence": [e.as_dict() for e in self.evidence],
                "relevance_level": self.relevance_level.value, "truncated": self.truncated,
                "returned_count": self.returned_count,
                "searched_datasets": [{"id": pk, "name": name}
                                      for pk, name in self.searched_datasets],
                "covered_topics": list(self.covered_topics)}


def trace_details(result: LookupResult) -> dict[str, Any]:
    """JSON-safe `retrievalDetails` for the audit: no excerpt bodies, no raw query."""
    return {
        "evidence_status": result.evidence_status.value,
        "relevance_level": result.relevance_level.value,
        "mode": result.mode,
        "filters": {
            "tenant": result.filters.tenant_id,
            "datasets": list(result.filters.dataset_ids),
            "category": result.filters.category,
            "excluded_documents": len(result.filters.excluded_doc_ids),
            # RagConfig.metadata_filters as the Milvus query compared them.
            "metadata": metadata_clauses(result.filters.metadata).removeprefix(" and "),
            # What the call narrowed to: the keys it gave and how many documents it named
            # (after those no lookup may serve here were left out); never the values.
            "call": {"fields": result.filters.call.field_names(),
                     "documents": (None if result.filters.call.documents is None
                                   else len(result.filters.call.documents))},
        },
        "hints": {
            "domains": list(result.hints.domains),
            "keywords": list(result.hints.keywords),
            "category_filter": result.hints.category_filter,
        },
        "retry": {"ran": result.retry.ran, "reason": result.retry.reason},
        "stages": [
            {
                "stage": trace.stage,
                "elapsed_ms": _number(trace.elapsed_ms),
                "note": trace.note,
                "candidates": [{"evidence_key": key, "score": _number(score)}
                               for key, score in trace.candidates],
                **({"dropped": [{"evidence_key": key, "reason": why}
                                for key, why in trace.dropped]} if trace.dropped else {}),
            }
            for trace in result.traces
        ],
        "pack": {
            "items": len(result.pack.items),
            "chars": result.pack.total_chars,
            "truncated": result.pack.truncated,
            "evidence_keys": [item.chunk.evidence_key for item in result.pack.items],
        },
        "graph": result.graph,
        "config_id": result.config_id,
        "config_version": result.config_version,
        "experiment": ({"id": result.experiment[0], "arm": result.experiment[1]}
                       if result.experiment else None),
        "error": result.error,
        "timings": {name: _number(ms) for name, ms in result.timings_ms.items()},
    }


def invocation_of(result: LookupResult, view: RagToolResult | None = None
                  ) -> InvocationRecord:
    """What the audit keeps of one answered call: what the agent saw (`view`, when the
    caller built it already) and how it was made."""
    seen = view or RagToolResult.of(result)
    ready = tuple(ReadyEvidence(item.chunk.evidence_key, item.chunk.dataset_id)
                  for item in result.pack.items
                  if result.evidence_status is EvidenceStatus.READY
                  and item.chunk.dataset_id is not None)
    return InvocationRecord(
        tenant_id=result.filters.tenant_id, tool_call_id=result.tool_call_id,
        session_id=result.session_id, query=result.query,
        evidence_status=result.evidence_status.value,
        relevance_level=seen.relevance_level.value, returned_count=seen.returned_count,
        config_version=result.config_version, error=result.error,
        details=trace_details(result), dataset_ids=result.filters.dataset_ids, ready=ready,
        experiment=result.experiment, topic_terms=result.topic_terms,
        config_id=result.config_id, narrowed=bool(result.filters.call),
        replay=Replay(result.index_version, tuple(
            {**evidence.as_dict(), "revision": item.chunk.revision,
             "dataset_id": item.chunk.dataset_id}
            for evidence, item in (zip(seen.evidence, result.pack.items, strict=True)
                                   if seen.evidence else ()))))


@dataclass(frozen=True)
class LookupViews:
    """One lookup and its two views, each built once: the agent's and the audit's."""

    result: LookupResult
    view: RagToolResult
    record: InvocationRecord

    @classmethod
    def of(cls, result: LookupResult) -> LookupViews:
        view = RagToolResult.of(result)
        return cls(result, view, invocation_of(result, view))
