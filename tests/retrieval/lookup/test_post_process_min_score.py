"""min_score as its help text says (RagConfig.min_score): the vector similarity a retriever's
candidate needs; a candidate BM25 matched has its own witness and is kept, in the hybrid search
as with BM25 alone. Through the REST tool endpoint, on a real index."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.conftest import (
    RUNBOOKS_A,
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    import_runbooks,
    last_trace,
    lookup,
)

JSTACK = """---
title: A Java thread burning CPU
domain: jvm
keywords: [jstack]
category: jvm
---
# A Java thread burning CPU

## Finding the thread

Convert the busiest thread id from top to hex and look it up in the jstack dump: the thread
"main" nid=0x5d09 runnable is the one spinning in HashMap.get.
"""


@pytest.fixture
def ops(store: Any, db: None, tmp_path: Path) -> Imported:
    return import_runbooks(tmp_path / "ops", tenant="acme", dataset="ops",
                           files={**RUNBOOKS_A, "jstack.md": JSTACK})


def ask(imported: Imported, make_key: MakeKey, query: str,
        **values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    rag_config_update(config=None, tenant=imported.tenant, values=values, changed_by="test")
    session = f"s-{uuid.uuid4().hex}"
    response = lookup(client_for(make_key("acme")[1]), query, session_id=session)
    assert response.status_code == 200, response.content
    return response.json(), last_trace(client_for(make_key("acme", role="admin")[1]), session)


def retrieved_documents(imported: Imported, trace: dict[str, Any]) -> set[str | None]:
    """The documents of the candidates the retriever kept (after min_score)."""
    [stage] = [s for s in trace["stages"] if s["stage"].startswith("retrieve")]
    return {imported.stem_of(c["evidence_key"]) for c in stage["candidates"]}


@pytest.mark.django_db
@pytest.mark.parametrize("search", [
    {"enabled_retrievers": ["HYBRID"]},  # the app fuses the two arms
    {"enabled_retrievers": ["VECTOR", "BM25"], "retrieval_execution_mode": "HYBRID"},  # Milvus
], ids=["app-fusion", "milvus-fusion"])
def test_min_score_keeps_what_bm25_matched_and_drops_what_only_the_vector_found(
        ops: Imported, make_key: MakeKey, search: dict[str, Any]) -> None:
    body, _ = ask(ops, make_key, "0x5d09", enabled_retrievers=["BM25"], min_score=0.9)
    assert body["evidence_status"] == "READY"
    bm25 = {ops.stem_of(e) for e in evidence_ids(body)}
    assert bm25 == {"jstack"}

    body, trace = ask(ops, make_key, "0x5d09", min_score=0.0, **search)
    assert retrieved_documents(ops, trace) > {"jstack"}  # the vector's nearest come along

    body, trace = ask(ops, make_key, "0x5d09", min_score=0.9)
    assert body["evidence_status"] == "READY", trace["stages"]
    assert {ops.stem_of(e) for e in evidence_ids(body)} == bm25
    # Only the chunk BM25 matched is left: the vector's far neighbours are below 0.9.
    assert retrieved_documents(ops, trace) == {"jstack"}


@pytest.mark.django_db
def test_min_score_still_drops_a_dense_candidate_below_it_in_the_hybrid_search(
        ops: Imported, make_key: MakeKey) -> None:
    # No word of this question is in any runbook: every candidate came from the vector alone.
    query = "quarterly tax paperwork deadlines"
    _, trace = ask(ops, make_key, query, min_score=0.0)
    assert retrieved_documents(ops, trace)
    body, trace = ask(ops, make_key, query, min_score=0.9)
    assert body["evidence_status"] == "EMPTY"
    assert retrieved_documents(ops, trace) == set()
