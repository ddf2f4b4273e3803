"""One question in the admin's hit-testing page: the lookup as the tool runs it, with the
serving config or another, and several answers side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from datasets.tenancy.permissions import PLATFORM
from retrieval.lookup.project import RagToolResult, trace_details
from retrieval.lookup.service import lookup_knowledge
from retrieval.types import CallFilters, SearchFilters


@dataclass(frozen=True)
class HitTest:
    body: dict[str, Any]  # the agent-facing result, exactly as the REST tool returns it
    details: dict[str, Any]  # its retrievalDetails: stages, candidates, gate, pack, timings


def hit_test_question(*, tenant_id: int, dataset_ids: Sequence[int], query: str,
                      overrides: dict[str, Any] | None = None, version: int | None = None,
                      narrowed: CallFilters | None = None) -> HitTest:
    """One lookup as the tool runs it, with the serving config, or with every setting of
    `overrides` (an earlier `version`'s, or a draft's: version None), narrowed as a call's
    `filters` narrow it; nothing is audited or stored."""
    result = lookup_knowledge(filters=SearchFilters(tenant_id=tenant_id,
                                                    dataset_ids=tuple(dataset_ids),
                                                    call=narrowed or CallFilters(),
                                                    access=PLATFORM),
                              query=query, overrides=overrides)
    if overrides is not None:
        result = replace(result, config_version=version)
    return HitTest(RagToolResult.of(result).as_dict(), trace_details(result))


def compared(*sides: tuple[str, HitTest]) -> list[dict[str, Any]]:
    """Side by side: for each (label, hit test), its answer as JSON text and each piece of
    evidence with whether the other sides hand it out too, and at which rank."""
    ranks = [{e["document_id"]: n for n, e in enumerate(test.body["evidence"], 1)}
             for _, test in sides]
    columns = []
    for index, (label, test) in enumerate(sides):
        others = [r for i, r in enumerate(ranks) if i != index]
        columns.append({
            "label": label, "status": test.body["evidence_status"],
            "relevance_level": test.body["relevance_level"],
            "config_version": test.details.get("config_version"),
            "evidence": [{"document_id": e["document_id"], "source": e["source"], "rank": n,
                          "elsewhere": [r.get(e["document_id"]) for r in others],
                          "same": all(r.get(e["document_id"]) == n for r in others)}
                         for n, e in enumerate(test.body["evidence"], 1)]})
    return columns
