"""Projection of the internal LookupResult: the agent's view and the audit's view.

The agent sees only the RagToolResult contract (DESIGN.md "Agent-facing result", seed 000 §9):
no scores, traces, pack internals or store fields. The audit sees how the answer was made, but
not the raw query or excerpt bodies (seed 000 §9.1), which the canonical invocation keeps.
"""

from __future__ import annotations

import math
from typing import Any

from audit.types import InvocationRecord, ReadyEvidence
from retrieval.index.milvus.expressions import metadata_clauses
from retrieval.types import EvidenceStatus, LookupResult, RelevanceLevel


def _number(value: float) -> float | None:
    # JSON has no NaN/Infinity; an audit row must always serialise.
    return round(value, 6) if math.isfinite(value) else None


class RagResultProjector:
    """LookupResult → the agent-facing RagToolResult dict."""

    def project(self, result: LookupResult) -> dict[str, Any]:
        ready = result.evidence_status is EvidenceStatus.READY
        # EMPTY and UNAVAILABLE never carry evidence, whatever a stage left in the pack.
        items = result.pack.items if ready else ()
        evidence = [
            {
                "document_id": item.chunk.evidence_key,
                "source": item.chunk.source,
                "title": item.chunk.title,
                "breadcrumb": item.chunk.breadcrumb,
                "location": item.chunk.location.as_dict() if item.chunk.location else None,
                "commit": item.chunk.commit,
                "excerpt": item.excerpt,
            }
            for item in items
        ]
        return {
            "evidence_status": result.evidence_status.value,
            "tool_call_id": result.tool_call_id,
            "query": result.query,
            "evidence": evidence,
            "relevance_level": (result.relevance_level if ready else RelevanceLevel.NONE).value,
            "truncated": result.pack.truncated if ready else False,
            "returned_count": len(evidence),
        }


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


def invocation_of(result: LookupResult) -> InvocationRecord:
    """What the audit keeps of one answered call: what the agent saw and how it was made."""
    seen = RagResultProjector().project(result)
    ready = tuple(ReadyEvidence(item.chunk.evidence_key, item.chunk.dataset_id)
                  for item in result.pack.items
                  if result.evidence_status is EvidenceStatus.READY
                  and item.chunk.dataset_id is not None)
    return InvocationRecord(
        tenant_id=result.filters.tenant_id, tool_call_id=result.tool_call_id,
        session_id=result.session_id, query=result.query,
        evidence_status=result.evidence_status.value, relevance_level=seen["relevance_level"],
        returned_count=seen["returned_count"], config_version=result.config_version,
        error=result.error, details=trace_details(result),
        dataset_ids=result.filters.dataset_ids, ready=ready,
        experiment=result.experiment, topic_terms=result.topic_terms,
        config_id=result.config_id)
