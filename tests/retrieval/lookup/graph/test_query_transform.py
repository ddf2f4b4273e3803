"""The deterministic query transformations (no model): what each strategy searches for."""

from __future__ import annotations

import pytest

from retrieval.lookup.graph.query_transform import (
    MAX_QUERIES,
    DeterministicQueryTransformer,
    decompose,
    rewrite,
)
from retrieval.lookup.transform import KnowledgeQueryTransformer, L0Document, L0Index

INDEX = L0Index([
    L0Document("1", "Redis 内存满了", "cache", ("redis", "maxmemory", "淘汰策略"), "ops"),
    L0Document("2", "Kafka consumer lag", "messaging", ("kafka", "consumer lag"), "ops"),
])


def queries(strategy: str, query: str) -> tuple[str, ...]:
    hints = KnowledgeQueryTransformer(INDEX).transform(query)
    return DeterministicQueryTransformer(strategy, INDEX).transform(query, hints).queries


def test_rewrite_drops_the_words_of_asking_and_keeps_identifiers() -> None:
    assert rewrite("请问 Redis 内存满了怎么办？") == "Redis 内存满了"
    assert rewrite("How do I fix ERR_CONNECTION_RESET on v2.3?") == (
        "fix ERR_CONNECTION_RESET on v2.3")
    assert rewrite("0x5d09") == "0x5d09"
    assert rewrite("怎么办") == "怎么办"  # nothing of the topic would be left: unchanged


def test_expand_adds_the_matched_domains_keywords_and_the_other_language() -> None:
    [expanded] = queries("EXPAND", "redis 内存满了")
    assert expanded.startswith("redis 内存满了 ")
    assert "maxmemory" in expanded and "淘汰策略" in expanded and "memory" in expanded
    assert expanded.count("redis") == 1  # a term the query has is not added again
    [plain] = queries("EXPAND", "zebra stripes")
    assert plain == "zebra stripes"  # no domain, no ops term: nothing to add


def test_decompose_splits_questions_and_clauses_but_not_a_list_of_names() -> None:
    assert decompose("Redis 内存满了怎么办？Kafka 消费积压怎么处理？") == (
        "Redis 内存满了怎么办", "Kafka 消费积压怎么处理")
    assert decompose("数据库主从延迟并且连接数打满") == ("数据库主从延迟", "连接数打满")
    assert decompose("the disk is full on node one and the pods keep restarting") == (
        "the disk is full on node one", "the pods keep restarting")
    assert decompose("Redis and MySQL timeouts") == ("Redis and MySQL timeouts",)
    assert len(decompose("a1? b2? c3? d4? e5? f6?")) == MAX_QUERIES


def test_multi_query_searches_original_rewritten_and_expanded_once_each() -> None:
    found = queries("MULTI_QUERY", "请问 kafka 积压怎么办")
    assert found[0] == "请问 kafka 积压怎么办"
    assert "kafka 积压" in found
    assert any("consumer lag" in q and "backlog" in q for q in found)
    assert len(found) == len(set(found)) <= MAX_QUERIES


def test_an_unknown_strategy_is_refused_when_configured() -> None:
    with pytest.raises(ValueError, match="unknown query transform"):
        DeterministicQueryTransformer("LLM_REWRITE", INDEX)
