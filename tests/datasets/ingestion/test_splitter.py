"""Heading-aware splitting: breadcrumbs, block boundaries, sentences, overlap (no database)."""

from __future__ import annotations

import pytest

from datasets.ingestion.splitter import MarkdownSplitter, Segment

THREE_LEVELS = """Preamble before any heading.

# Redis memory full

Symptoms: writes fail with OOM errors.

## Diagnosis

### Check eviction policy

Run `CONFIG GET maxmemory-policy`.

### Check big keys

Use `redis-cli --bigkeys`.

## Fix

Raise maxmemory or enable eviction.
"""


def split(text: str, size: int = 800, overlap: int = 100) -> list[Segment]:
    return MarkdownSplitter(chunk_size=size, chunk_overlap=overlap).split(text)


@pytest.mark.parametrize(("size", "overlap"), [(99, 0), (800, -1), (800, 400), (100, 50), (0, 0)])
def test_invalid_configuration_is_rejected(size: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        MarkdownSplitter(chunk_size=size, chunk_overlap=overlap)


def test_breadcrumbs_follow_a_three_level_document() -> None:
    segments = split(THREE_LEVELS)
    assert [s.breadcrumb for s in segments] == [
        "",
        "Redis memory full",
        "Redis memory full > Diagnosis > Check eviction policy",
        "Redis memory full > Diagnosis > Check big keys",
        "Redis memory full > Fix",
    ]
    assert segments[2].headings == ("Redis memory full", "Diagnosis", "Check eviction policy")
    assert [s.index for s in segments] == [0, 1, 2, 3, 4]


def test_sections_are_not_merged_and_start_with_their_heading() -> None:
    segments = split(THREE_LEVELS)
    assert segments[0].content == "Preamble before any heading."
    assert segments[2].content == "### Check eviction policy\n\nRun `CONFIG GET maxmemory-policy`."
    # "## Diagnosis" has no body of its own, so it yields no segment.
    assert not any(s.content.startswith("## Diagnosis") for s in segments)


def test_doc_starting_with_title_heading_uses_it_as_breadcrumb() -> None:
    segments = split("# 发布手册\n\n先灰度再全量。\n")
    assert [(s.breadcrumb, s.content) for s in segments] == [
        ("发布手册", "# 发布手册\n\n先灰度再全量。")
    ]


def test_headings_are_found_by_the_markdown_parser_not_by_line_prefix() -> None:
    text = (
        "# 部署\n\n```bash\n# 这是注释，不是标题\nkubectl apply -f app.yaml\n```\n\n"
        "> # 引用里的标题\n\nSetext 标题\n----------\n\n内容。\n"
    )
    segments = split(text)
    assert [s.breadcrumb for s in segments] == ["部署", "部署 > Setext 标题"]
    assert "# 这是注释" in segments[0].content and "> # 引用里的标题" in segments[0].content


def test_breadcrumb_uses_plain_heading_text() -> None:
    [segment] = split("## Tune `maxmemory` *carefully*\n\nText.")
    assert segment.breadcrumb == "Tune maxmemory carefully"


def test_heading_levels_pop_back_correctly() -> None:
    text = "# A\n\n## B\n\n#### D\n\nd\n\n## C\n\nc\n\n# E\n\ne\n"
    assert [s.breadcrumb for s in split(text)] == ["A > B > D", "A > C", "E"]


def test_long_section_is_split_at_block_boundaries() -> None:
    paragraphs = [f"Step {n}: " + "restart the replica and verify lag. " * 8 for n in range(6)]
    text = "## Recovery\n\n" + "\n\n".join(p.strip() for p in paragraphs)
    segments = split(text, size=800, overlap=0)
    assert len(segments) > 1
    for segment in segments:
        assert len(segment.content) <= 800
        assert segment.content.endswith("verify lag.")  # never mid-paragraph
    assert segments[0].content.startswith("## Recovery\n\nStep 0:")
    assert all(s.breadcrumb == "Recovery" for s in segments)


def test_long_chinese_paragraph_is_split_at_full_stops_with_overlap() -> None:
    sentences = [f"第{n}步检查主从复制延迟并确认淘汰策略已生效。" for n in range(60)]
    text = "## 处理步骤\n\n" + "".join(sentences)
    segments = split(text, size=300, overlap=60)
    assert len(segments) >= 4
    assert all(s.breadcrumb == "处理步骤" for s in segments)
    for previous, current in zip(segments, segments[1:], strict=False):
        assert len(previous.content) <= 300 and len(current.content) <= 300
        assert previous.content.endswith("。")
        # The next piece repeats whole sentences from the end of the previous one.
        shared = current.content[: _shared_prefix_suffix(previous.content, current.content)]
        assert 0 < len(shared) <= 60
        assert shared.startswith("第") and shared.endswith("。")
    assert segments[-1].content.endswith(sentences[-1])


def test_overlap_never_exceeds_configured_characters() -> None:
    text = "## Notes\n\n" + " ".join(f"Sentence number {n} explains one thing." for n in range(80))
    segments = split(text, size=400, overlap=90)
    for previous, current in zip(segments, segments[1:], strict=False):
        shared = _shared_prefix_suffix(previous.content, current.content)
        assert 0 < shared <= 90


def test_zero_overlap_pieces_do_not_repeat_text() -> None:
    text = "## Notes\n\n" + " ".join(f"Sentence number {n} explains one thing." for n in range(80))
    segments = split(text, size=400, overlap=0)
    bodies = " ".join(s.content for s in segments).replace("## Notes ", "")
    assert bodies.count("Sentence number 42 ") == 1


def test_unbroken_text_is_hard_cut_as_a_last_resort() -> None:
    blob = "A" * 2500
    segments = split(f"## Dump\n\n{blob}", size=1000, overlap=100)
    assert all(len(s.content) <= 1000 for s in segments)
    assert "".join(s.content for s in segments).replace("## Dump\n\n", "") == blob


def test_large_fenced_code_block_stays_whole() -> None:
    code = "\n".join(f"kubectl -n prod rollout restart deploy/api-{n:03d}" for n in range(34))
    assert len(code) >= 1500
    intro = "先确认流量已切走。再暂停定时任务。"
    text = f"## 重启服务\n\n{intro}\n\n```bash\n{code}\n```\n\n最后检查 Pod 状态。"
    segments = split(text, size=800, overlap=100)
    fenced = [s for s in segments if "```bash" in s.content]
    assert len(fenced) == 1
    # No overlap is added in front of an oversized block: it is already over budget.
    assert fenced[0].content == f"```bash\n{code}\n```"
    assert all(s.content.count("```") % 2 == 0 for s in segments)
    assert segments[-1].content.endswith("最后检查 Pod 状态。")


def test_large_table_is_not_cut() -> None:
    rows = "\n".join(f"| redis-{n:02d} | 10.0.0.{n} | 16 GB | allkeys-lru |" for n in range(40))
    table = "| 实例 | 地址 | 内存 | 策略 |\n|---|---|---|---|\n" + rows
    text = f"## 实例清单\n\n以下是生产实例。\n\n{table}\n\n表格之后的说明。"
    segments = split(text, size=500, overlap=50)
    holding = [s for s in segments if "redis-00" in s.content]
    assert len(holding) == 1 and table in holding[0].content
    assert not any("| redis-39" in s.content for s in segments if s is not holding[0])


def test_oversized_list_is_split_between_items() -> None:
    items = "\n".join(
        f"- 检查节点 node-{n:02d} 的磁盘使用率和 inode 使用率是否超过阈值" for n in range(30)
    )
    segments = split(f"## 巡检清单\n\n{items}", size=300, overlap=0)
    assert len(segments) > 1
    for segment in segments:
        assert segment.content.endswith("是否超过阈值")
        assert len(segment.content) <= 300


def test_code_inside_an_oversized_list_item_is_not_cut() -> None:
    item = "- 在节点 {n} 上执行并记录输出：\n\n  ```bash\n  df -h /data\n  df -i /data\n  ```\n"
    text = (
        "## 巡检\n\n" + "\n".join(item.format(n=n) for n in range(12)) + "\n\n巡检结束后汇总结果。"
    )
    segments = split(text, size=300, overlap=80)
    assert len(segments) > 2
    assert all(s.content.count("```") % 2 == 0 for s in segments)
    assert sum(s.content.count("df -i /data") for s in segments) >= 12


def test_overlap_never_repeats_a_whole_previous_piece() -> None:
    heading = "## " + "Rotate the TLS certificates of the public ingress controllers"
    short = "Announce the maintenance window first"
    long = "Then " + "renew, deploy and verify each certificate " * 5
    segments = split(f"{heading}\n\n{short}\n\n{long.strip()}", size=300, overlap=100)
    assert [s.content.startswith(heading) for s in segments] == [True, False]
    assert short not in segments[1].content


def test_unpunctuated_text_is_cut_between_words() -> None:
    words = " ".join(f"node{n:03d}" for n in range(400))
    segments = split(f"## Hosts\n\n{words}", size=300, overlap=0)
    assert len(segments) > 5
    for segment in segments:
        assert len(segment.content) <= 300
        assert all(len(word) == 7 for word in segment.content.split() if word.startswith("node"))


def test_segments_fit_chunk_size_unless_they_hold_code_or_a_table() -> None:
    text = THREE_LEVELS + "\n## Long\n\n" + "内存碎片率过高时需要重启。" * 200
    text += "\n\n```\n" + "x = 1\n" * 300 + "```\n"
    for segment in split(text, size=400, overlap=80):
        if "```" not in segment.content and "|---" not in segment.content:
            assert len(segment.content) <= 400


def test_no_empty_segments_and_blank_input_gives_none() -> None:
    assert split("") == [] and split(" \n\n\t\n") == []
    segments = split("# A\n\n## B\n\n\n\n## C\n\ntext\n\n\n")
    assert [s.content for s in segments] == ["## C\n\ntext"]
    assert all(s.content.strip() for s in split(THREE_LEVELS))


def test_split_is_deterministic() -> None:
    text = THREE_LEVELS + "\n## Long\n\n" + "Eviction keeps memory bounded. " * 120
    assert split(text, size=300, overlap=50) == split(text, size=300, overlap=50)


def _shared_prefix_suffix(previous: str, current: str) -> int:
    """Length of the longest start of `current` that is also the end of `previous`."""
    for length in range(min(len(previous), len(current)), 0, -1):
        if previous.endswith(current[:length]):
            return length
    return 0


ABSTRACT = "# Aspirin and platelets\n\n" + "Aspirin inhibits platelet aggregation. " * 40


def test_a_short_document_of_one_section_is_one_segment() -> None:
    cut = MarkdownSplitter(chunk_size=800, chunk_overlap=100).split(ABSTRACT)
    assert len(cut) == 3  # 1,600 characters
    whole = MarkdownSplitter(chunk_size=800, chunk_overlap=100,
                             whole_document=len(ABSTRACT.strip()))
    # As written (line ends normalised, outer blank lines dropped), under its heading.
    assert whole.split("\n\n" + ABSTRACT.replace("\n", "\r\n")) == [
        Segment(0, ABSTRACT.strip(), "Aspirin and platelets", ("Aspirin and platelets",),
                start=2)]
    untitled = ABSTRACT.split("\n", 2)[2]
    assert whole.split(untitled) == [Segment(0, untitled.strip(), "", ())]


def test_a_longer_document_or_one_with_sections_is_cut_as_before() -> None:
    longer = MarkdownSplitter(chunk_size=800, chunk_overlap=100,
                              whole_document=len(ABSTRACT.strip()) - 1)
    assert longer.split(ABSTRACT) == MarkdownSplitter(chunk_size=800).split(ABSTRACT)
    sections = MarkdownSplitter(whole_document=2000)
    assert sections.split(THREE_LEVELS) == split(THREE_LEVELS)
    assert len(split(THREE_LEVELS)) == 5


def test_a_short_document_of_headings_only_has_no_segment() -> None:
    assert MarkdownSplitter(whole_document=2000).split("# Title\n\n## Section\n") == []


def test_a_negative_whole_document_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="whole_document"):
        MarkdownSplitter(whole_document=-1)
