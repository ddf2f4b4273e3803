"""The graph's parts: the registry's contract, the builder, aggregation and the quality score."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from retrieval.lookup.graph.aggregate import Aggregator, CandidateList
from retrieval.lookup.graph.plan import build_graph, fallback_graph
from retrieval.lookup.graph.quality import QualityAssessor, query_terms
from retrieval.lookup.graph.registry import (
    NestedGraphError,
    Param,
    RetrieverCall,
    RetrieverEvent,
    RetrieverSpec,
    run_retriever,
)
from retrieval.lookup.graph.retrievers import REGISTRY, default_registry
from retrieval.lookup.service import lookup_knowledge
from retrieval.ragconfig.config import RagConfigConverter
from retrieval.ragconfig.settings import RagSettings
from retrieval.types import ScoredChunk, SearchFilters, SearchHit
from tests.retrieval.conftest import Imported

FILTERS = SearchFilters(tenant_id=1, dataset_ids=(1,))


def hit(doc: int, chunk: int, rank: int, *, l2: float | None = None,
        score: float = 0.0) -> SearchHit:
    return SearchHit(chunk_id=f"{doc}#chunk-{chunk}", content="", rank=rank, score=score,
                     metadata={"docId": str(doc), "chunkIndex": chunk}, dense_l2=l2)


class TitleRetriever:
    """What adding a retriever takes: a class with a spec and a `retrieve` method."""

    spec: ClassVar[RetrieverSpec] = RetrieverSpec(
        name="TITLE", needs_vector=False, params=(Param("boost", float, 1.0),))

    def __init__(self, **_: Any) -> None:
        pass

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
        return [hit(7, 0, 1, score=float(call.arguments["boost"]))]


def test_a_retriever_is_one_class_and_one_registration() -> None:
    registry = default_registry()
    registry.register(TitleRetriever.spec, TitleRetriever)
    assert registry.names() == ("VECTOR", "BM25", "HYBRID", "ADVANCED", "TITLE")
    events: list[RetrieverEvent] = []
    retriever = registry.inner("TITLE")
    arguments = retriever.spec.arguments({"boost": 2})
    [found] = run_retriever(retriever, RetrieverCall("q", None, FILTERS, 5, arguments),
                            [events.append])
    assert found.score == 2.0 and [e.kind for e in events] == ["start", "finish"]
    with pytest.raises(ValueError, match="registered already"):
        registry.register(TitleRetriever.spec, TitleRetriever)


def test_parameters_are_declared_typed_and_defaulted() -> None:
    spec = REGISTRY.spec("HYBRID")
    assert spec.arguments({}) == {"rrf_k": 5, "dense_weight": 0.3, "bm25_weight": 0.7,
                                  "fusion": "app", "method": "ADAPTIVE"}
    with pytest.raises(TypeError, match="does not accept"):
        spec.arguments({"k": 3})
    with pytest.raises(TypeError, match="rrf_k must be int"):
        spec.arguments({"rrf_k": True})  # a bool is not an int here
    assert spec.thread_safe and spec.parallel and REGISTRY.spec("BM25").needs_vector is False


def test_a_failing_retriever_tells_its_listeners() -> None:
    class Broken(TitleRetriever):
        def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
            raise RuntimeError("index gone")

    events: list[RetrieverEvent] = []
    with pytest.raises(RuntimeError):
        run_retriever(Broken(), RetrieverCall("q", None, FILTERS, 5), [events.append])
    assert [e.kind for e in events] == ["start", "error"] and "index gone" in events[1].error


def test_the_advanced_retriever_never_runs_inside_the_graph() -> None:
    assert REGISTRY.spec("ADVANCED").advanced
    with pytest.raises(NestedGraphError):
        REGISTRY.inner("ADVANCED", run_graph=lambda q, f: None)
    # Not even a settings object built around the converter gets it into a graph.
    with pytest.raises(NestedGraphError):
        build_graph(RagSettings(enabled_retrievers=("ADVANCED",)), REGISTRY)
    with pytest.raises(Exception, match="enabled_retrievers"):
        RagConfigConverter.to_settings({"enabled_retrievers": ["ADVANCED"]})


@pytest.mark.django_db
def test_the_advanced_retriever_wraps_the_whole_graph_for_outside_callers(
        acme: Imported) -> None:
    filters = SearchFilters(tenant_id=acme.tenant.pk, dataset_ids=(acme.dataset.pk,))
    retriever = REGISTRY.outer("ADVANCED", run_graph=lambda query, f: lookup_knowledge(
        filters=f, query=query))
    hits = retriever.retrieve(RetrieverCall("kafka consumer lag", None, filters, 3))
    kafka = acme.documents["kafka"].doc_key
    assert hits and all(h.chunk_id.startswith(f"{kafka}#") for h in hits)


def test_the_builder_turns_settings_into_the_graph() -> None:
    graph = build_graph(RagSettings(), REGISTRY)
    assert graph.label() == "hybrid" and graph.max_attempts == 1 and graph.transform is None
    settings = RagConfigConverter.to_settings({
        "enabled_retrievers": ["VECTOR", "BM25"], "retrieval_execution_mode": "HYBRID",
        "enable_quality_assessment": True, "enable_correction": True, "max_retry_count": 3,
        "enable_query_transform": True, "query_transform_strategy": "EXPAND",
        "neighbour_expansion": "SECTION", "enable_rerank": True, "rerank_top_n": 4})
    graph = build_graph(settings, REGISTRY)
    assert graph.label() == "milvus_hybrid" and graph.max_attempts == 4
    assert (graph.transform, graph.neighbours, graph.rerank_top_n) == ("EXPAND", ("SECTION", 1),
                                                                       4)
    plain = fallback_graph(graph)  # nothing optional left
    assert plain.label() == "hybrid" and plain.rerank_top_n is None and plain.neighbours is None
    assert (plain.transform, plain.max_attempts, plain.fallback) == (None, 1, False)
    wider, why = graph.corrected(1)
    assert (wider.per_retriever, wider.pool, wider.category_filter) == (40, 40, False)
    assert why.startswith("wider")
    other, _ = graph.corrected(2)
    assert [r.name for r in other.retrievers] == ["VECTOR", "BM25"]
    assert other.execution == "PARALLEL"


def aggregate(strategy: str, *lists: list[SearchHit], limit: int = 10) -> list[str]:
    aggregator = Aggregator(strategy, rrf_k=1, weights={"VECTOR": 1.0, "BM25": 1.0},
                            quality=lambda h, rank, n: 1 - (h.dense_l2 or 2.0) / 2, limit=limit)
    named = [CandidateList(name, "q", tuple(hits))
             for name, hits in zip(("VECTOR", "BM25"), lists, strict=False)]
    return [h.chunk_id for h in aggregator.aggregate(named)]


def test_aggregation_strategies() -> None:
    dense = [hit(1, 0, 1, l2=0.4), hit(2, 0, 2, l2=0.5), hit(3, 0, 3, l2=0.9)]
    bm25 = [hit(3, 0, 1), hit(4, 0, 2, l2=0.1), hit(1, 0, 3)]
    assert aggregate("DEDUPLICATE", dense, bm25) == ["1#chunk-0", "2#chunk-0", "3#chunk-0",
                                                     "4#chunk-0"]
    # RRF k=1: 1 → 1/2 + 1/4, 3 → 1/4 + 1/2, 2 → 1/3, 4 → 1/3; ties keep first-seen order.
    assert aggregate("RANK", dense, bm25) == ["1#chunk-0", "3#chunk-0", "2#chunk-0",
                                              "4#chunk-0"]
    # By quality (the dense distance, wherever a copy carried it).
    assert aggregate("MERGE", dense, bm25) == ["4#chunk-0", "1#chunk-0", "2#chunk-0",
                                               "3#chunk-0"]
    assert aggregate("RANK", dense, bm25, limit=2) == ["1#chunk-0", "3#chunk-0"]
    assert aggregate("MERGE", dense) == ["1#chunk-0", "2#chunk-0", "3#chunk-0"]  # one list


def chunk(content: str, *, quality: float, l2: float | None = None) -> ScoredChunk:
    return ScoredChunk(evidence_key="1#chunk-0", doc_id="1", chunk_index=0, content=content,
                       title="", breadcrumb="", source="", category="", original_rank=1,
                       raw_score=0.0, quality=quality, dense_l2=l2)


def test_quality_reads_distance_coverage_and_agreement() -> None:
    assessor = QualityAssessor()
    assert assessor.assess("anything", []).score == 0.0
    good = assessor.assess("thread 0x5d09 high cpu", [
        chunk("jstack shows thread 0x5d09 burning high cpu", quality=0.8, l2=0.2),
        chunk("other", quality=0.5, l2=0.6)])
    weak = assessor.assess("thread 0x5d09 high cpu", [
        chunk("nothing relevant here", quality=0.3, l2=0.9),
        chunk("other", quality=0.4, l2=0.5)])
    assert 0 <= weak.score < good.score <= 1
    assert (good.coverage, good.agreement) == (1.0, 1.0) and weak.agreement == 0.0
    assert {"0x5d09", "v2.3", "c++", "线程", "程池"} <= query_terms("0x5d09 V2.3 C++ 线程池")
