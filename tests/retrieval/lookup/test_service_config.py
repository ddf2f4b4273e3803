"""RagConfig really drives the lookup: tenant default, dataset override, search mode."""

from __future__ import annotations

import uuid

import pytest

from retrieval.ragconfig.services import rag_config_update
from retrieval.ragconfig.settings import RagSettings
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    last_trace,
    lookup,
    ready,
)

KAFKA_LAG = "kafka consumer group lag keeps growing"


@pytest.mark.django_db
def test_the_tenant_default_and_a_dataset_override_change_what_a_lookup_returns(
        acme: Imported, acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    ops = [acme.dataset.pk]
    # Built-in defaults: the five matching kafka chunks are cut to two by the per-document
    # limit.
    assert len(evidence_ids(ready(lookup(client, KAFKA_LAG)))) == 2

    rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                      changed_by="test")
    assert len(evidence_ids(ready(lookup(client, KAFKA_LAG)))) == 1
    assert len(evidence_ids(ready(lookup(client, KAFKA_LAG, dataset_ids=ops)))) == 1

    rag_config_update(config=None, tenant=acme.tenant, dataset=acme.dataset,
                      values={"return_n": 4, "max_chunks_per_document": 4}, changed_by="test")
    narrowed = evidence_ids(ready(lookup(client, KAFKA_LAG, dataset_ids=ops)))
    assert len(narrowed) == len(set(narrowed)) == 4
    assert {acme.stem_of(e) for e in narrowed} == {"kafka"}
    # The override is for a search of that dataset alone; both datasets → the tenant default.
    assert len(evidence_ids(ready(lookup(client, KAFKA_LAG)))) == 1


@pytest.mark.django_db
def test_dense_and_hybrid_search_modes_both_answer(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, admin_secret = make_key("acme", role="admin")
    tool, admin = client_for(secret), client_for(admin_secret)

    def answer(sid: str) -> tuple[set[str | None], dict[str, object], list[float]]:
        body = ready(lookup(tool, KAFKA_LAG, session_id=sid))
        trace = last_trace(admin, sid)
        scores = [c["score"] for s in trace["stages"] if s["stage"].startswith("retrieve")
                  for c in s["candidates"]]
        return {acme.stem_of(e) for e in evidence_ids(body)}, trace, scores

    stems, trace, scores = answer(f"s-{uuid.uuid4().hex}")
    assert stems == {"kafka"} and trace["mode"] == "hybrid"
    assert RagSettings().fusion_method == "ADAPTIVE"
    # Fused scores: the normalised arms combined, higher is better, within [0, 1].
    assert scores and scores == sorted(scores, reverse=True) and 0 <= scores[-1] <= scores[0] <= 1

    rag_config_update(config=None, tenant=acme.tenant, values={"enabled_retrievers": ["VECTOR"]},
                      changed_by="test")
    stems, trace, scores = answer(f"s-{uuid.uuid4().hex}")
    assert stems == {"kafka"} and trace["mode"] == "dense"
    # Dense scores are L2 distances: smaller is closer, the list ascends.
    assert len(set(scores)) > 1 and scores == sorted(scores)
