"""The agent-facing projection and the audit details (no database)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from retrieval.lookup.project import Copy, Evidence, RagToolResult, trace_details
from retrieval.tools.serializers import EvidenceCopyOutput, EvidenceOutput, RagToolResultOutput
from retrieval.types import EvidenceStatus, RelevanceLevel
from tests.retrieval.builders import lookup_result
from tests.retrieval.conftest import CONTRACT_KEYS, EVIDENCE_KEYS

FORBIDDEN = ("score", "quality", "trace", "rank", "l2", "pack", "vector", "metadata", "reason",
             "config", "milvus", "hint")


def all_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in all_keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in all_keys(v)]
    return []


def test_projection_is_exactly_the_contract() -> None:
    out = RagToolResult.of(lookup_result()).as_dict()
    assert set(out) == CONTRACT_KEYS
    assert out["evidence_status"] == "READY" and out["relevance_level"] == "PRECISE"
    assert (out["tool_call_id"], out["query"]) == ("call-1", "how to set a redis ttl")
    assert out["returned_count"] == 2 == len(out["evidence"])
    assert out["evidence"][0] == {"document_id": "42#chunk-0", "source": "kb/a.md",
                                  "title": "Title", "breadcrumb": "A > B",
                                  "location": None, "commit": "",
                                  "excerpt": "Redis TTL body", "also_in": [], "url": "",
                                  "lines": None, "updated_at": None, "reviewed_at": None,
                                  "valid_until": None, "owner": "", "stale": False}
    assert all(set(item) == EVIDENCE_KEYS for item in out["evidence"])
    json.dumps(out)


def test_the_typed_result_is_the_documented_contract_field_for_field() -> None:
    """The REST schema, the tool schemas and MCP's output schema read the serializers; the
    body is the dataclasses': the two declare the same fields in the same order."""
    assert [f.name for f in fields(Evidence)] == list(EvidenceOutput().fields)
    assert [f.name for f in fields(Copy)] == list(EvidenceCopyOutput().fields)
    names = [f.name for f in fields(RagToolResult)]
    names.insert(names.index("truncated") + 1, "returned_count")  # a property
    assert names == list(RagToolResultOutput().fields)
    assert list(RagToolResult.of(lookup_result()).as_dict()) == list(RagToolResultOutput().fields)


def test_no_score_or_trace_key_anywhere() -> None:
    out = RagToolResult.of(lookup_result()).as_dict()
    for key in all_keys(out):
        assert not any(word in key.lower() for word in FORBIDDEN), key
    # nor values of internal fields leaking through
    text = json.dumps(out)
    assert "0.0328" not in text and "keyword:redis" not in text and "s-1" not in text


def test_document_id_is_the_chunk_level_evidence_key() -> None:
    out = RagToolResult.of(lookup_result()).as_dict()
    assert [e["document_id"] for e in out["evidence"]] == ["42#chunk-0", "42#chunk-1"]


def test_truncated_comes_from_the_pack() -> None:
    assert RagToolResult.of(lookup_result(truncated=True)).as_dict()["truncated"] is True


def test_empty_and_unavailable_carry_no_evidence_and_stay_distinct() -> None:
    empty = RagToolResult.of(
        lookup_result(EvidenceStatus.EMPTY, relevance=RelevanceLevel.NONE, items=())).as_dict()
    failed = RagToolResult.of(lookup_result(EvidenceStatus.UNAVAILABLE)).as_dict()
    assert (empty["evidence_status"], failed["evidence_status"]) == ("EMPTY", "UNAVAILABLE")
    for out in (empty, failed):
        assert set(out) == CONTRACT_KEYS
        assert (out["evidence"], out["returned_count"], out["relevance_level"]) == (
            [], 0, "NONE")


def test_trace_details_shape() -> None:
    details = trace_details(lookup_result())
    assert details["mode"] == "hybrid"
    assert details["filters"] == {"tenant": 7, "datasets": [1, 2], "category": "ops",
                                  "excluded_documents": 0, "metadata": "",
                                  "call": {"fields": [], "documents": None}}
    assert details["retry"] == {"ran": True, "reason": "filtered search below reference"}
    assert [s["stage"] for s in details["stages"]] == ["search", "post_process"]
    assert details["stages"][0]["candidates"][0] == {"evidence_key": "42#chunk-0",
                                                     "score": 0.0328}
    assert details["pack"] == {"items": 2, "chars": len("Redis TTL body") + len("Second body"),
                               "truncated": False,
                               "evidence_keys": ["42#chunk-0", "42#chunk-1"]}
    assert details["timings"] == {"total": 30.25, "embed": 8.0}
    assert (details["evidence_status"], details["config_version"]) == ("READY", 3)


def test_trace_details_hold_no_query_or_excerpt_and_are_strict_json() -> None:
    details = trace_details(lookup_result())
    text = json.dumps(details, allow_nan=False)  # NaN scores became null
    assert "how to set a redis ttl" not in text
    assert "Redis TTL body" not in text and "Second body" not in text
    assert details["stages"][0]["candidates"][1]["score"] is None
