"""The question in the other language (issue 37): asked of a real OpenAI-compatible server only
when the searched documents hold the other language, checked before it is searched, cached in
this process, bounded by its budget, and never the reason a lookup fails."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from retrieval.chat import OpenAIChatModel
from retrieval.lookup.graph.translate import (
    CACHE,
    SYSTEM_PROMPT,
    Direction,
    Outcome,
    QueryTranslator,
    Translation,
    TranslationCache,
    checked,
    direction_for,
    searched_together_first,
    vector_with,
)
from tests.retrieval.chat_server import TRANSLATIONS, ChatServer, asks_to_translate, chat_server
from tests.retrieval.conftest import Imported, MakeKey, last_trace, lookup, ready
from tests.retrieval.lookup.test_config_fields import DISK_ZH, KAFKA_ZH, REDIS_EN, Tool, stage

ZH_EN = Direction("zh", "en")


@pytest.fixture
def local_model(settings: Any) -> Iterator[ChatServer]:
    """A real OpenAI-compatible server as the deployment's local model; no chat model."""
    CACHE.clear()
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", running.url
        yield running
    CACHE.clear()


def translator(server: ChatServer, *, tenant_id: int = 1,
               cache: TranslationCache | None = None) -> QueryTranslator:
    model = OpenAIChatModel(base_url=server.url, api_key="", model="local", timeout_s=5,
                            max_tokens=256)
    return QueryTranslator(model=model, tenant_id=tenant_id, cache=cache or TranslationCache())


# --- which way, and what counts as a translation ------------------------------------------

def test_a_question_is_translated_only_towards_a_language_the_documents_hold() -> None:
    assert direction_for(KAFKA_ZH, frozenset({"en"})) == ZH_EN
    assert direction_for("kafka lag 怎么办", frozenset({"en", "zh"})) == ZH_EN
    assert direction_for("why does kafka lag grow", frozenset({"en", "zh"})) == \
        Direction("en", "zh")
    assert direction_for("why does kafka lag grow", frozenset({"en"})) is None
    assert direction_for(KAFKA_ZH, frozenset({"zh"})) is None
    assert direction_for("502 ?", frozenset({"zh", "en"})) is None  # no letter: no language
    assert direction_for("ERROR 1040", frozenset({"en", "zh"})) is None  # the same in both
    assert direction_for(KAFKA_ZH, frozenset()) is None  # documents without text yet


def test_only_a_corpus_without_the_questions_language_is_searched_with_the_translation_first(
        ) -> None:
    def first(question: str, languages: frozenset[str]) -> bool:
        return searched_together_first(direction_for(question, languages), languages)

    assert first(KAFKA_ZH, frozenset({"en"}))
    assert first("why does kafka lag grow", frozenset({"zh", ""}))
    assert not first(KAFKA_ZH, frozenset({"en", "zh"}))
    assert not first(KAFKA_ZH, frozenset({"zh"}))
    assert not first("ERROR 1040", frozenset({"zh"}))  # identifiers only


@pytest.mark.parametrize(("reply", "translation", "reason"), [
    ("Kafka consumer lag keeps growing", "Kafka consumer lag keeps growing", ""),
    ('  "Kafka consumer lag keeps growing"\n', "Kafka consumer lag keeps growing", ""),
    ("Kafka consumer lag keeps growing\n(kept kafka as is)", "Kafka consumer lag keeps growing",
     ""),
    ("", "", "the reply is empty"),
    ("To fix consumer lag, do the following:", "", "opens an answer"),
    ("1. Check the consumer group\n2. Add consumers", "", "opens an answer"),
    ("Check the group.\nAdd consumers.\nRestart them.", "", "3 lines: an answer"),
    ("消费组积压一直在涨", "", "is the question itself"),
    ("消费者组的滞后一直在增长", "", "not written in English"),
    ("Kafka consumer lag keeps growing because consumers are slower than producers, and "
     "you should add consumers up to the partitions and make each faster", "",
     "far longer than the question"),
])
def test_a_reply_that_is_not_a_translation_is_dropped(reply: str, translation: str,
                                                      reason: str) -> None:
    question = "消费组积压一直在涨"
    text, why = checked(reply, question, "en")
    assert text == translation and (reason in why if reason else why == "")


def test_the_vector_searched_lies_between_the_question_and_its_translation() -> None:
    question, translation = [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]  # not unit: made unit first
    mean = vector_with(question, translation)
    assert mean == pytest.approx([2 ** -0.5, 2 ** -0.5, 0.0])
    assert np.linalg.norm(mean) == pytest.approx(1.0)
    assert vector_with(question, None) == question


def test_the_cache_is_bounded_and_keyed_by_tenant_model_direction_and_question(
        settings: Any) -> None:
    cache = TranslationCache(entries=2)
    model = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key="", model="local",
                            timeout_s=1, max_tokens=16)
    key = TranslationCache.key(tenant_id=1, model=model, direction=ZH_EN, question=KAFKA_ZH)
    assert re.fullmatch(r"[0-9a-f]{64}", key)  # a keyed hash: nothing of the question
    others = [TranslationCache.key(tenant_id=2, model=model, direction=ZH_EN,
                                   question=KAFKA_ZH),
              TranslationCache.key(tenant_id=1, model=model, direction=Direction("en", "zh"),
                                   question=KAFKA_ZH),
              TranslationCache.key(tenant_id=1, model=model, direction=ZH_EN,
                                   question=KAFKA_ZH + "？")]
    assert len({key, *others}) == 4
    settings.SECRET_KEY = "another secret key, another hash for the same question"
    assert TranslationCache.key(tenant_id=1, model=model, direction=ZH_EN,
                                question=KAFKA_ZH) != key
    for n in range(3):
        cache.put(str(n), Translation(ZH_EN, Outcome.TRANSLATED, text=str(n)))
    assert cache.get("0") is None and cache.get("2") is not None  # the oldest went first


# --- the translator against a real server --------------------------------------------------

def test_the_model_is_asked_to_translate_the_question_as_data() -> None:
    with chat_server() as server:
        done = translator(server).translate(KAFKA_ZH, ZH_EN, timeout_s=5)
        question = "<b>nginx</b> 502 怎么办"
        translator(server).translate(question, ZH_EN, timeout_s=5)
    assert (done.outcome, done.text, done.model) == (Outcome.TRANSLATED, TRANSLATIONS[KAFKA_ZH],
                                                     "openai/local")
    first, second = server.requests
    system, user = first["messages"]
    assert system["content"] == SYSTEM_PROMPT and "Never answer" in SYSTEM_PROMPT
    assert user["content"] == f"Translate into English:\n<question>\n{KAFKA_ZH}\n</question>"
    assert (first["temperature"], first["max_tokens"]) == (0, 2 * len(KAFKA_ZH) + 20)
    assert "&lt;b>nginx&lt;/b> 502" in second["messages"][1]["content"]  # data, not markup


def test_an_english_question_is_translated_into_chinese() -> None:
    question = "how do I restart a stuck kafka consumer"
    with chat_server() as server:
        server.reply = lambda body: "如何重启卡住的 kafka consumer"
        done = translator(server).translate(question, Direction("en", "zh"), timeout_s=5)
    assert (done.outcome, done.text) == (Outcome.TRANSLATED, "如何重启卡住的 kafka consumer")
    assert server.requests[0]["messages"][1]["content"].startswith(
        "Translate into Simplified Chinese:\n<question>")
    assert str(done.direction) == "en→zh"


@pytest.mark.parametrize(("behaviour", "reply", "outcome", "reason"), [
    ("500", None, Outcome.FAILED, "the chat model answered HTTP 500"),
    ("401", None, Outcome.FAILED, "refused the API key (401)"),
    ("slow", None, Outcome.FAILED, "did not answer within 0.30 s"),
    ("ok", "Here is how to fix it:\n1. restart", Outcome.DROPPED, "opens an answer"),
    ("ok", "消费者组积压", Outcome.DROPPED, "not written in English"),
])
def test_a_failing_or_answering_model_gives_no_translation_and_says_why(
        behaviour: str, reply: str | None, outcome: Outcome, reason: str) -> None:
    with chat_server() as server:
        server.behaviour, server.delay_s = behaviour, 2.0
        if reply is not None:
            server.reply = lambda body: reply
        started = time.monotonic()
        done = translator(server).translate(KAFKA_ZH, ZH_EN, timeout_s=0.3)
        waited = time.monotonic() - started
    assert (done.outcome, done.text) == (outcome, "") and reason in done.reason
    assert waited < 1.5  # the budget, not the server, ends the wait
    assert reason in done.note() and done.note().endswith("searched the question alone")


def test_a_repeated_question_is_answered_by_the_cache_and_a_failure_is_not_kept() -> None:
    cache = TranslationCache()
    with chat_server() as server:
        first = translator(server, cache=cache).translate(KAFKA_ZH, ZH_EN, timeout_s=5)
        again = translator(server, cache=cache).translate(KAFKA_ZH, ZH_EN, timeout_s=5)
        assert len(server.requests) == 1
        assert (again.text, again.cached, first.cached) == (first.text, True, False)
        assert "from the cache" in again.note()
        # Another tenant asks its own model: a fast answer tells it nothing of this one.
        translator(server, tenant_id=2, cache=cache).translate(KAFKA_ZH, ZH_EN, timeout_s=5)
        assert len(server.requests) == 2
        server.behaviour = "500"
        question = "磁盘满了怎么办"
        assert translator(server, cache=cache).translate(question, ZH_EN, timeout_s=5) \
            .outcome is Outcome.FAILED
        server.behaviour = "ok"
        translator(server, cache=cache).translate(question, ZH_EN, timeout_s=5)
        assert len(server.requests) == 4  # asked again once the model is back


def test_without_a_model_or_for_a_long_question_nothing_is_asked() -> None:
    alone = QueryTranslator(model=None, tenant_id=1).translate(KAFKA_ZH, ZH_EN, timeout_s=5)
    assert alone.outcome is Outcome.NO_MODEL and "KB_LOCAL_MODEL_URL" in alone.note()
    with chat_server() as server:
        long = translator(server).translate("磁盘" * 251, ZH_EN, timeout_s=5)
    assert long.outcome is Outcome.TOO_LONG and server.requests == []


# --- through the lookup tool, on real Milvus -------------------------------------------------

@pytest.fixture
def tool(acme: Imported, make_key: MakeKey) -> Tool:
    return Tool(acme, make_key)


def translated(trace: dict[str, Any]) -> dict[str, Any]:
    translation: dict[str, Any] = trace["graph"]["translation"]
    return translation


@pytest.mark.django_db
def test_a_chinese_question_finds_the_english_runbook_only_with_its_translation(
        tool: Tool, local_model: ChatServer) -> None:
    body, trace = tool.ask(KAFKA_ZH)
    assert tool.stems(body)[:1] == ["kafka"]
    [asked] = local_model.requests
    assert asks_to_translate(asked) and asked["model"] == "local"
    note = stage(trace, "translate")["note"]
    # The audit keeps its length and a keyed hash, never the text (raw queries are off).
    assert re.fullmatch(r"zh→en by openai/local in \d+ ms: \d+ characters #[0-9a-f]{8}; "
                        r"searched together", note), note
    assert TRANSLATIONS[KAFKA_ZH] not in str(trace)
    assert translated(trace) | {"elapsed_ms": 0} == {
        "direction": "zh→en", "model": "openai/local", "outcome": "translated", "reason": "",
        "question_chars": len(KAFKA_ZH), "translation_chars": len(TRANSLATIONS[KAFKA_ZH]),
        "elapsed_ms": 0, "cached": False}
    # Without the translation (the dictionary's words still searched) the runbook is missed.
    body, trace = tool.ask(KAFKA_ZH, translate_query=False)
    assert "kafka" not in tool.stems(body)
    assert trace["graph"]["translation"] is None and len(local_model.requests) == 1


@pytest.mark.django_db
def test_a_question_in_the_documents_language_asks_no_model(
        tool: Tool, local_model: ChatServer) -> None:
    body, trace = tool.ask("how do I restart the upstream behind a bad gateway")
    assert tool.stems(body)[:1] == ["nginx"]
    assert local_model.requests == []
    assert "translate" not in trace["timings"] and trace["graph"]["translation"] is None


@pytest.mark.django_db
@pytest.mark.parametrize(("behaviour", "reply", "outcome", "reason"), [
    ("500", None, "failed", "the chat model answered HTTP 500"),
    ("401", None, "failed", "the chat model refused the API key (401)"),
    ("slow", None, "failed", "the chat model did not answer within 0.30 s"),
    ("ok", "Here is how to fix consumer lag:\n1. Add consumers\n2. Restart", "dropped",
     "the reply has 3 lines: an answer, not a translation"),
    ("ok", "消费者组的积压", "dropped", "the reply is not written in English"),
])
def test_each_failure_of_the_model_leaves_the_question_searched_alone_and_says_why(
        tool: Tool, local_model: ChatServer, behaviour: str, reply: str | None, outcome: str,
        reason: str) -> None:
    local_model.behaviour, local_model.delay_s = behaviour, 3.0
    if reply is not None:
        local_model.reply = lambda body: reply
    started = time.monotonic()
    body, trace = tool.ask(KAFKA_ZH, translation_budget_ms=300)
    assert time.monotonic() - started < 2.5
    assert body["evidence_status"] in ("READY", "EMPTY") and "kafka" not in tool.stems(body)
    assert trace["graph"]["fallback"] is None and trace["error"] == ""
    assert (translated(trace)["outcome"], translated(trace)["reason"]) == (outcome, reason)
    note = stage(trace, "translate")["note"]
    assert reason in note and note.endswith("searched the question alone")


@pytest.mark.django_db
def test_a_repeated_question_is_translated_once(tool: Tool, local_model: ChatServer) -> None:
    first, _ = tool.ask(KAFKA_ZH)
    again, trace = tool.ask(KAFKA_ZH)
    assert len(local_model.requests) == 1
    assert translated(trace)["cached"] and "from the cache" in stage(trace, "translate")["note"]
    assert tool.stems(again) == tool.stems(first)


@pytest.mark.django_db
def test_the_budget_and_the_deadline_bound_the_wait(tool: Tool, local_model: ChatServer) -> None:
    local_model.behaviour, local_model.delay_s = "slow", 5.0
    started = time.monotonic()
    _, trace = tool.ask(KAFKA_ZH, translation_budget_ms=400)
    assert time.monotonic() - started < 2.5
    assert translated(trace)["reason"] == "the chat model did not answer within 0.40 s"
    # A short deadline: the translation gets at most half of what is left of it.
    started = time.monotonic()
    body, trace = tool.ask(KAFKA_ZH, translation_budget_ms=60_000, timeout_millis=1000)
    assert time.monotonic() - started < 2.5 and trace["graph"]["fallback"] is None
    assert re.fullmatch(r"the chat model did not answer within 0\.(4\d|50) s",
                        translated(trace)["reason"])


@pytest.mark.django_db
def test_a_question_its_own_search_answers_precisely_waits_for_no_model(
        kb: Any, ingest: Any, local_model: ChatServer) -> None:
    """In a corpus of both languages every question could be translated; a translation blurs
    a precise question (same-language questions lost with it, docs/benchmarks.md), so only a
    search below PRECISE asks the model, and the more relevant answer serves."""
    redis = ingest(kb.dataset, "redis.md", REDIS_EN)
    ingest(kb.dataset, "disk.md", DISK_ZH)
    sid = "precise-alone"
    body = ready(lookup(kb.tool, "redis writes fail with OOM command not allowed",
                        session_id=sid))
    assert body["relevance_level"] == "PRECISE", body
    assert body["evidence"][0]["document_id"].startswith(f"{redis.doc_id}#")
    assert local_model.requests == []
    trace = last_trace(kb.admin, sid)
    assert trace["graph"]["translation"] is None

    # Below PRECISE the same corpus is searched again with the question's translation.
    sid = "below-precise"
    lookup(kb.tool, "缓存的内存满了，写入失败怎么办", session_id=sid)
    assert [asks_to_translate(r) for r in local_model.requests] == [True]
    trace = last_trace(kb.admin, sid)
    assert trace["graph"]["translation"]["direction"] == "zh→en"
    assert trace["graph"]["translation"]["outcome"] == "translated"
    assert any(s["stage"].startswith("retrieve") and s["stage"].endswith("[translated]")
               for s in trace["stages"]), [s["stage"] for s in trace["stages"]]


@pytest.mark.django_db
def test_where_no_document_is_in_the_questions_language_it_is_searched_once_with_its_translation(
        kb: Any, ingest: Any, local_model: ChatServer) -> None:
    """An English-only corpus holds no runbook a Chinese question's translation could draw it
    away from: the question is translated first and searched once, together with it, however
    precisely it would have been answered alone; a question in the corpus's language asks no
    model."""
    ingest(kb.dataset, "redis.md", REDIS_EN)
    sid = "crossed-only"
    lookup(kb.tool, "缓存的内存满了，写入失败怎么办", session_id=sid)
    assert [asks_to_translate(r) for r in local_model.requests] == [True]
    trace = last_trace(kb.admin, sid)
    assert trace["graph"]["translation"]["outcome"] == "translated"
    searches = [s["stage"] for s in trace["stages"] if s["stage"].startswith("retrieve")]
    assert searches and all(name.endswith("[translated]") for name in searches), searches

    # The model down: the question is still searched, alone, and the trace says why.
    local_model.behaviour = "500"
    sid = "crossed-only-no-model"
    lookup(kb.tool, "缓存的内存满了，写不进去了", session_id=sid)
    trace = last_trace(kb.admin, sid)
    assert trace["graph"]["translation"]["outcome"] == "failed"
    searches = [s["stage"] for s in trace["stages"] if s["stage"].startswith("retrieve")]
    assert searches and not any(name.endswith("[translated]") for name in searches), searches

    sid = "same-language"
    ready(lookup(kb.tool, "redis writes fail with OOM command not allowed", session_id=sid))
    assert len(local_model.requests) == 2
    assert last_trace(kb.admin, sid)["graph"]["translation"] is None
