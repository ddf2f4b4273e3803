"""Score normalisation, evidence identity, limits and relevance levels (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from retrieval.lookup.post_process import (
    KnowledgeEvidencePostProcessor,
    RetrievalScoreNormalizer,
    evidence_key_of,
)
from retrieval.types import QueryHints, RelevanceLevel, SearchHit, SearchMode

NO_HINTS = QueryHints()


def hit(rank: int, doc: str | None = "d1", index: int | None = 0, *, score: float = 0.0,
        l2: float | None = None, chunk_id: str | None = None, content: str | None = None,
        **meta: Any) -> SearchHit:
    metadata: dict[str, Any] = dict(meta)
    if doc is not None:
        metadata["docId"] = doc
    if index is not None:
        metadata["chunkIndex"] = index
    if chunk_id is None:
        chunk_id = f"{doc}#chunk-{index}" if doc is not None else ""
    content = f"text of hit {rank}" if content is None else content  # each its own text
    return SearchHit(chunk_id=chunk_id, content=content, metadata=metadata, rank=rank,
                     score=score, dense_l2=l2)


def processor(return_n: int = 5, per_doc: int = 2, ref: float = 0.35,
              precise: float = 0.6) -> KnowledgeEvidencePostProcessor:
    return KnowledgeEvidencePostProcessor(return_n, per_doc, ref, precise, max_l2_distance=2.0)


def keys(hits: list[SearchHit], mode: SearchMode = "dense", **kw: Any) -> list[str]:
    # dense with score (= L2) 0.0: every hit is of quality 1, so only the limits act
    return [c.evidence_key for c in processor(**kw).process(hits, mode, NO_HINTS).chunks]


# --- normaliser -----------------------------------------------------------------------------

@pytest.mark.parametrize("l2, quality", [(0.0, 1.0), (0.5, 0.75), (2.0, 0.0), (3.9, 0.0),
                                         (-0.1, 1.0), (float("nan"), 0.0)])
def test_dense_quality_is_one_minus_clamped_l2_over_max(l2: float, quality: float) -> None:
    assert RetrievalScoreNormalizer(2.0).dense_quality(l2) == pytest.approx(quality)


def test_rank_quality_is_linear_from_one_to_one_over_n() -> None:
    n = RetrievalScoreNormalizer(2.0)
    assert [n.rank_quality(r, 4) for r in (1, 2, 3, 4)] == [1.0, 0.75, 0.5, 0.25]
    assert n.rank_quality(1, 1) == 1.0


def test_gate_prefers_dense_l2_over_rank() -> None:
    n = RetrievalScoreNormalizer(2.0)
    with_l2 = hit(1, l2=1.6, score=0.033)
    without = hit(1, score=0.033)
    assert n.gate_quality(with_l2, mode="hybrid", rank=1, n=3) == pytest.approx(0.2)
    assert n.gate_quality(without, mode="hybrid", rank=1, n=3) == 1.0
    # a dense hit's score is its L2 distance
    assert n.gate_quality(hit(1, score=0.4), mode="dense", rank=1, n=3) == pytest.approx(0.8)


def test_normalizer_rejects_a_non_positive_max() -> None:
    with pytest.raises(ValueError):
        RetrievalScoreNormalizer(0)


# --- evidence identity and dedup --------------------------------------------------------------

def test_evidence_key_and_its_fallbacks() -> None:
    assert evidence_key_of(hit(1, "42", 3)) == "42#chunk-3"
    assert evidence_key_of(hit(1, "42", None, chunk_id="pk-9")) == "vector:pk-9"
    assert evidence_key_of(hit(1, None, 3, chunk_id="pk-9")) == "vector:pk-9"
    assert evidence_key_of(hit(7, None, None, chunk_id="")) == "rank:7"
    assert evidence_key_of(hit(1, "42", "5")) == "42#chunk-5"  # type: ignore[arg-type]


def test_dedup_is_by_evidence_key_and_keeps_the_first() -> None:
    hits = [hit(1, "a", 0, content="first"), hit(2, "a", 0, content="dup"),
            hit(3, "a", 1), hit(4, None, None, chunk_id="v1"),
            hit(5, None, None, chunk_id="v1"), hit(6, None, None, chunk_id=""),
            hit(7, None, None, chunk_id="")]
    result = processor(return_n=10, per_doc=10).process(hits, "dense", NO_HINTS)
    assert [c.evidence_key for c in result.chunks] == [
        "a#chunk-0", "a#chunk-1", "vector:v1", "rank:6", "rank:7"]
    assert result.chunks[0].content == "first"


def test_the_same_text_again_is_named_by_the_first_and_spends_no_slot() -> None:
    runbook = "## Restart\n\nDrain the consumer,  then restart it."
    hits = [hit(1, "up", 0, content=runbook, source="ops/kafka.md"),
            hit(2, "other", 0),
            hit(3, "git", 4, content=" ## restart\nDrain the consumer, then RESTART it. ",
                source="repo/kafka.md"),
            hit(4, "third", 0), hit(5, "ds2", 0, content=runbook, source="kafka.md"),
            hit(6, "fourth", 0)]
    result = processor(return_n=3, per_doc=1).process(hits, "dense", NO_HINTS)
    # Three places, none spent on a copy; the copies listed best-ranked first.
    assert [c.evidence_key for c in result.chunks] == [
        "up#chunk-0", "other#chunk-0", "third#chunk-0"]
    assert [(c.evidence_key, c.source) for c in result.chunks[0].also_in] == [
        ("git#chunk-4", "repo/kafka.md"), ("ds2#chunk-0", "kafka.md")]
    assert dict(result.dropped) == {"git#chunk-4": "same_text", "ds2#chunk-0": "same_text",
                                    "fourth#chunk-0": "return_n"}
    # Only the words count: a text that differs by one word is its own evidence, and so is
    # the same text under another title (a section two runbooks share).
    other = [hit(1, "a", 0, content="Restart the pod."), hit(2, "b", 0, content="Restart a pod."),
             hit(3, "c", 0, content="Restart the pod.", title="Another runbook")]
    assert [c.also_in for c in processor().process(other, "dense", NO_HINTS).chunks] == \
        [(), (), ()]
    # With the gate off (evaluation), every copy is ranked.
    assert len(processor(return_n=3, per_doc=1, ref=0.0, precise=0.0).process(
        hits, "dense", NO_HINTS).chunks) == 3


def test_chunks_of_one_document_are_kept_up_to_the_limit() -> None:
    hits = [hit(1, "a", 0), hit(2, "a", 1), hit(3, "a", 2), hit(4, "b", 0), hit(5, "a", 3)]
    assert keys(hits, per_doc=2) == ["a#chunk-0", "a#chunk-1", "b#chunk-0"]
    assert keys(hits, per_doc=1) == ["a#chunk-0", "b#chunk-0"]


def test_return_n_limits_the_result() -> None:
    hits = [hit(r, f"d{r}", 0) for r in range(1, 9)]
    assert keys(hits, return_n=3) == ["d1#chunk-0", "d2#chunk-0", "d3#chunk-0"]


def test_order_is_the_store_rank_not_the_input_order() -> None:
    hits = [hit(3, "c", 0), hit(1, "a", 0), hit(2, "b", 0)]
    assert keys(hits) == ["a#chunk-0", "b#chunk-0", "c#chunk-0"]


# --- relevance ---------------------------------------------------------------------------------

@pytest.mark.parametrize("l2, level", [(0.2, RelevanceLevel.PRECISE),   # quality 0.9
                                       (0.8, RelevanceLevel.PRECISE),   # 0.6
                                       (1.0, RelevanceLevel.REFERENCE),  # 0.5
                                       (1.3, RelevanceLevel.REFERENCE),  # 0.35
                                       (1.5, RelevanceLevel.NONE)])     # 0.25
def test_relevance_level_from_the_top_gate_quality(l2: float, level: RelevanceLevel) -> None:
    result = processor().process([hit(1, l2=l2)], "hybrid", NO_HINTS)
    assert result.relevance_level is level
    assert result.top_quality == pytest.approx(1 - l2 / 2)


def test_nothing_relevant_means_no_evidence() -> None:
    result = processor().process([hit(1, "a", 0, score=1.8), hit(2, "b", 0, score=1.9)],
                                 "dense", NO_HINTS)
    assert result.relevance_level is RelevanceLevel.NONE
    assert result.chunks == ()


def test_no_hits() -> None:
    result = processor().process([], "hybrid", NO_HINTS)
    assert (result.chunks, result.relevance_level, result.top_quality) == (
        (), RelevanceLevel.NONE, 0.0)


def test_junk_under_a_precise_hit_is_dropped_and_frees_its_slot() -> None:
    hits = [hit(1, "a", 0, l2=0.2), hit(2, "b", 0, l2=1.9), hit(3, "c", 0, l2=1.0)]
    result = processor(return_n=2).process(hits, "hybrid", NO_HINTS)
    assert [c.evidence_key for c in result.chunks] == ["a#chunk-0", "c#chunk-0"]
    assert result.relevance_level is RelevanceLevel.PRECISE


def test_a_relevant_hit_below_a_junk_first_hit_still_counts() -> None:
    hits = [hit(1, "a", 0, l2=1.9), hit(2, "b", 0, l2=0.4)]
    result = processor().process(hits, "hybrid", NO_HINTS)
    assert result.relevance_level is RelevanceLevel.PRECISE
    assert [c.evidence_key for c in result.chunks] == ["b#chunk-0"]


def test_hybrid_without_dense_distance_falls_back_to_rank_quality() -> None:
    hits = [hit(r, f"d{r}", 0, score=0.03) for r in range(1, 5)]  # qualities 1, .75, .5, .25
    result = processor().process(hits, "hybrid", NO_HINTS)
    assert [c.quality for c in result.chunks] == [1.0, 0.75, 0.5]
    assert result.relevance_level is RelevanceLevel.PRECISE


def test_scored_chunk_carries_identity_and_scores() -> None:
    h = hit(1, "42", 3, score=0.4, content="body", title="T", breadcrumb="A > B",
            source="kb/a.md", category="ops")
    chunk = processor().process([h], "dense", NO_HINTS).chunks[0]
    assert (chunk.doc_id, chunk.chunk_index, chunk.title, chunk.breadcrumb) == (
        "42", 3, "T", "A > B")
    assert (chunk.source, chunk.category, chunk.original_rank) == ("kb/a.md", "ops", 1)
    assert (chunk.raw_score, chunk.dense_l2, chunk.quality) == (0.4, 0.4, pytest.approx(0.8))


# --- L0 never reorders -------------------------------------------------------------------------

def test_l0_overlap_explains_but_never_reorders() -> None:
    hints = QueryHints(domains=("cache",), keywords=("redis",), category_filter="ops")
    hits = [hit(1, "a", 0, content="postgres vacuum", l2=0.3),
            hit(2, "b", 0, content="Redis eviction", domain="cache", category="ops", l2=0.3)]
    result = processor().process(hits, "hybrid", hints)
    assert [c.evidence_key for c in result.chunks] == ["a#chunk-0", "b#chunk-0"]
    assert result.chunks[0].hit_reasons == ()
    assert result.chunks[1].hit_reasons == ("keyword:redis", "domain:cache", "category:ops")
    assert result.chunks[0].quality == result.chunks[1].quality  # no boost either


@pytest.mark.parametrize("args", [(0, 2, 0.3, 0.6), (5, 0, 0.3, 0.6), (5, 2, 0.7, 0.6),
                                  (5, 2, -0.1, 0.6), (5, 2, 0.3, 1.5)])
def test_invalid_configuration_is_rejected(args: tuple[int, int, float, float]) -> None:
    with pytest.raises(ValueError):
        KnowledgeEvidencePostProcessor(*args)


def test_every_candidate_the_gate_does_not_keep_says_why() -> None:
    hits = [hit(1, "a", 0), hit(2, "a", 0), hit(3, "a", 1), hit(4, "a", 2),
            hit(5, "b", 0, l2=1.9, score=1.9), hit(6, "c", 0), hit(7, "d", 0)]
    result = processor(return_n=3, per_doc=2).process(hits, "dense", NO_HINTS)

    assert [c.evidence_key for c in result.chunks] == ["a#chunk-0", "a#chunk-1", "c#chunk-0"]
    assert dict(result.dropped) == {"a#chunk-0": "duplicate", "a#chunk-2": "per_document",
                                    "b#chunk-0": "below:0.050", "d#chunk-0": "return_n"}
    assert len(result.dropped) == len(hits) - len(result.chunks)


def test_when_nothing_is_relevant_every_candidate_is_dropped_as_below() -> None:
    result = processor().process([hit(1, "a", 0, l2=1.9, score=1.9)], "dense", NO_HINTS)
    assert result.chunks == () and result.dropped == (("a#chunk-0", "below:0.050"),)
