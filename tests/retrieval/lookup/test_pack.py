"""Context packing bounds (no database)."""

from __future__ import annotations

import pytest

from retrieval.lookup.pack import ELLIPSIS, KnowledgeContextPacker, cut_text
from tests.retrieval.builders import chunk


def test_short_chunks_pass_through_unchanged() -> None:
    pack = KnowledgeContextPacker(6000, 1500).pack([chunk("a#chunk-0", "  One.  "),
                                                    chunk("a#chunk-1", "Two.")])
    assert [i.excerpt for i in pack.items] == ["One.", "Two."]
    assert (pack.total_chars, pack.truncated) == (8, False)
    assert not any(i.truncated for i in pack.items)


def test_long_excerpt_is_cut_at_a_sentence_end_and_marked() -> None:
    text = "First sentence here. " * 10 + "x" * 500
    excerpt, cut = cut_text(text, 300)
    assert cut and len(excerpt) <= 300
    assert excerpt.endswith("here." + ELLIPSIS)


def test_chinese_sentence_end_and_newline_are_cut_points() -> None:
    text = "缓存击穿的处理方式。" * 30
    excerpt, _ = cut_text(text, 205)
    assert excerpt.endswith("。" + ELLIPSIS) and len(excerpt) <= 205
    lines = "line of text\n" * 40
    excerpt, _ = cut_text(lines, 250)
    assert excerpt.endswith("line of text" + ELLIPSIS)


def test_decimal_points_are_not_sentence_ends_and_no_boundary_means_a_hard_cut() -> None:
    text = "value 3.14159 " + "y" * 600
    excerpt, cut = cut_text(text, 250)
    assert cut and len(excerpt) == 250 and excerpt.endswith(ELLIPSIS)


def test_each_excerpt_is_bounded_and_the_pack_says_truncated() -> None:
    pack = KnowledgeContextPacker(6000, 1500).pack([chunk(content="z" * 4000)])
    item = pack.items[0]
    assert len(item.excerpt) <= 1500 and item.truncated and pack.truncated
    assert item.chunk.content == "z" * 4000  # the chunk itself is not altered


def test_total_is_bounded_and_a_fitting_tail_is_cut() -> None:
    chunks = [chunk(f"d{i}#chunk-0", "w" * 1000) for i in range(3)]
    pack = KnowledgeContextPacker(2500, 1500).pack(chunks)
    assert [len(i.excerpt) for i in pack.items] == [1000, 1000, 500]
    assert pack.items[2].truncated and pack.truncated
    assert pack.total_chars == 2500


def test_a_tail_under_200_chars_is_dropped_and_nothing_after_it_is_added() -> None:
    chunks = [chunk("a#chunk-0", "w" * 1000), chunk("b#chunk-0", "w" * 1000),
              chunk("c#chunk-0", "w" * 10)]
    pack = KnowledgeContextPacker(1199, 1199).pack(chunks)  # 199 chars left for "b"
    assert [i.chunk.evidence_key for i in pack.items] == ["a#chunk-0"]
    assert pack.truncated and pack.total_chars == 1000


def test_exact_fit_is_not_truncated() -> None:
    pack = KnowledgeContextPacker(2000, 1000).pack(
        [chunk("a#chunk-0", "w" * 1000), chunk("b#chunk-0", "w" * 1000)])
    assert (pack.total_chars, pack.truncated) == (2000, False)


def test_empty_input() -> None:
    pack = KnowledgeContextPacker(6000, 1500).pack([])
    assert (pack.items, pack.total_chars, pack.truncated) == ((), 0, False)


@pytest.mark.parametrize("limits", [(100, 1500), (6000, 50)])
def test_unusable_limits_are_rejected(limits: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        KnowledgeContextPacker(*limits)
