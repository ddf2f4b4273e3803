"""Upload checks, frontmatter fields and the title fallbacks (no database)."""

from __future__ import annotations

import pytest

from datasets.documents.services import InvalidDocument, document_validate
from datasets.ingestion.parse import DocumentParseError, ParsedDocument, parse_markdown

LIMIT = 64 * 1024

RUNBOOK = """---
title: Redis 内存满排查
domain: " Cache "
keywords: [redis, 内存, maxmemory, redis]
category: OPS
business_key: "KB-0012"
owner: sre-team
version: 3
reviewed: 2024-05-01
draft: false
tags: [obsidian, imported]
aliases: !!set {a, b}
links: {wiki: x}
---

# Redis 内存满

当 used_memory 接近 maxmemory 时，写入会失败。
"""


def parse(text: str | bytes, file_name: str = "runbooks/redis.md") -> ParsedDocument:
    raw = text.encode() if isinstance(text, str) else text
    return parse_markdown(raw, file_name=file_name, max_bytes=LIMIT)


def parse_error(text: str | bytes, *, max_bytes: int = LIMIT) -> str:
    raw = text.encode() if isinstance(text, str) else text
    with pytest.raises(DocumentParseError) as info:
        parse_markdown(raw, file_name="doc.md", max_bytes=max_bytes)
    return str(info.value)


def test_frontmatter_fields_are_typed_and_cleaned() -> None:
    doc = parse(RUNBOOK)
    assert doc.title == "Redis 内存满排查"
    assert doc.domain == "cache"
    assert doc.category == "ops"
    assert doc.keywords == ("redis", "内存", "maxmemory")
    assert doc.business_key == "KB-0012"
    assert doc.body.startswith("# Redis 内存满\n\n当 used_memory")
    assert "---" not in doc.body and "owner" not in doc.body


def test_other_fields_are_kept_as_text_values_and_mappings_are_dropped() -> None:
    doc = parse(RUNBOOK)
    assert doc.owner == "sre-team"  # a field of its own (how current evidence is)
    assert doc.fields == {
        "version": ("3",),
        "reviewed": ("2024-05-01",),
        "draft": ("false",),
        "tags": ("obsidian", "imported"),  # a list: each value (a set or mapping is dropped)
    }


def test_other_fields_past_their_bounds_are_left_out_never_refused() -> None:
    many = "\n".join(f"f{n}: {n}" for n in range(25))
    long = "x" * 201
    doc = parse(f"---\n{many}\nTeam: SRE\nbad name: 1\n9lives: 1\nlong: {long}\n"
                f"values: [{', '.join(str(n) for n in range(30))}, 1]\n---\nbody\n")
    assert list(doc.fields) == [f"f{n}" for n in range(20)]
    doc = parse(f"---\nTeam: SRE\nOwner: me\nbad name: 1\n9lives: 1\nlong: {long}\n"
                f"values: [{', '.join(str(n) for n in range(30))}, 1, [a], null]\n"
                "---\nbody\n")
    # Names lower-cased (a known field's spelled otherwise is still the known field's), a
    # value too long left out, 20 values at most, each once.
    assert doc.fields == {"team": ("SRE",), "values": tuple(str(n) for n in range(20))}


def test_keywords_as_comma_separated_string_with_full_width_commas() -> None:
    doc = parse("---\nkeywords: ' MySQL, 慢查询，索引、 , MySQL'\n---\n慢查询排查步骤。\n")
    assert doc.keywords == ("MySQL", "慢查询", "索引")


def test_absent_fields_default_to_empty() -> None:
    doc = parse("# Kafka lag\n\nConsumer lag grows when...\n")
    assert (doc.domain, doc.category, doc.business_key, doc.keywords, doc.fields) == (
        "",
        "",
        "",
        (),
        {},
    )


def test_title_falls_back_to_first_level_one_heading_as_plain_text() -> None:
    doc = parse("Intro line.\n\n## Not this\n\n# The *JVM* `heap` guide\n\nText.\n")
    assert doc.title == "The JVM heap guide"


def test_title_falls_back_to_file_name_stem() -> None:
    doc = parse_markdown(
        b"## Only level two\n\ntext", file_name="C:\\docs\\gc-tuning.md", max_bytes=LIMIT
    )
    assert doc.title == "gc-tuning"


def test_blank_frontmatter_title_falls_back_to_heading() -> None:
    assert parse("---\ntitle: '  '\n---\n# 真正的标题\n\n正文。").title == "真正的标题"


def test_bom_is_removed_and_crlf_normalised() -> None:
    raw = b"\xef\xbb\xbf---\r\ntitle: Windows note\r\n---\r\nline one\r\nline two\r\n"
    doc = parse(raw)
    assert doc.title == "Windows note"
    assert doc.body == "line one\nline two"


def test_thematic_breaks_in_a_body_without_frontmatter_are_not_frontmatter() -> None:
    text = "Intro\n\n---\n\ntitle: not metadata\n\n---\n\nEnd"
    doc = parse(text)
    assert doc.body == text
    assert doc.fields == {}


def test_leading_brace_line_is_not_read_as_json_frontmatter() -> None:
    text = '{\n"a": 1\n}\n\nA JSON example above.'
    assert parse(text).body == text


def test_reserved_library_key_names_are_plain_fields() -> None:
    # python-frontmatter's loads() raises TypeError on these keys.
    doc = parse("---\ncontent: summary\nhandler: oncall\n---\nbody text")
    assert doc.fields == {"content": ("summary",), "handler": ("oncall",)}


@pytest.mark.parametrize("raw", [b"", b"   \n\t\n", "\u3000\n".encode()])
def test_empty_or_whitespace_only_file_is_rejected(raw: bytes) -> None:
    assert "empty" in parse_error(raw)


def test_too_large_file_reports_size_and_limit() -> None:
    message = parse_error("x" * 2048, max_bytes=1000)
    assert "2,048 bytes" in message and "1,000 bytes" in message


def test_non_utf8_reports_byte_offset_and_line() -> None:
    raw = "# 标题\n".encode() + "内存".encode("gbk")
    offset = len("# 标题\n".encode())
    message = parse_error(raw)
    assert f"byte offset {offset}" in message
    assert "line 2" in message and "UTF-8" in message


def test_nul_bytes_are_reported_as_binary() -> None:
    message = parse_error(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert "binary" in message and "offset 8" in message


def test_many_control_characters_are_reported_as_binary() -> None:
    assert "binary" in parse_error("注释\x01\x02\x03\x04\x05\x06 data".encode())


def test_a_few_ansi_escapes_in_a_log_are_accepted() -> None:
    log = "```\n" + "\x1b[31mERROR\x1b[0m connection refused by upstream server\n" * 5 + "```"
    assert "ERROR" in parse(log).body


def test_utf16_file_gets_a_specific_message() -> None:
    assert "UTF-16" in parse_error("# Title".encode("utf-16"))


def test_malformed_yaml_reports_the_line() -> None:
    message = parse_error("---\ntitle: Redis\nkeywords: [redis, cache\nowner: sre\n---\nbody")
    assert message.startswith("malformed YAML frontmatter")
    assert "line 4" in message


def test_unclosed_frontmatter_is_rejected() -> None:
    assert "never closed" in parse_error("---\ntitle: Redis\n\n# Body\n")


def test_frontmatter_that_is_not_a_mapping_is_rejected() -> None:
    assert "must be a YAML mapping" in parse_error("---\n- redis\n- cache\n---\nbody")


@pytest.mark.parametrize(
    ("frontmatter", "field", "got"),
    [
        ("keywords: {a: 1}", "keywords", "mapping"),
        ("keywords: 42", "keywords", "number"),
        ("keywords: [[a, b]]", "keywords", "list"),
        ("domain: [x]", "domain", "list"),
        ("category: {a: b}", "category", "mapping"),
        ("title: [a, b]", "title", "list"),
        ("title: yes", "title", "boolean"),
        ("business_key: 0012", "business_key", "number"),
    ],
)
def test_fields_of_the_wrong_type_are_rejected(frontmatter: str, field: str, got: str) -> None:
    message = parse_error(f"---\n{frontmatter}\n---\nbody")
    assert f"'{field}'" in message and got in message


def test_non_text_frontmatter_keys_are_rejected() -> None:
    assert "keys must be text" in parse_error("---\n2024: release\n---\nbody")


def test_empty_body_after_frontmatter_is_rejected() -> None:
    assert "no markdown body" in parse_error("---\ntitle: Only metadata\n---\n\n  \n")


def test_a_parse_error_reaches_the_uploader_as_a_400_that_says_why() -> None:
    # Its message is written for the API user: the upload answers it, never a 500.
    with pytest.raises(InvalidDocument) as info:
        document_validate(file_name="doc.md", raw=b"---\ntitle: Only metadata\n---\n",
                          max_bytes=LIMIT)
    assert (info.value.status_code, info.value.code) == (400, "invalid_document")
    assert "no markdown body" in str(info.value.detail)


def test_non_positive_limit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        parse_markdown(b"text", file_name="a.md", max_bytes=0)
