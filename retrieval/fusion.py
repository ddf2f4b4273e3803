"""Fusion of the dense and BM25 candidate lists: weighted RRF, or a convex combination whose
dense share is fixed (CONVEX) or adapts to the query (ADAPTIVE)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retrieval.analysis import normalize_text
from retrieval.lexical import query_terms


@dataclass(frozen=True)
class Fused:
    id: str
    score: float
    dense_rank: int | None
    bm25_rank: int | None


def weighted_rrf(dense_ids: Sequence[str], bm25_ids: Sequence[str], *, k: int,
                 dense_weight: float, bm25_weight: float, limit: int) -> list[Fused]:
    """score = Σ weight / (k + rank), rank from 1 — Milvus's RRFRanker when both weights are 1.

    Ties keep the better dense rank, then the better BM25 rank, so the order is deterministic.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    dense_rank = {id_: rank for rank, id_ in enumerate(dense_ids, 1)}
    bm25_rank = {id_: rank for rank, id_ in enumerate(bm25_ids, 1)}
    fused = []
    for id_ in dict.fromkeys([*dense_ids, *bm25_ids]):
        d, b = dense_rank.get(id_), bm25_rank.get(id_)
        score = (dense_weight / (k + d) if d else 0.0) + (bm25_weight / (k + b) if b else 0.0)
        fused.append(Fused(id_, score, d, b))
    worst = len(dense_ids) + len(bm25_ids) + 1
    fused.sort(key=lambda f: (-f.score, f.dense_rank or worst, f.bm25_rank or worst))
    return fused[:limit]


def convex(dense: Sequence[tuple[str, float]], bm25: Sequence[tuple[str, float]], *,
           dense_weight: float, bm25_weight: float, limit: int) -> list[Fused]:
    """score = α·d + (1 − α)·b with α = dense_weight / (dense_weight + bm25_weight).

    `dense` holds (id, squared L2), `bm25` (id, BM25 score); d and b are each list's scores
    min-max normalised within this query (the closest chunk and the best BM25 match are 1, the
    last of each list 0), so neither arm's scale matters, and BM25's per-segment statistics on
    Milvus Lite only move scores within one query's list. A chunk one list lacks gets 0 there.
    Ties keep the better dense rank, then the better BM25 rank.
    """
    if dense_weight < 0 or bm25_weight < 0 or dense_weight + bm25_weight <= 0:
        raise ValueError("the weights must be non-negative and not both 0")
    alpha = dense_weight / (dense_weight + bm25_weight)
    dense_score = dict(zip([i for i, _ in dense], _min_max([-l2 for _, l2 in dense]),
                           strict=True))
    bm25_score = dict(zip([i for i, _ in bm25], _min_max([s for _, s in bm25]), strict=True))
    dense_rank = {id_: rank for rank, (id_, _) in enumerate(dense, 1)}
    bm25_rank = {id_: rank for rank, (id_, _) in enumerate(bm25, 1)}
    score = {id_: alpha * dense_score.get(id_, 0.0) + (1 - alpha) * bm25_score.get(id_, 0.0)
             for id_ in dict.fromkeys([*dense_score, *bm25_score])}
    worst = len(dense) + len(bm25) + 1
    fused = [Fused(id_, s, dense_rank.get(id_), bm25_rank.get(id_)) for id_, s in score.items()]
    fused.sort(key=lambda f: (-f.score, f.dense_rank or worst, f.bm25_rank or worst))
    return fused[:limit]


# ADAPTIVE: when BM25's best few hits hold under ADAPT_COVERAGE of the query's own terms, BM25
# matched by accident (digits, a name) — a question in the other language, or worded apart from
# every document — and the dense share rises linearly to ADAPT_DENSE_SHARE as that coverage falls
# to 0. Elsewhere it is the configured share. Chosen by the worst margin over the better arm on
# CMRC, SciFact and XQuAD zh→en with both embedders (docs/benchmarks.md, "A fusion that adapts
# to the query"): on CMRC and SciFact no query's coverage is that low, so they are unchanged.
ADAPT_COVERAGE = 0.1
ADAPT_DENSE_SHARE = 0.8
ADAPT_TOP_HITS = 3  # BM25's best hits whose text is read


def adaptive_dense_share(dense_share: float, bm25_query: str,
                         bm25_texts: Sequence[str]) -> float:
    """The dense share (α) for a query, from the share of what BM25 searched (`bm25_query`)
    that the text of its best hits (`bm25_texts`, best first) holds."""
    terms = query_terms(bm25_query)
    coverage = max((terms.coverage(normalize_text(text)) for text in bm25_texts[:ADAPT_TOP_HITS]),
                   default=0.0)
    shortfall = min(max((ADAPT_COVERAGE - coverage) / ADAPT_COVERAGE, 0.0), 1.0)
    return max(dense_share, dense_share + (ADAPT_DENSE_SHARE - dense_share) * shortfall)


def _min_max(values: Sequence[float]) -> list[float]:
    low, high = min(values, default=0.0), max(values, default=0.0)
    return [(v - low) / (high - low) if high > low else 1.0 for v in values]
