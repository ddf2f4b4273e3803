"""Weighted reciprocal rank fusion of the dense and BM25 candidate lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
