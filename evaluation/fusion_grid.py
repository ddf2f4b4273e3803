"""Fusion candidates on one suite: each query's two arm lists are fetched once, and every
candidate fuses them (at chunk level, as the HYBRID retriever does) and is scored at document
level beside each arm alone. How the default fusion was chosen (docs/benchmarks.md, "Fusion
that does not lose to its best arm"), and how a tenant can choose on its own questions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evaluation.suites import EvalIndex, Progress, Suite, ndcg_at, recall_at
from retrieval.fusion import adaptive_dense_share, convex, weighted_rrf
from retrieval.index import milvus
from retrieval.index.embedders import Embedder
from retrieval.index.search import VectorSearchService
from retrieval.types import SearchHit, SearchRequest

# (query, dense list, BM25 list, limit) → chunk ids
Fuse = Callable[[str, Sequence[SearchHit], Sequence[SearchHit], int], list[str]]


@dataclass(frozen=True)
class Candidate:
    name: str
    fuse: Fuse


def _rrf(k: int, dense_weight: float) -> Candidate:
    def fuse(query: str, dense: Sequence[SearchHit], bm25: Sequence[SearchHit],
             limit: int) -> list[str]:
        return [f.id for f in weighted_rrf([h.chunk_id for h in dense],
                                           [h.chunk_id for h in bm25], k=k,
                                           dense_weight=dense_weight, bm25_weight=1.0,
                                           limit=limit)]
    return Candidate(f"RRF k={k}, dense {dense_weight} : BM25 1.0", fuse)


def _convex(alpha: float, *, adaptive: bool = False) -> Candidate:
    def fuse(query: str, dense: Sequence[SearchHit], bm25: Sequence[SearchHit],
             limit: int) -> list[str]:
        share = (adaptive_dense_share(alpha, query, [h.content for h in bm25]) if adaptive
                 else alpha)
        return [f.id for f in convex([(h.chunk_id, h.score) for h in dense],
                                     [(h.chunk_id, h.score) for h in bm25],
                                     dense_weight=share, bm25_weight=1 - share, limit=limit)]
    name = f"CONVEX, dense {alpha} : BM25 {round(1 - alpha, 2)}"
    return Candidate(f"ADAPTIVE from {name}" if adaptive else name, fuse)


def _arm(name: str, dense: bool) -> Candidate:
    def fuse(query: str, d: Sequence[SearchHit], b: Sequence[SearchHit],
             limit: int) -> list[str]:
        return [h.chunk_id for h in (d if dense else b)][:limit]
    return Candidate(name, fuse)


CANDIDATES: tuple[Candidate, ...] = (
    _arm("dense alone", True), _arm("BM25 alone", False),
    *(_rrf(k, w) for k in (60, 20, 5) for w in (1.0, 0.7, 0.5, 0.4, 0.25)),
    *(_convex(a) for a in (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6)),
    *(_convex(a, adaptive=True) for a in (0.25, 0.3, 0.35)),
)


@dataclass(frozen=True)
class GridRow:
    name: str
    ndcg_at_10: float
    recall_at_100: float


def fusion_grid(*, suite: Suite, index: EvalIndex, embedder: Embedder, depth: int,
                max_queries: int | None, progress: Progress,
                candidates: Sequence[Candidate] = CANDIDATES) -> list[GridRow]:
    port = milvus.searcher(index.collection)
    vectors = VectorSearchService(port=port, embedder=embedder)
    judged = [q for q in suite.queries if q in suite.qrels][:max_queries]
    sums = {c.name: [0.0, 0.0] for c in candidates}
    for number, query_id in enumerate(judged, 1):
        text = suite.queries[query_id]
        vector = vectors.embed(text, "dense").vector
        dense = port.search(SearchRequest(query_text=text, query_vector=vector, mode="dense",
                                          limit=depth, filters=index.filters))
        bm25 = port.search(SearchRequest(query_text=text, query_vector=None, mode="bm25",
                                         limit=depth, filters=index.filters))
        source = {h.chunk_id: index.source_of_doc.get(str(h.metadata.get("docId")))
                  for h in [*dense, *bm25]}
        for candidate in candidates:
            ranking = list(dict.fromkeys(
                s for s in (source[i] for i in candidate.fuse(text, dense, bm25, 2 * depth)) if s))
            sums[candidate.name][0] += ndcg_at(ranking, suite.qrels[query_id], 10)
            sums[candidate.name][1] += recall_at(ranking, suite.qrels[query_id], 100)
        if number % 50 == 0 or number == len(judged):
            progress(f"queries {number}/{len(judged)}")
    count = max(len(judged), 1)
    return [GridRow(name, round(n / count, 4), round(r / count, 4))
            for name, (n, r) in sums.items()]
