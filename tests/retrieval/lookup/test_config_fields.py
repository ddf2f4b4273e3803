"""Every RagConfig field changes what a lookup does: one test per field, through the REST tool
endpoint on real Milvus, reading the answer and the audit trace an operator reads."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.models import ToolInvocation
from datasets.documents.services import document_set_activation
from datasets.models import Dataset
from retrieval.index.embedders import get_embedder
from retrieval.lookup.graph.translate import CACHE
from retrieval.ragconfig.services import rag_config_update
from retrieval.ragconfig.settings import SETTING_NAMES
from tests.retrieval.chat_server import asks_to_judge, chat_server
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    import_runbooks,
    last_trace,
    lookup,
)
from tests.retrieval.rerank_server import RerankServer, rerank_server

KAFKA_LAG = "kafka consumer group lag keeps growing"
# The consumers' backlog keeps growing: none of the English runbook's words, and the CC-CEDICT
# glosses of its words (consume, backlog, rise) are not the runbook's (consumer, lag) either.
KAFKA_ZH = "消费组的积压一直在涨，消息处理不过来"
# No domain, title or keyword of any document in it: no category hint narrows the search, so
# every chunk of the dataset is a candidate.
PLAIN = "messages are read more slowly than they are written"
# Which test proves which field (the last test checks that none is missing).
FIELD_TESTS: dict[str, str] = {}


def proves(*names: str) -> Any:
    def mark(test: Any) -> Any:
        for name in names:
            FIELD_TESTS[name] = test.__name__
        return test
    return mark


class Tool:
    """The tenant's agent and operator, and its default config."""

    def __init__(self, imported: Imported, make_key: MakeKey) -> None:
        self.imported = imported
        self.agent = client_for(make_key("acme")[1])
        self.admin = client_for(make_key("acme", role="admin")[1])

    def configure(self, **values: Any) -> None:
        rag_config_update(config=None, tenant=self.imported.tenant, values=values,
                          changed_by="test")

    def ask(self, query: str = KAFKA_LAG, **values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answer, trace) of one lookup with the config changed by `values` first."""
        if values:
            self.configure(**values)
        session = f"s-{uuid.uuid4().hex}"
        response = lookup(self.agent, query, session_id=session)
        assert response.status_code in (200, 503), response.content
        return response.json(), last_trace(self.admin, session)

    def stems(self, body: dict[str, Any]) -> list[str | None]:
        return [self.imported.stem_of(e) for e in evidence_ids(body)]


@pytest.fixture
def tool(acme: Imported, make_key: MakeKey) -> Tool:
    return Tool(acme, make_key)


@pytest.fixture
def reranker(settings: Any) -> Iterator[RerankServer]:
    """A real rerank endpoint (scripted), configured as KB_RERANK_BASE_URL."""
    with rerank_server() as server:
        settings.KB_RERANK_BASE_URL = server.url
        yield server


def stage(trace: dict[str, Any], name: str) -> dict[str, Any]:
    found = [s for s in trace["stages"] if s["stage"] == name]
    assert found, [s["stage"] for s in trace["stages"]]
    return found[-1]


def ran(trace: dict[str, Any]) -> list[str]:
    """The retrievers that finished, in the order they were called."""
    return [e["retriever"] for e in trace["graph"]["retrievers"] if e["event"] == "finish"]


def rounds(trace: dict[str, Any]) -> int:
    """The search rounds of a lookup: two when its L0 category's round was not PRECISE and
    the whole scope was searched too."""
    return 2 if trace["retry"]["ran"] else 1


@pytest.mark.django_db
@proves("enable_query_transform", "query_transform_strategy")
def test_query_transform_changes_what_is_searched(tool: Tool) -> None:
    _, trace = tool.ask("kafka lag", enable_query_transform=True,
                        query_transform_strategy="EXPAND")
    assert "consumer lag" in stage(trace, "query_transform")["note"]
    # DECOMPOSE: each sub-question is its own search.
    body, trace = tool.ask("why does kafka lag grow? how do I alert on it?",
                           query_transform_strategy="DECOMPOSE")
    assert stage(trace, "query_transform")["note"].startswith("DECOMPOSE: 2 sub-question")
    assert ran(trace) == ["HYBRID", "HYBRID"] * rounds(trace) and "kafka" in tool.stems(body)
    _, trace = tool.ask("请问 kafka lag 怎么办", query_transform_strategy="MULTI_QUERY")
    assert len(ran(trace)) == 3 * rounds(trace)  # original, rewritten, expanded
    _, trace = tool.ask(enable_query_transform=False)
    assert not [s for s in trace["stages"] if s["stage"].startswith("query_transform")]
    assert ran(trace) == ["HYBRID"]


@pytest.mark.django_db
@proves("bilingual_bm25")
def test_bilingual_bm25_finds_an_english_runbook_by_a_chinese_questions_words(
        tool: Tool) -> None:
    question = "消费者一直落后，消息越堆越多"  # the consumers fall behind: no word of the runbook
    body, trace = tool.ask(question, enabled_retrievers=["BM25"], bilingual_bm25=True)
    assert tool.stems(body)[:1] == ["kafka"]
    note = stage(trace, "bilingual")["note"]
    assert note.startswith("BM25 also searched") and "consumer" not in note  # a count only
    body, trace = tool.ask(question, bilingual_bm25=False)
    assert "kafka" not in tool.stems(body)
    assert not [s for s in trace["stages"] if s["stage"].startswith("bilingual")]
    # English terms only where an English document may be found: none is live.
    for document in tool.imported.documents.values():
        if document.language == "en":
            document_set_activation(document=document, activated=False)
    _, trace = tool.ask(question, bilingual_bm25=True)
    assert not [s for s in trace["stages"] if s["stage"].startswith("bilingual")]


@pytest.mark.django_db
@proves("translate_query", "translation_budget_ms")
def test_translate_query_searches_a_chinese_question_with_its_english_translation(
        tool: Tool, settings: Any) -> None:
    CACHE.clear()
    with chat_server() as model:  # the deployment's local model; no chat model
        settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", model.url
        body, trace = tool.ask(KAFKA_ZH, translate_query=True)
        assert tool.stems(body)[:1] == ["kafka"] and len(model.requests) == 1
        assert stage(trace, "translate")["note"].startswith("zh→en by openai/local in ")
        body, trace = tool.ask(KAFKA_ZH, translate_query=False)
        assert "kafka" not in tool.stems(body) and len(model.requests) == 1
        assert not [s for s in trace["stages"] if s["stage"] == "translate"]
        model.behaviour, model.delay_s = "slow", 3.0
        started = time.monotonic()
        body, trace = tool.ask("磁盘满了怎么办", translate_query=True, translation_budget_ms=200)
        assert time.monotonic() - started < 2.0 and body["evidence_status"] != "UNAVAILABLE"
        assert "did not answer within 0.20 s" in stage(trace, "translate")["note"]
    CACHE.clear()


REDIS_EN = b"""---
title: Redis memory full
category: cache
---
# Redis memory full

## OOM command not allowed

Writes fail with `OOM command not allowed when used memory > 'maxmemory'`: raise maxmemory or
set an eviction policy such as allkeys-lru, then check which keys grew.
"""
DISK_ZH = """---
title: 磁盘满了
category: storage
---
# 磁盘满了

## 清理空间

磁盘满了以后写入会失败：先用 df -h 找到满的分区，再用 du 找到占用最大的目录。
""".encode()
JUDGED = re.compile(r"the relevance model rated the translation's answer (\d\.\d{3}) \((\w+)\), "
                    r"the question's (\d\.\d{3}) \((\w+)\): served the (translation|question)'s")


@pytest.mark.django_db
@proves("judge_translation")
def test_judge_translation_searches_the_translation_alone_and_the_model_chooses(
        kb: Any, ingest: Any, settings: Any, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """In a corpus of both languages every question is translated, a PRECISE one too, its
    translation searched alone as well, and the answer the relevance model rates higher (at
    no lower a level) serves; the trace gives both ratings."""
    from retrieval.lookup import relevance

    redis = ingest(kb.dataset, "redis.md", REDIS_EN)
    ingest(kb.dataset, "disk.md", DISK_ZH)

    def ask(query: str, **values: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        if values:
            rag_config_update(config=None, tenant=kb.tenant, values=values, changed_by="test")
        session = f"s-{uuid.uuid4().hex}"
        response = lookup(kb.tool, query, session_id=session)
        assert response.status_code == 200, response.content
        return response.json(), last_trace(kb.admin, session)

    def judged(body: dict[str, Any], trace: dict[str, Any]) -> str:
        """Which answer served, by the note; the evidence is that search's."""
        found = JUDGED.fullmatch(stage(trace, "judge_translation")["note"])
        assert found, stage(trace, "judge_translation")["note"]
        names = [s["stage"] for s in trace["stages"]]
        own = names.index(next(n for n in names if n.endswith("[translation]")))
        # What each gate kept first: the question's searches', then the translation's.
        firsts = [[c["evidence_key"] for c in s["candidates"]][:1] for s in trace["stages"]
                  if s["stage"] == "post_process"]
        questions = len([n for n in names[:own] if n == "post_process"])
        served = [e["document_id"] for e in body["evidence"]][:1]
        if found[5] == "question":
            assert served in firsts[:questions], (served, firsts)
        else:
            assert served == firsts[-1], (served, firsts)
        return found[5]

    precise = "redis writes fail with OOM command not allowed"
    crossed = "缓存的内存满了，写入失败怎么办"
    CACHE.clear()
    with chat_server() as model:
        settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", model.url
        body, trace = ask(precise)
        assert body["relevance_level"] == "PRECISE" and model.requests == []
        assert not [s for s in trace["stages"] if s["stage"].startswith("judge_translation")]
        plain, _ = ask(crossed)

        asked = len(model.requests)
        body, trace = ask(precise, judge_translation=True)
        assert len(model.requests) == asked + 1  # PRECISE, and still translated
        judged(body, trace)
        assert body["evidence"][0]["document_id"].startswith(f"{redis.doc_id}#")
        body, trace = ask(crossed)
        judged(body, trace)

        # An embedder without a fitted model: as without the setting, and the trace says so.
        monkeypatch.setattr(relevance, "MODELS_DIR", tmp_path)
        relevance.model_for.cache_clear()
        try:
            unjudged, trace = ask(crossed)
            assert stage(trace, "judge_translation")["note"].startswith(
                "the embedder has no fitted relevance model")
            assert evidence_ids(unjudged) == evidence_ids(plain)
            _, trace = ask(precise)
            assert "translate" not in trace["timings"]
            assert stage(trace, "judge_translation")["note"].startswith(
                "the embedder has no fitted relevance model")
        finally:
            relevance.model_for.cache_clear()
    CACHE.clear()


@pytest.mark.django_db
@proves("enabled_retrievers")
def test_enabled_retrievers_choose_the_search(tool: Tool) -> None:
    for retrievers, mode in ((["VECTOR"], "dense"), (["BM25"], "bm25"), (["HYBRID"], "hybrid")):
        body, trace = tool.ask(enabled_retrievers=retrievers)
        assert body["evidence_status"] == "READY" and "kafka" in tool.stems(body)
        assert trace["mode"] == mode and ran(trace) == retrievers


@pytest.mark.django_db
@proves("retrieval_execution_mode")
def test_execution_modes_run_the_retrievers_as_they_say(tool: Tool) -> None:
    body, trace = tool.ask(retrieval_execution_mode="PARALLEL",
                           enabled_retrievers=["VECTOR", "BM25"])
    assert sorted(ran(trace)) == ["BM25", "VECTOR"] and "kafka" in tool.stems(body)
    assert trace["mode"] == "parallel:VECTOR+BM25"

    # SEQUENTIAL: the second retriever only when the first scored below the threshold.
    _, trace = tool.ask(retrieval_execution_mode="SEQUENTIAL", quality_threshold=0.0,
                        enabled_retrievers=["BM25", "VECTOR"])
    assert ran(trace) == ["BM25"]
    _, trace = tool.ask(quality_threshold=1.0)
    assert ran(trace) == ["BM25", "VECTOR"]
    assert "below the threshold" in stage(trace, "sequential[BM25]")["note"]

    # HYBRID: one Milvus request fuses the two arms, with Milvus's RRF of rrf_k.
    body, trace = tool.ask(retrieval_execution_mode="HYBRID",
                           enabled_retrievers=["VECTOR", "BM25"], rrf_k=5)
    assert trace["mode"] == "milvus_hybrid" and ran(trace) == ["HYBRID"]
    assert body["evidence_status"] == "READY" and "kafka" in tool.stems(body)
    [retrieved] = [s for s in trace["stages"] if s["stage"].startswith("retrieve")]
    top = retrieved["candidates"][0]["score"]
    assert 1 / 6 < top <= 2 / 6 + 1e-6  # in both arms' lists, near their tops: fused ranks


@pytest.mark.django_db
@proves("max_results")
def test_max_results_is_what_each_retriever_fetches(tool: Tool) -> None:
    _, trace = tool.ask(PLAIN)
    [hits] = [e["hits"] for e in trace["graph"]["retrievers"] if e["event"] == "finish"]
    assert hits > 2
    body, trace = tool.ask(PLAIN, max_results=2)
    assert [e["hits"] for e in trace["graph"]["retrievers"] if e["event"] == "finish"] == [2]
    assert len(body["evidence"]) <= 2


@pytest.mark.django_db
@proves("min_score")
def test_min_score_drops_candidates_below_it(tool: Tool) -> None:
    body, _ = tool.ask(enabled_retrievers=["VECTOR"])
    assert body["evidence_status"] == "READY"
    body, trace = tool.ask(min_score=0.99)
    assert body["evidence_status"] == "EMPTY"
    assert trace["graph"]["plan"]["min_score"] == 0.99


@pytest.mark.django_db
@proves("aggregation_strategy")
def test_aggregation_strategies_order_the_lists_as_they_say(tool: Tool) -> None:
    parallel = {"retrieval_execution_mode": "PARALLEL", "enabled_retrievers": ["VECTOR", "BM25"]}
    orders = {}
    for strategy in ("DEDUPLICATE", "RANK", "MERGE"):
        _, trace = tool.ask(PLAIN, aggregation_strategy=strategy, **parallel)
        retrieved = stage(trace, "retrieve")["candidates"]
        aggregated = stage(trace, "aggregate")
        assert aggregated["note"] == f"{strategy} of 2 lists"
        keys = [c["evidence_key"] for c in aggregated["candidates"]]
        assert len(keys) == len(set(keys))  # each chunk once
        orders[strategy] = keys
        if strategy == "DEDUPLICATE":  # the first list, then what the second adds
            listed = list(dict.fromkeys(c["evidence_key"] for c in retrieved))
            assert keys == listed[:len(keys)]
        else:
            scores = [c["score"] for c in aggregated["candidates"]]
            assert scores == sorted(scores, reverse=True)
    assert orders["DEDUPLICATE"] != orders["RANK"] or orders["RANK"] != orders["MERGE"]


@pytest.mark.django_db
@proves("fusion_method", "rrf_k", "dense_weight", "bm25_weight")
def test_fusion_weights_and_k_are_the_fused_scores(tool: Tool) -> None:
    _, trace = tool.ask(PLAIN, fusion_method="RRF", rrf_k=9, dense_weight=1.0, bm25_weight=0.0)
    scores = [c["score"] for c in stage(trace, "retrieve")["candidates"]]
    assert scores[0] == pytest.approx(1 / 10, abs=1e-6)  # dense rank 1 alone counts
    _, trace = tool.ask(PLAIN, rrf_k=60, dense_weight=0.0, bm25_weight=1.0)
    scores = [c["score"] for c in stage(trace, "retrieve")["candidates"]]
    assert scores[0] == pytest.approx(1 / 61, abs=1e-6)
    # CONVEX: BM25's scores normalised within the query, its best 1 and its last 0; the dense
    # list (weight 0) adds nothing, and rrf_k plays no part.
    _, trace = tool.ask(PLAIN, fusion_method="CONVEX", dense_weight=0.0, bm25_weight=1.0)
    scores = [c["score"] for c in stage(trace, "retrieve")["candidates"]]
    assert scores[0] == pytest.approx(1.0) and min(scores) == pytest.approx(0.0)
    _, trace = tool.ask(PLAIN, fusion_method="CONVEX", dense_weight=0.3, bm25_weight=0.7)
    scores = [c["score"] for c in stage(trace, "retrieve")["candidates"]]
    assert 0.3 <= scores[0] <= 1.0 and scores == sorted(scores, reverse=True)
    # ADAPTIVE: CONVEX where BM25's best hits hold the question's terms; where they hold none
    # (words no runbook has), the dense share rises to 0.8 whatever the weights say.
    _, trace = tool.ask(PLAIN, fusion_method="ADAPTIVE", dense_weight=0.0, bm25_weight=1.0)
    assert stage(trace, "retrieve")["candidates"][0]["score"] == pytest.approx(1.0)
    unknown = "zyxwvut plughxyzzy frobnicatory"
    for method, top in (("CONVEX", 0.0), ("ADAPTIVE", 0.8)):
        _, trace = tool.ask(unknown, fusion_method=method, dense_weight=0.0, bm25_weight=1.0)
        assert stage(trace, "retrieve")["candidates"][0]["score"] == pytest.approx(top)


@pytest.mark.django_db
@proves("retrieve_k")
def test_retrieve_k_bounds_the_candidates_after_aggregation(tool: Tool) -> None:
    parallel = {"retrieval_execution_mode": "PARALLEL", "enabled_retrievers": ["VECTOR", "BM25"]}
    _, trace = tool.ask(PLAIN, retrieve_k=20, **parallel)
    assert len(stage(trace, "aggregate")["candidates"]) > 5
    _, trace = tool.ask(PLAIN, retrieve_k=5)
    assert len(stage(trace, "aggregate")["candidates"]) == 5


@pytest.mark.django_db
@proves("return_n", "max_chunks_per_document")
def test_return_n_and_the_per_document_limit(tool: Tool) -> None:
    body, _ = tool.ask(return_n=5, max_chunks_per_document=1)
    assert tool.stems(body).count("kafka") == 1
    body, _ = tool.ask(max_chunks_per_document=3)
    assert tool.stems(body).count("kafka") == 3
    body, _ = tool.ask(return_n=2)
    assert len(body["evidence"]) == 2


@pytest.mark.django_db
@proves("reference_threshold", "precise_threshold", "max_l2_distance")
def test_thresholds_and_the_distance_scale_decide_relevance(tool: Tool) -> None:
    body, _ = tool.ask()
    assert body["relevance_level"] == "PRECISE"
    body, _ = tool.ask(precise_threshold=1.0)
    assert (body["evidence_status"], body["relevance_level"]) == ("READY", "REFERENCE")
    body, _ = tool.ask(reference_threshold=1.0)
    assert body["evidence_status"] == "EMPTY"
    tool.configure(reference_threshold=0.35, precise_threshold=0.6)
    body, _ = tool.ask(max_l2_distance=0.01)  # every chunk is "far": quality 0
    assert body["evidence_status"] == "EMPTY"


def gate_notes(trace: dict[str, Any]) -> list[str]:
    return [s["note"] for s in trace["stages"] if s["stage"] == "post_process"]


@pytest.mark.django_db
@proves("relevance_gate", "model_reference_threshold", "model_precise_threshold")
def test_the_relevance_model_judges_with_its_own_thresholds(
        tool: Tool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """MODEL: the embedder's relevance model (retrieval/lookup/relevance.py) judges, against
    the model_… thresholds; the trace's post_process stage names it."""
    from retrieval.lookup import relevance

    embedder = get_embedder().name
    model = relevance.model_for(embedder)
    assert model is not None, "each offline embedder has a model"
    body, trace = tool.ask(relevance_gate="MODEL")
    assert body["relevance_level"] == "PRECISE" and "kafka" in tool.stems(body)
    judged_by = f"MODEL ({embedder}) gate, fit {model.fingerprint},"
    assert gate_notes(trace) and all(n.startswith(judged_by) for n in gate_notes(trace))
    off_topic, _ = tool.ask("how do I bake sourdough bread")
    assert off_topic["evidence_status"] == "EMPTY"
    body, _ = tool.ask(model_precise_threshold=1.0)
    assert (body["evidence_status"], body["relevance_level"]) == ("READY", "REFERENCE")
    body, _ = tool.ask(model_reference_threshold=1.0)
    assert body["evidence_status"] == "EMPTY"
    # The distance's thresholds do not reach the model, nor the model's the distance.
    tool.configure(model_reference_threshold=0.35, model_precise_threshold=0.5)
    body, _ = tool.ask(reference_threshold=1.0, precise_threshold=1.0)
    assert body["relevance_level"] == "PRECISE"
    body, trace = tool.ask(relevance_gate="DISTANCE")
    assert body["evidence_status"] == "EMPTY"
    assert all(n.startswith("DISTANCE gate") for n in gate_notes(trace))
    # An embedder with no fitted model reads the distance, with the distance's thresholds.
    monkeypatch.setattr(relevance, "MODELS_DIR", tmp_path)
    relevance.model_for.cache_clear()
    try:
        body, trace = tool.ask(relevance_gate="MODEL")
        assert body["evidence_status"] == "EMPTY"  # reference_threshold 1.0 holds
        assert all(n.startswith("DISTANCE gate") for n in gate_notes(trace))
    finally:
        relevance.model_for.cache_clear()


@pytest.mark.django_db
@proves("relevance_order")
def test_the_relevance_model_orders_the_candidates_when_asked(
        tool: Tool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """How it orders them: tests/retrieval/lookup/test_relevance.py; here, that the field
    reaches the lookup, whichever gate judges, and the trace says so."""
    from retrieval.lookup import relevance

    model = relevance.model_for(get_embedder().name)
    assert model is not None, "each offline embedder has a model"
    ordered = f"; ordered by the relevance model ({model.embedder}), fit {model.fingerprint},"
    body, trace = tool.ask(relevance_order=True)
    assert body["evidence_status"] == "READY" and tool.stems(body)[0] == "kafka"
    assert gate_notes(trace) and all(
        n.startswith("DISTANCE gate" + ordered) for n in gate_notes(trace))
    body, trace = tool.ask(relevance_gate="MODEL")
    assert body["evidence_status"] == "READY"
    assert gate_notes(trace) and all(ordered in n for n in gate_notes(trace))
    _, trace = tool.ask(relevance_order=False)
    assert gate_notes(trace) and not any("ordered" in n for n in gate_notes(trace))
    # An embedder with no fitted model keeps the search's order.
    monkeypatch.setattr(relevance, "MODELS_DIR", tmp_path)
    relevance.model_for.cache_clear()
    try:
        body, trace = tool.ask(relevance_order=True)
        assert tool.stems(body)[0] == "kafka"
        assert gate_notes(trace) and not any("ordered" in n for n in gate_notes(trace))
    finally:
        relevance.model_for.cache_clear()


@pytest.mark.django_db
@proves("max_context_chars", "max_excerpt_chars")
def test_packing_limits_bound_the_excerpts(tool: Tool) -> None:
    body, _ = tool.ask(max_excerpt_chars=200, max_chunks_per_document=5)
    assert body["evidence"] and all(len(e["excerpt"]) <= 200 for e in body["evidence"])
    body, _ = tool.ask(max_context_chars=250)
    assert sum(len(e["excerpt"]) for e in body["evidence"]) <= 250 and body["truncated"]


@pytest.mark.django_db
@proves("enable_quality_assessment", "quality_threshold")
def test_quality_assessment_grades_the_evidence_and_caps_the_level(tool: Tool) -> None:
    body, trace = tool.ask(enable_quality_assessment=True, quality_threshold=0.0)
    assert "quality" in stage(trace, "quality[0]")["note"]
    assert body["relevance_level"] == "PRECISE"
    assert trace["graph"]["attempts"][0]["quality"] > 0.5
    body, trace = tool.ask(quality_threshold=1.0)  # nothing reaches it
    assert (body["evidence_status"], body["relevance_level"]) == ("READY", "REFERENCE")
    _, trace = tool.ask(enable_quality_assessment=False)
    assert trace["graph"]["attempts"][0]["quality"] is None


@pytest.mark.django_db
@proves("enable_correction", "max_retry_count")
def test_correction_retries_with_a_changed_plan_and_stops(tool: Tool) -> None:
    body, trace = tool.ask(enable_quality_assessment=True, enable_correction=True,
                           quality_threshold=1.0, max_retry_count=2)
    attempts = trace["graph"]["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1, 2]  # never more than 1 + max_retry_count
    assert attempts[1]["change"].startswith("wider")
    assert attempts[2]["retrievers"] == ["VECTOR", "BM25"]  # the hybrid search's arms
    assert body["evidence_status"] == "READY"
    _, trace = tool.ask(max_retry_count=0)
    assert len(trace["graph"]["attempts"]) == 1
    _, trace = tool.ask(max_retry_count=2, quality_threshold=0.0)  # good at once: no retry
    assert len(trace["graph"]["attempts"]) == 1


@pytest.mark.django_db
@proves("enable_fallback")
def test_a_failing_stage_falls_back_or_answers_unavailable(tool: Tool) -> None:
    # Rerank on, but this process has no reranker: the stage fails.
    body, trace = tool.ask(enable_rerank=True, enable_fallback=True)
    assert body["evidence_status"] == "READY" and "kafka" in tool.stems(body)
    assert "no reranker is configured" in trace["graph"]["fallback"]
    assert any(s["stage"] == "fallback" for s in trace["stages"])
    body, trace = tool.ask(enable_fallback=False)
    assert body["evidence_status"] == "UNAVAILABLE"
    assert "no reranker is configured" in trace["error"]


@pytest.mark.django_db
@proves("enable_rerank", "rerank_top_n")
def test_rerank_reorders_the_candidates_and_keeps_its_top_n(tool: Tool,
                                                            reranker: RerankServer) -> None:
    reranker.favourite = "alert"
    body, trace = tool.ask(max_chunks_per_document=5, enable_rerank=True, rerank_top_n=5)
    assert "Alert when" in body["evidence"][0]["excerpt"]
    assert stage(trace, "rerank")["note"].startswith("http: top 5 of")
    [sent] = reranker.requests
    assert sent["query"] == KAFKA_LAG and sent["top_n"] == 5
    reranker.favourite = "partitions"
    body, _ = tool.ask(rerank_top_n=1)
    assert len(body["evidence"]) == 1 and "partition" in body["evidence"][0]["excerpt"]
    _, trace = tool.ask(enable_rerank=False)
    assert len(reranker.requests) == 2 and "rerank" not in [s["stage"] for s in trace["stages"]]


@pytest.mark.django_db
@proves("timeout_millis")
def test_one_deadline_bounds_the_whole_lookup(tool: Tool, reranker: RerankServer) -> None:
    reranker.behaviour, reranker.delay_s = "slow", 5.0
    started = time.monotonic()
    body, trace = tool.ask(enable_rerank=True, timeout_millis=1000, enable_fallback=False)
    assert time.monotonic() - started < 4.0
    assert body["evidence_status"] == "UNAVAILABLE"
    assert "the reranker did not answer within" in trace["error"]
    body, trace = tool.ask(enable_fallback=True)
    assert body["evidence_status"] == "READY" and "kafka" in tool.stems(body)
    assert "did not answer within" in trace["graph"]["fallback"]


NGINX_502 = "nginx 502 bad gateway upstream connection refused"


@pytest.mark.django_db
@proves("metadata_filters")
def test_metadata_filters_narrow_the_search_inside_milvus(tool: Tool) -> None:
    body, _ = tool.ask(NGINX_502)
    assert tool.stems(body)[0] == "nginx"
    body, trace = tool.ask(NGINX_502, metadata_filters={"category": "messaging"})
    assert set(tool.stems(body)) <= {"kafka"}
    assert trace["filters"]["metadata"] == 'category in ["messaging"]'
    body, _ = tool.ask(NGINX_502, metadata_filters={"domain": ["web", "messaging"]})
    assert tool.stems(body)[0] == "nginx"
    body, _ = tool.ask(NGINX_502, metadata_filters={"file_name": "kafka.md"})
    assert set(tool.stems(body)) <= {"kafka"}
    body, _ = tool.ask(NGINX_502, metadata_filters={"updated_after": "2000-01-01"})
    assert tool.stems(body)[0] == "nginx"
    body, trace = tool.ask(NGINX_502, metadata_filters={"updated_before": "2000-01-01"})
    assert body["evidence_status"] == "EMPTY"
    assert trace["filters"]["metadata"] == "updated_at < 946684800"
    # A value is a quoted literal: it cannot end the string early and add a clause.
    body, _ = tool.ask(NGINX_502, metadata_filters={
        "category": 'web" or tenant_id != 0 or category == "x'})
    assert body["evidence_status"] == "EMPTY"


@pytest.mark.django_db
@proves("kb_scope")
def test_kb_scope_searches_only_the_datasets_in_it(tool: Tool, acme_edge: Imported) -> None:
    Dataset.objects.filter(pk=acme_edge.dataset.pk).update(kb_scope="edge")
    body, _ = tool.ask(NGINX_502)
    assert {acme_edge.stem_of(d) or tool.imported.stem_of(d) for d in evidence_ids(body)} >= {
        "edge-502", "nginx"}
    body, trace = tool.ask(NGINX_502, kb_scope="edge")
    assert [acme_edge.stem_of(d) for d in evidence_ids(body)] == ["edge-502"]
    assert trace["filters"]["datasets"] == [acme_edge.dataset.pk]
    body, _ = tool.ask(NGINX_502, kb_scope="nowhere")
    assert body["evidence_status"] == "EMPTY"


STEPS = [
    "find the largest directories with du -sh /var/* | sort -h and look at what grew",
    "rotate the application logs with logrotate -f /etc/logrotate.d/app now",
    "shrink the systemd journal with journalctl --vacuum-size=200M on the host",
    "remove unused container images with docker image prune --all --force",
    "delete old core dumps from /var/crash that are older than seven days",
    "check for deleted files still held open with lsof +L1 and restart their process",
]
# One section long enough for several chunks, then another section.
DISK = """---
title: Disk full on a Linux host
domain: storage
keywords: [disk full]
category: storage
---
# Disk full on a Linux host

## Freeing disk space

""" + "\n\n".join(
    f"Step {n}: {text}. " + "This step is safe on a production host and takes a few minutes; "
    "write down what was removed and how much space it gave back, so that the next on-call "
    "engineer can see what was done and repeat it if the disk fills up again later. " * 2
    for n, text in enumerate(STEPS, 1)) + """

## Preventing a full disk

Alert when a filesystem passes 80 percent and keep log retention short.
"""


@pytest.fixture
def manuals(acme: Imported, tmp_path: Any) -> Imported:
    return import_runbooks(tmp_path / "acme-manuals", tenant="acme", dataset="manuals",
                           files={"disk.md": DISK})


@pytest.mark.django_db
@proves("neighbour_expansion", "neighbour_window")
def test_neighbours_add_the_text_around_a_hit(tool: Tool, manuals: Imported) -> None:
    disk = manuals.documents["disk"]
    chunks = {c.chunk_index: c for c in disk.chunks.all()}
    section = sorted(i for i, c in chunks.items() if c.breadcrumb.endswith("Freeing disk space"))
    assert len(section) >= 4
    query = "shrink the systemd journal journalctl vacuum-size"
    one = {"return_n": 1, "max_chunks_per_document": 1, "max_context_chars": 100_000,
           "max_excerpt_chars": 20_000}

    index_of = {c.evidence_key: i for i, c in chunks.items()}

    def indexes(body: dict[str, Any]) -> list[int]:
        return [index_of[e["document_id"]] for e in body["evidence"]]

    body, _ = tool.ask(query, **one)
    [hit] = indexes(body)
    assert section[0] < hit < section[-1]
    body, trace = tool.ask(query, neighbour_expansion="ADJACENT", neighbour_window=1)
    assert indexes(body) == [hit, hit - 1, hit + 1]  # the hit first, then its neighbours
    assert stage(trace, "neighbours")["note"] == "ADJACENT ±1: 2 added"
    body, _ = tool.ask(query, neighbour_window=2)
    assert sorted(indexes(body)) == [i for i in range(hit - 2, hit + 3) if i in chunks]
    body, _ = tool.ask(query, neighbour_expansion="SECTION")
    assert indexes(body)[0] == hit and sorted(indexes(body)) == section
    # The budget: neighbours fill only what the hit leaves, the hit itself always stays.
    body, _ = tool.ask(query, max_context_chars=len(chunks[hit].content) + 50,
                       max_excerpt_chars=len(chunks[hit].content) + 50)
    assert indexes(body) == [hit]
    body, _ = tool.ask(query, neighbour_expansion="NONE", **one)
    assert indexes(body) == [hit]


@pytest.mark.django_db
@proves("recency_half_life_days")
def test_the_recency_prior_weighs_each_candidate_by_its_documents_age(tool: Tool) -> None:
    """Which of two runbooks alike comes first: tests/retrieval/lookup/test_recency.py."""
    from datetime import timedelta

    from django.utils import timezone

    from datasets.documents.services import dataset_documents_changed
    from datasets.models import Document

    kafka = tool.imported.documents["kafka"]
    Document.objects.filter(pk=kafka.pk).update(
        content_updated_at=timezone.now() - timedelta(days=730))
    dataset_documents_changed(dataset_id=kafka.dataset_id)
    body, trace = tool.ask(recency_half_life_days=365)
    weights = {c["evidence_key"]: c["score"] for c in stage(trace, "recency")["candidates"]}
    assert stage(trace, "recency")["note"] == "half-life 365 days"
    assert {round(w, 3) for key, w in weights.items() if key.startswith(kafka.doc_key)} \
        == {0.625}  # two half-lives: ½ + ½ · ¼
    assert "kafka" in tool.stems(body)
    _, trace = tool.ask(recency_half_life_days=0)
    assert "recency" not in [s["stage"] for s in trace["stages"]]


def test_every_field_has_its_test() -> None:
    assert sorted(set(SETTING_NAMES) - set(FIELD_TESTS)) == []


@pytest.mark.django_db
@proves("agentic_graph")
def test_the_simplified_agentic_graph_searches_once_without_evaluation(
        tool: Tool, settings: Any) -> None:
    with chat_server() as server:
        settings.KB_CHAT_BASE_URL = server.url
        question = "How do I fix nginx 502 bad gateway? Why does kafka consumer lag grow?"

        def agentic() -> dict[str, Any]:
            response = tool.agent.post("/api/rag/agentic", {"query": question}, format="json")
            assert response.status_code == 200, response.content
            body: dict[str, Any] = response.json()
            return body

        full = agentic()
        assert full["iterations"] >= 2 and any(map(asks_to_judge, server.requests))  # judged
        tool.configure(agentic_graph="SIMPLIFIED")
        server.requests.clear()
        simple = agentic()
    assert [hop["route"] for hop in simple["routes"]] == ["synthesize"]
    assert simple["iterations"] == 1 and simple["answer_status"] == "ANSWERED"
    [answering] = server.requests  # one model call: the answer, no judge, no plan
    assert not asks_to_judge(answering)


@pytest.mark.django_db
@proves("agentic_quality_threshold", "agentic_max_retry_count")
def test_the_agentic_graphs_own_grade_and_corrections(tool: Tool) -> None:
    def agentic_routes(**values: Any) -> list[str]:
        tool.configure(**values)
        response = tool.agent.post("/api/rag/agentic", {"query": "why does kafka lag grow"},
                                   format="json")
        assert response.status_code == 200, response.content
        return [hop["route"] for hop in response.json()["routes"]]

    # Every grade is weak at 1.0: it corrects (the question without its words of asking) as
    # often as it may; at 0.0 never.
    assert agentic_routes(agentic_quality_threshold=1.0, agentic_max_retry_count=1) == [
        "self_correct", "synthesize"]
    assert agentic_routes(agentic_max_retry_count=0) == ["synthesize"]
    assert agentic_routes(agentic_quality_threshold=0.0, agentic_max_retry_count=1) == [
        "synthesize"]


@pytest.mark.django_db
@proves("chat_base_url", "chat_model", "chat_api_key_env", "chat_timeout_seconds",
        "chat_max_tokens")
def test_a_tenants_chat_model_settings_replace_the_platforms(
        tool: Tool, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KB_CHAT_API_KEY_ACME", "acme-key")

    def answer() -> dict[str, Any]:
        response = tool.agent.post("/api/rag/answer", {"query": KAFKA_LAG}, format="json")
        assert response.status_code == 200, response.content
        row = ToolInvocation.objects.get(tool_call_id=response.json()["tool_call_id"])
        generation: dict[str, Any] = row.details["answer"]
        return generation

    with chat_server() as platform, chat_server() as own:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_API_KEY = platform.url, "platform-key"
        settings.KB_CHAT_MODEL, settings.KB_CHAT_MAX_TOKENS = "platform-model", 800
        answer()
        [call] = platform.requests
        assert (call["authorization"], call["model"], call["max_tokens"]) == (
            "Bearer platform-key", "platform-model", 800)

        # The tenant's own endpoint: never sent the platform's key.
        tool.configure(chat_base_url=own.url)
        answer()
        [call] = own.requests
        assert call["authorization"] != "Bearer platform-key" and len(platform.requests) == 1
        tool.configure(chat_api_key_env="KB_CHAT_API_KEY_ACME", chat_model="tenant-model",
                       chat_max_tokens=123)
        trace = answer()
        assert (own.requests[-1]["authorization"], own.requests[-1]["model"],
                own.requests[-1]["max_tokens"]) == ("Bearer acme-key", "tenant-model", 123)
        assert trace["generator"] == "openai/tenant-model"

        # A named key that is not set, a reply slower than the tenant's timeout: the trace
        # says why, and the fallback answers.
        monkeypatch.delenv("KB_CHAT_API_KEY_ACME")
        trace = answer()
        assert trace["generator"] == "extractive (fallback)"
        assert "KB_CHAT_API_KEY_ACME is not set" in trace["error"]
        monkeypatch.setenv("KB_CHAT_API_KEY_ACME", "acme-key")
        tool.configure(chat_timeout_seconds=0.3)
        own.behaviour, own.delay_s = "slow", 1.0
        trace = answer()
        assert "did not answer within 0.30 s" in trace["error"]
