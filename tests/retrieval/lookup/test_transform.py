"""L0 hints: domains, keywords and the category filter (no database)."""

from __future__ import annotations

from retrieval.lookup.transform import KnowledgeQueryTransformer, L0Document, L0Index
from retrieval.types import QueryHints

DOCS = [
    L0Document("1", "Redis 缓存击穿", "cache", ("redis", "缓存击穿", "TTL"), "ops"),
    L0Document("2", "Redis cluster failover", "cache", ("redis", "failover"), "ops"),
    L0Document("3", "MySQL 慢查询", "database", ("mysql", "慢查询", "索引"), "ops"),
    L0Document("4", "Java GC tuning", "jvm", ("java", "gc"), "runtime"),
    L0Document("5", "JVM heap dumps", "jvm", ("heap",), "diagnostics"),
    L0Document("6", "Untagged note", "", ("kafka",), ""),
]


def transform(query: str) -> QueryHints:
    return KnowledgeQueryTransformer(L0Index(DOCS)).transform(query)


def test_keyword_match_gives_domain_keywords_and_category() -> None:
    hints = transform("线上 Redis 出现缓存击穿怎么办")
    assert hints.domains == ("cache",)
    assert hints.keywords == ("redis", "缓存击穿")
    assert hints.category_filter == "ops"


def test_domain_name_alone_matches() -> None:
    assert transform("which cache settings matter").domains == ("cache",)


def test_title_match_counts_for_the_domain() -> None:
    hints = transform("see the redis cluster failover runbook")
    assert hints.domains == ("cache",)
    assert "failover" in hints.keywords


def test_chinese_keyword_is_a_substring_match() -> None:
    hints = transform("这个SQL有慢查询吗")
    assert hints.domains == ("database",)
    assert hints.keywords == ("慢查询",)


def test_case_and_full_width_are_folded() -> None:
    assert transform("ＲＥＤＩＳ memory").keywords == ("redis",)


def test_latin_terms_need_word_boundaries() -> None:
    hints = transform("javascript heapq gcc")
    assert hints == QueryHints()


def test_two_domains_give_no_category_filter() -> None:
    hints = transform("redis and mysql latency")
    assert hints.domains == ("cache", "database")
    assert hints.keywords == ("mysql", "redis")
    assert hints.category_filter is None


def test_one_domain_with_mixed_categories_gives_no_filter() -> None:
    hints = transform("java gc pauses")
    assert hints.domains == ("jvm",)
    assert hints.category_filter is None


def test_keyword_of_a_document_without_domain_is_reported_without_a_domain() -> None:
    hints = transform("kafka lag")
    assert hints == QueryHints(domains=(), keywords=("kafka",), category_filter=None)


def test_no_match_and_blank_query() -> None:
    assert transform("how do I bake bread") == QueryHints()
    assert transform("   ") == QueryHints()


def test_single_character_terms_are_ignored() -> None:
    index = L0Index([L0Document("9", "X", "x", ("a", "库"), "c")])
    assert index.match("a 库 x") == QueryHints()


def test_index_is_a_snapshot_of_its_input() -> None:
    docs = list(DOCS)
    index = L0Index(docs)
    docs.clear()
    assert index.match("redis").domains == ("cache",)


def test_a_domain_word_inside_a_compound_identifier_is_no_hint() -> None:
    # "heap" is a jvm keyword, but com.example.heap.Cache names a class: no category filter.
    assert transform("com.example.heap.Cache") == QueryHints()
    assert transform("heap com.example.Cache").domains == ("jvm",)


def test_a_hyphenated_tool_name_still_names_its_domain() -> None:
    assert transform("redis-cli --bigkeys").domains == ("cache",)


def test_the_nearest_domains_are_the_hinted_then_the_searched_then_the_largest() -> None:
    index = L0Index([L0Document("1", "A", "cache"), L0Document("2", "B", "database"),
                     L0Document("3", "C", "database"), L0Document("4", "D", "jvm"),
                     L0Document("5", "E", "network"), L0Document("6", "F", "")])
    assert index.nearest_domains(QueryHints(), (), 8) == ("database", "cache", "jvm", "network")
    hinted = QueryHints(domains=("network",))
    assert index.nearest_domains(hinted, ("4", "6", "99", "2"), 3) == (
        "network", "jvm", "database")
