"""Aggregation: several candidate lists (retrievers × queries) → one ranked list.

MERGE orders every candidate by its calibrated quality (the dense distance where known), RANK
by weighted reciprocal rank fusion, DEDUPLICATE keeps the lists' own order, list after list.
All three keep one hit per evidence key, and a dense distance any copy carried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from retrieval.lookup.post_process import evidence_key_of
from retrieval.types import SearchHit

# Quality of a hit at a 1-based rank in a list of n: the post-processor's gate quality.
Quality = Callable[[SearchHit, int, int], float]


@dataclass(frozen=True)
class CandidateList:
    retriever: str
    query: str
    hits: tuple[SearchHit, ...]


class Aggregator:
    def __init__(self, strategy: str, *, rrf_k: int, weights: dict[str, float],
                 quality: Quality, limit: int) -> None:
        if strategy not in ("MERGE", "RANK", "DEDUPLICATE"):
            raise ValueError(f"unknown aggregation {strategy!r}")
        self.strategy = strategy
        self.rrf_k = rrf_k
        self.weights = weights  # per retriever name; 1.0 when absent
        self.quality = quality
        self.limit = limit

    def aggregate(self, lists: Sequence[CandidateList]) -> list[SearchHit]:
        if len(lists) == 1:
            return _renumbered(sorted(lists[0].hits, key=lambda h: h.rank)[:self.limit])
        known_l2: dict[str, float] = {}
        for candidates in lists:
            for hit in candidates.hits:
                if hit.dense_l2 is not None:
                    known_l2.setdefault(evidence_key_of(hit), hit.dense_l2)
        scored = {"MERGE": self._merge, "RANK": self._rank,
                  "DEDUPLICATE": self._deduplicate}[self.strategy](lists)
        out = []
        for hit, score in scored[:self.limit]:
            l2 = hit.dense_l2 if hit.dense_l2 is not None else known_l2.get(
                evidence_key_of(hit))
            out.append(replace(hit, score=score, dense_l2=l2))
        return _renumbered(out)

    def _merge(self, lists: Sequence[CandidateList]) -> list[tuple[SearchHit, float]]:
        best: dict[str, tuple[SearchHit, float]] = {}
        for candidates in lists:
            n = len(candidates.hits)
            for hit in candidates.hits:
                quality = self.quality(hit, hit.rank, n)
                key = evidence_key_of(hit)
                if key not in best or quality > best[key][1]:
                    best[key] = (hit, quality)
        return sorted(best.values(), key=lambda pair: -pair[1])  # stable: ties keep list order

    def _rank(self, lists: Sequence[CandidateList]) -> list[tuple[SearchHit, float]]:
        first: dict[str, SearchHit] = {}
        score: dict[str, float] = {}
        for candidates in lists:
            weight = self.weights.get(candidates.retriever, 1.0)
            for hit in candidates.hits:
                key = evidence_key_of(hit)
                first.setdefault(key, hit)
                score[key] = score.get(key, 0.0) + weight / (self.rrf_k + hit.rank)
        return sorted(((first[k], s) for k, s in score.items()), key=lambda pair: -pair[1])

    def _deduplicate(self, lists: Sequence[CandidateList]) -> list[tuple[SearchHit, float]]:
        seen: dict[str, tuple[SearchHit, float]] = {}
        for candidates in lists:
            for hit in candidates.hits:
                seen.setdefault(evidence_key_of(hit), (hit, hit.score))
        return list(seen.values())


def _renumbered(hits: Sequence[SearchHit]) -> list[SearchHit]:
    return [replace(hit, rank=rank) for rank, hit in enumerate(hits, 1)]
