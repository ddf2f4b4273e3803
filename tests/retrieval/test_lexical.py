"""The query's own words in a chunk's text: identifiers, content terms, and the gate that
reads them (no database)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from datasets.documents.services import dataset_create
from retrieval.analysis import normalize_text
from retrieval.lexical import query_terms, vocabulary_terms
from retrieval.lookup.post_process import LEXICAL_DISCOUNT, KnowledgeEvidencePostProcessor
from retrieval.types import QueryHints, RelevanceLevel, SearchHit
from tests.datasets.builders import markdown
from tests.retrieval.conftest import client_for, last_trace, lookup, ready
from tests.retrieval.lookup.test_post_process import hit


@pytest.mark.parametrize("query, identifiers", [
    ("0x5d09", ("0x5d09",)),
    ("ERROR 1040", ("ERROR", "1040")),
    ("MALLOC_ARENA_MAX", ("MALLOC_ARENA_MAX",)),
    ("how to use pt-query-digest?", ("pt-query-digest",)),
    ("com.example.cache.LocalCache", ("com.example.cache.LocalCache",)),
    ("upgrade to v2.3.", ("v2.3",)),
    ("C++ build fails", ("C++",)),
    ("BurstBalance 一直下降", ("BurstBalance",)),
    ("PLEG is not healthy", ("PLEG",)),
    ("exit code 137 OOMKilled", ("137", "OOMKilled")),
    ("How do I reverse a linked list in Python?", ()),
    ("Kafka consumers are falling behind", ()),
    ("今天北京天气怎么样", ()),
])
def test_identifiers_are_recognised_by_their_shape(query: str,
                                                    identifiers: tuple[str, ...]) -> None:
    assert query_terms(query).identifiers == identifiers


def test_a_query_of_identifiers_only_counts_words_and_cjk_characters() -> None:
    assert query_terms("0x5d09").identifiers_only
    assert query_terms("MALLOC_ARENA_MAX").identifiers_only  # one term of three words
    assert query_terms("ERROR 1040").identifiers_only
    assert not query_terms("PLEG is not healthy").identifiers_only
    assert not query_terms("RabbitMQ 消息堆积").identifiers_only
    assert not query_terms("").identifiers_only


def test_identifiers_match_whole_terms_case_folded() -> None:
    terms = query_terms("ERROR 1040")
    assert terms.identifiers_in(normalize_text(
        "mysql: error 1040 (HY000): Too many connections")) == ("ERROR", "1040")
    assert terms.identifiers_in(normalize_text("ERROR 10400 elsewhere")) == ("ERROR",)


def test_coverage_is_the_share_of_content_terms_stemmed_as_bm25_stems_them() -> None:
    terms = query_terms("Why are the Kafka consumers falling behind?")
    assert terms.terms == ("kafka", "consum", "fall", "behind")  # stop words left out
    assert terms.coverage(normalize_text("a Kafka consumer that falls behind the producer")) == 1
    assert terms.coverage("nothing of it") == 0.0
    chinese = query_terms("消息堆积")
    assert chinese.terms == ("消息", "息堆", "堆积")
    assert chinese.coverage("队列消息很多") == pytest.approx(1 / 3)
    assert query_terms("how do I").coverage("anything") == 0.0


def _gate(hits: list[SearchHit], query: str):  # type: ignore[no-untyped-def]
    post = KnowledgeEvidencePostProcessor(5, 2, 0.35, 0.6, max_l2_distance=2.0)
    return post.process(hits, "hybrid", QueryHints(), query)


def test_a_chunk_with_every_identifier_of_the_query_is_precise_at_any_distance() -> None:
    far = 1.9  # dense quality 0.05: the gate alone would answer EMPTY
    result = _gate([hit(1, "jvm", content="\"main\" nid=0x5d09 runnable", l2=far),
                    hit(2, "redis", content="unrelated", l2=1.2)], "0x5d09")
    assert result.relevance_level is RelevanceLevel.PRECISE
    [chunk] = result.chunks  # the unrelated chunk stays under the threshold
    assert chunk.doc_id == "jvm" and "identifier:0x5d09" in chunk.hit_reasons
    # One identifier of two is not enough.
    assert _gate([hit(1, content="ERROR 1045 access denied", l2=far)],
                 "ERROR 1040").relevance_level is RelevanceLevel.NONE


def test_a_chunk_that_shares_no_word_with_the_query_needs_a_closer_distance() -> None:
    # dense quality 0.4: above the reference threshold (0.35) on its own
    l2 = 1.2
    assert 0.4 * (1 - LEXICAL_DISCOUNT) < 0.35
    off = _gate([hit(1, content="consumer group lag on kafka", l2=l2)],
                "How do I reverse a linked list in Python?")
    assert off.relevance_level is RelevanceLevel.NONE and off.chunks == ()
    on = _gate([hit(1, content="consumer group lag on kafka", l2=l2)],
               "kafka consumer lag")
    assert on.relevance_level is RelevanceLevel.REFERENCE and len(on.chunks) == 1
    # A precise distance is precise whatever the words (a paraphrase).
    close = _gate([hit(1, content="consumer group lag on kafka", l2=0.4)], "消息积压")
    assert close.relevance_level is RelevanceLevel.PRECISE


def test_without_a_gate_no_text_is_judged() -> None:
    post = KnowledgeEvidencePostProcessor(5, 2, 0.0, 0.0, max_l2_distance=2.0)
    result = post.process([hit(1, content="x", l2=1.9)], "hybrid", QueryHints(), "reverse list")
    assert [c.quality for c in result.chunks] == [pytest.approx(0.05)]


# --- through the REST tool, on real Milvus ---------------------------------------------------

IDENTIFIER_RUNBOOKS = {
    # name: (the text holding the identifier, a decoy holding its parts)
    "v2.3": ("Upgrade the agent to v2.3 before the cut-over.",
             "Version v2 of the agent ships 3 plugins."),
    "C++": ("The C++ build needs the new toolchain.",
            "The C build needs a new toolchain too."),
    "ERR_CONNECTION_RESET": ("Browsers show ERR_CONNECTION_RESET when the proxy drops the socket.",
                             "A connection reset by peer is an error of the proxy."),
    "0x80070005": ("Windows update fails with 0x80070005: access denied.",
                   "The update fails with code 0x8007 and 0005 in the log."),
}


@pytest.mark.django_db
def test_an_identifier_finds_the_chunk_that_holds_it_not_the_one_with_its_parts(
        ingest: Any, make_key: Any) -> None:
    key, admin_secret = make_key(role="admin")
    dataset = dataset_create(tenant=key.tenant, name="ids")
    for number, (holder, decoy) in enumerate(IDENTIFIER_RUNBOOKS.values()):
        ingest(dataset, f"holder-{number}.md", markdown(f"Note {number}", {"Fix": holder}))
        ingest(dataset, f"decoy-{number}.md", markdown(f"Other {number}", {"Fix": decoy}))
    agent = client_for(make_key()[1])

    for number, identifier in enumerate(IDENTIFIER_RUNBOOKS):
        body = ready(lookup(agent, identifier))
        assert body["evidence"][0]["source"] == f"holder-{number}.md", identifier
        assert body["relevance_level"] == "PRECISE", identifier

    def fused_scores(query: str) -> list[float]:
        session = f"s-{uuid.uuid4().hex}"
        ready(lookup(agent, query, session_id=session))
        trace = last_trace(client_for(admin_secret), session)
        return [c["score"] for s in trace["stages"] if s["stage"] == "retrieve"
                for c in s["candidates"]]

    # Only identifiers: BM25 alone ranks. Only the holder has the term, so it scores 1 and
    # every chunk the dense arm brought scores 0; with words besides, the dense arm counts.
    alone = fused_scores("0x80070005")
    assert alone[0] == pytest.approx(1.0) and set(alone[1:]) == {0.0}
    with_words = fused_scores("Windows update fails with 0x80070005")
    assert any(0.0 < score < 1.0 for score in with_words)


def test_the_chunk_side_stems_each_word_as_bm25_analysis_does() -> None:
    from retrieval.analysis import bm25_text
    from retrieval.lexical import _WORD, _stems

    text = normalize_text("Consumers were LAGGING: err_connection_reset, 2xx codes, x86_64 hosts")
    assert _stems(text) == list(dict.fromkeys(_WORD.findall(bm25_text(text))))


def test_vocabulary_terms_are_the_query_words_the_texts_hold() -> None:
    texts = ["Redis evicts keys when Memory is full. Redis 内存 满了"]
    query = "Why does my REDIS evict payrollzq7 keys, memories ... and 内存满?"
    # Stemmed as BM25 stems them (evict/evicts, memories/memory), written as the query wrote
    # them (folded), in its order; words no text holds (payrollzq7, "why") never.
    assert vocabulary_terms(query, texts, limit=10) == ("redis", "evict", "keys", "memories",
                                                        "内存")
    assert vocabulary_terms(query, texts, limit=2) == ("redis", "evict")
    assert vocabulary_terms("payrollzq7 the and", texts, limit=4) == ()
    assert vocabulary_terms(query, [], limit=4) == ()


def test_chinese_vocabulary_terms_are_words_not_bigrams() -> None:
    """Issue 36 item 17: a topic on the knowledge gaps page reads "数据库", not "数据, 据库"."""
    texts = ["数据库的连接池已满：排查慢查询。主从节点之间的复制出现延迟。"]
    assert vocabulary_terms("数据库连接池满了怎么排查", texts, limit=10) == (
        "数据库", "连接池", "排查")
    # A word the texts do not hold whole: its own words that they do, none overlapping.
    assert vocabulary_terms("主从复制延迟", texts, limit=10) == ("主从", "复制", "延迟")
    assert vocabulary_terms("数据仓库", ["数据很多"], limit=10) == ("数据",)
    assert vocabulary_terms("薪资核算", texts, limit=10) == ()  # no word of the texts


def test_a_lookup_keeps_topic_terms_of_its_candidates_even_when_empty() -> None:
    post = KnowledgeEvidencePostProcessor(5, 2, 0.5, 0.9)
    hits = [hit(1, content="Kafka consumer lag grows", l2=1.9)]
    result = post.process(hits, "hybrid", QueryHints(), "kafka lag zqmarker tomorrow")
    assert result.relevance_level is RelevanceLevel.NONE and not result.chunks
    assert result.vocabulary == ("kafka", "lag")
