"""Small builders for the typed stage data."""

from __future__ import annotations

from audit.types import InvocationRecord
from retrieval.lookup.project import invocation_of
from retrieval.types import (
    ContextPack,
    EvidenceStatus,
    LookupResult,
    PackedEvidence,
    QueryHints,
    RelevanceLevel,
    RetryDecision,
    ScoredChunk,
    SearchFilters,
    StageTrace,
)


def chunk(key: str = "42#chunk-0", content: str = "Some text.", **kw: object) -> ScoredChunk:
    doc_id, _, index = key.partition("#chunk-")
    fields: dict[str, object] = {
        "evidence_key": key, "doc_id": doc_id, "chunk_index": int(index) if index else None,
        "content": content, "title": "Title", "breadcrumb": "A > B", "source": "kb/a.md",
        "category": "ops", "original_rank": 1, "raw_score": 0.0328, "quality": 0.91,
        "dense_l2": 0.18, "hit_reasons": ("keyword:redis",), "dataset_id": 1,
    }
    fields.update(kw)
    return ScoredChunk(**fields)  # type: ignore[arg-type]


def lookup_result(status: EvidenceStatus = EvidenceStatus.READY, *,
                  relevance: RelevanceLevel = RelevanceLevel.PRECISE,
                  items: tuple[PackedEvidence, ...] | None = None,
                  truncated: bool = False) -> LookupResult:
    if items is None:
        items = (PackedEvidence(chunk("42#chunk-0", "Redis TTL body"), "Redis TTL body", False),
                 PackedEvidence(chunk("42#chunk-1", "Second body"), "Second body", False))
    pack = ContextPack(items=items, total_chars=sum(len(i.excerpt) for i in items),
                       truncated=truncated)
    return LookupResult(
        tool_call_id="call-1", session_id="s-1", query="how to set a redis ttl",
        evidence_status=status, relevance_level=relevance, pack=pack,
        hints=QueryHints(domains=("cache",), keywords=("redis",), category_filter="ops"),
        filters=SearchFilters(tenant_id=7, dataset_ids=(1, 2), category="ops"),
        mode="hybrid", retry=RetryDecision(ran=True, reason="filtered search below reference"),
        traces=(StageTrace("search", 12.5, (("42#chunk-0", 0.0328), ("9#chunk-2", float("nan")))),
                StageTrace("post_process", 0.4, (("42#chunk-0", 0.91),), note="kept 1")),
        config={"return_n": 5}, config_version=3, timings_ms={"total": 30.25, "embed": 8.0},
    )


def audit_record(*args: object, **kwargs: object) -> InvocationRecord:
    """What a tool call hands the audit, for `lookup_result(*args, **kwargs)`."""
    return invocation_of(lookup_result(*args, **kwargs))  # type: ignore[arg-type]
