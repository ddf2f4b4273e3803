"""The fusions of the HYBRID retriever's lists (no database)."""

from __future__ import annotations

import pytest

from retrieval.fusion import ADAPT_DENSE_SHARE, adaptive_dense_share, convex, weighted_rrf


def test_weighted_rrf_adds_weight_over_k_plus_rank() -> None:
    fused = weighted_rrf(["a", "b"], ["b", "c"], k=5, dense_weight=0.5, bm25_weight=1.0,
                         limit=10)
    assert [(f.id, round(f.score, 4)) for f in fused] == [
        ("b", round(0.5 / 7 + 1 / 6, 4)), ("c", round(1 / 7, 4)), ("a", round(0.5 / 6, 4))]


def test_convex_normalises_each_list_within_the_query_and_weights_them() -> None:
    # dense: squared L2 (smaller is closer); BM25: scores on their own, unbounded scale
    dense = [("a", 0.2), ("b", 0.6), ("c", 1.0)]
    bm25 = [("c", 30.0), ("d", 20.0), ("b", 10.0)]
    fused = convex(dense, bm25, dense_weight=0.3, bm25_weight=0.7, limit=10)
    scores = {f.id: f.score for f in fused}
    assert scores == pytest.approx({"a": 0.3, "b": 0.3 * 0.5, "c": 0.7, "d": 0.7 * 0.5})
    assert [f.id for f in fused] == ["c", "d", "a", "b"]  # d and a tie: the dense rank wins
    assert (fused[0].dense_rank, fused[0].bm25_rank) == (3, 1)
    # Scaling one arm's scores changes nothing: only the order within the query counts.
    scaled = convex(dense, [(i, s * 100) for i, s in bm25], dense_weight=0.3,
                    bm25_weight=0.7, limit=10)
    assert [f.id for f in scaled] == [f.id for f in fused]


def test_convex_with_one_list_empty_or_flat() -> None:
    assert [f.id for f in convex([], [("x", 3.0)], dense_weight=1, bm25_weight=1,
                                 limit=5)] == ["x"]
    flat = convex([("a", 0.5), ("b", 0.5)], [], dense_weight=1, bm25_weight=0, limit=1)
    assert [(f.id, f.score) for f in flat] == [("a", 1.0)]
    with pytest.raises(ValueError):
        convex([], [], dense_weight=0, bm25_weight=0, limit=5)


def test_adaptive_keeps_the_share_where_bm25_matched_the_question() -> None:
    texts = ["Kafka consumer lag grows: check the consumer group", "unrelated text"]
    assert adaptive_dense_share(0.3, "kafka consumer lag", texts) == 0.3


def test_adaptive_raises_the_dense_share_where_bm25_matched_nothing_of_it() -> None:
    # A Chinese question on English passages: BM25 found them by an accident of tokens.
    texts = ["The treaty was signed in 1648 in Westphalia.", "In 1648 the war ended."]
    assert adaptive_dense_share(0.3, "签订的条约叫什么名字", texts) == pytest.approx(
        ADAPT_DENSE_SHARE)
    assert adaptive_dense_share(0.3, "条约", []) == pytest.approx(ADAPT_DENSE_SHARE)
    # A number in common: one term of eleven (9 %), just under the 10 % where it starts rising.
    by_number = adaptive_dense_share(0.3, "1648 年签订的条约叫什么名字", texts)
    assert 0.3 < by_number < 0.4
    assert adaptive_dense_share(0.9, "条约", []) == 0.9  # a higher share is never lowered
