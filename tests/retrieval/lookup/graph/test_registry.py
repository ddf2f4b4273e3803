"""What a retriever declares in the registry is kept (seed 003 §6): its own `timeout_s` bounds
each call, and one that is not `thread_safe` is never entered by two calls at once. Real
retrievers registered the public way (`REGISTRY.register`), searching the real index, through
the REST tool endpoint and the lookup service."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest
from django.db import connections

from retrieval.lookup.graph.registry import RetrieverCall, RetrieverEvent, RetrieverSpec
from retrieval.lookup.graph.retrievers import REGISTRY, default_registry
from retrieval.lookup.service import lookup_knowledge
from retrieval.ragconfig import config
from retrieval.ragconfig.services import rag_config_update
from retrieval.types import (
    EvidenceStatus,
    KnowledgeSearchPort,
    SearchFilters,
    SearchHit,
    SearchRequest,
)
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    last_trace,
    lookup,
)

KAFKA_LAG = "kafka consumer group lag keeps growing"
SLEEP_S = 1.5


class Sleepy:
    """Finds the zebra runbook (whatever it is asked), then sleeps far past its timeout."""

    spec: ClassVar[RetrieverSpec] = RetrieverSpec(name="SLEEPY", needs_vector=False,
                                                  timeout_s=0.2)
    finished = threading.Event()  # set when a call comes back, long after it was given up
    running: ClassVar[int] = 0  # calls not back yet
    counter = threading.Lock()

    def __init__(self, *, port: KnowledgeSearchPort) -> None:
        self.port = port

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
        cls = type(self)
        with cls.counter:
            cls.running += 1
        try:
            hits = self.port.search(SearchRequest(query_text="zebra stripes", query_vector=None,
                                                  mode="bm25", limit=call.limit,
                                                  filters=call.filters))
            time.sleep(SLEEP_S)
        finally:
            with cls.counter:
                cls.running -= 1
        cls.finished.set()
        return hits


class Counting:
    """Not thread-safe, and one instance for every lookup (as a retriever holding one client
    would be): it counts the calls inside it at once."""

    spec: ClassVar[RetrieverSpec] = RetrieverSpec(name="COUNTING", needs_vector=False,
                                                  thread_safe=False)
    shared: ClassVar[Counting | None] = None

    def __init__(self, port: KnowledgeSearchPort) -> None:
        self.port = port
        self.inside = 0
        self.most = 0
        self.calls = 0
        self.guard = threading.Lock()  # for the counter itself, not for the retriever

    @classmethod
    def factory(cls, *, port: KnowledgeSearchPort) -> Counting:
        if cls.shared is None:
            cls.shared = cls(port)
        return cls.shared

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
        with self.guard:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.05)  # what a real call takes: long enough for calls to meet
            return self.port.search(SearchRequest(query_text=call.query, query_vector=None,
                                                  mode="bm25", limit=call.limit,
                                                  filters=call.filters))
        finally:
            with self.guard:
                self.inside -= 1


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """SLEEPY and COUNTING in the registry, and their names allowed in a config."""
    if "SLEEPY" not in REGISTRY.names():  # the registry lives as long as the process
        REGISTRY.register(Sleepy.spec, Sleepy)
        REGISTRY.register(Counting.spec, Counting.factory)
    monkeypatch.setattr(config, "RETRIEVERS", (*config.RETRIEVERS, "SLEEPY", "COUNTING"))


@pytest.fixture
def no_strays() -> Iterator[None]:
    """Each test starts with no call of SLEEPY still sleeping from an earlier one."""
    Sleepy.finished.clear()
    yield
    Sleepy.finished.wait(SLEEP_S + 1)
    deadline = time.monotonic() + SLEEP_S + 1
    while Sleepy.running and time.monotonic() < deadline:  # every call, not only the first
        time.sleep(0.05)


def scope(imported: Imported) -> SearchFilters:
    return SearchFilters(tenant_id=imported.tenant.pk, dataset_ids=(imported.dataset.pk,))


class Agent:
    def __init__(self, imported: Imported, make_key: MakeKey) -> None:
        self.imported = imported
        self.client = client_for(make_key("acme")[1])
        self.admin = client_for(make_key("acme", role="admin")[1])

    def configure(self, **values: Any) -> None:
        rag_config_update(config=None, tenant=self.imported.tenant, values=values,
                          changed_by="test")

    def ask(self, query: str = KAFKA_LAG) -> tuple[int, dict[str, Any], dict[str, Any], float]:
        session = f"s-{uuid.uuid4().hex}"
        started = time.perf_counter()
        response = lookup(self.client, query, session_id=session)
        elapsed = time.perf_counter() - started
        return (response.status_code, response.json(), last_trace(self.admin, session),
                elapsed)

    def stems(self, body: dict[str, Any]) -> set[str | None]:
        return {self.imported.stem_of(e) for e in evidence_ids(body)}


@pytest.mark.django_db
def test_a_retriever_past_its_timeout_is_a_failed_stage_and_its_hits_are_never_served(
        registered: None, no_strays: None, acme: Imported, make_key: MakeKey) -> None:
    agent = Agent(acme, make_key)
    status, body, _, plain = agent.ask()  # the plain hybrid search, warmed up
    assert status == 200 and agent.stems(body) == {"kafka"}
    agent.configure(enabled_retrievers=["SLEEPY"], enable_fallback=True)
    status, body, trace, elapsed = agent.ask()
    # Given up after its 0.2 s, not 1.5 s: the plain hybrid search answers instead.
    assert status == 200 and body["evidence_status"] == "READY", body
    assert elapsed < 0.5 + plain, (elapsed, plain)
    assert agent.stems(body) == {"kafka"}  # SLEEPY's zebra hits are not served
    assert "SLEEPY" in trace["graph"]["fallback"] and "timeout_s" in trace["graph"]["fallback"]
    sleepy = [e for e in trace["graph"]["retrievers"] if e["retriever"] == "SLEEPY"]
    assert [e["event"] for e in sleepy] == ["start", "error"]
    assert "abandoned" in sleepy[1]["error"]

    # Without the fallback: UNAVAILABLE, as fast, naming the retriever and its timeout.
    agent.configure(enable_fallback=False)
    status, body, trace, elapsed = agent.ask()
    assert status == 503 and body["evidence_status"] == "UNAVAILABLE", body
    assert elapsed < 0.6, elapsed
    assert not body["evidence"]


@pytest.mark.django_db
def test_an_abandoned_call_never_reaches_the_lookup_and_strays_are_bounded(
        registered: None, no_strays: None, acme: Imported, make_key: MakeKey) -> None:
    filters = scope(acme)
    overrides = {"enabled_retrievers": ["SLEEPY"], "enable_fallback": False}
    heard: list[list[str]] = []
    results = []
    for _ in range(3):
        result = lookup_knowledge(filters=filters, query=KAFKA_LAG, overrides=overrides)
        results.append(result)
        heard.append([e["event"] for e in result.graph["retrievers"]])
    assert all(r.evidence_status is EvidenceStatus.UNAVAILABLE for r in results)
    # The first two were abandoned after 0.2 s each; while they sleep on, a third call of
    # SLEEPY is refused at once rather than piling another thread up.
    assert "timeout_s" in results[0].error and "timeout_s" in results[1].error
    assert "still run" in results[2].error, results[2].error
    assert heard[:2] == [["start", "error"], ["start", "error"]] and heard[2] == []
    assert Sleepy.finished.wait(SLEEP_S + 1)
    time.sleep(0.1)
    # The calls came back: nothing of theirs was added to the lookups' accounts afterwards,
    # and SLEEPY may be called again.
    assert [[e["event"] for e in r.graph["retrievers"]] for r in results] == heard
    again = lookup_knowledge(filters=filters, query=KAFKA_LAG, overrides=overrides)
    assert "timeout_s" in again.error


@pytest.mark.django_db(transaction=True)
def test_a_retriever_that_is_not_thread_safe_is_never_entered_twice_at_once(
        registered: None, acme: Imported) -> None:
    filters = scope(acme)
    # Two retrievers side by side, three queries each (MULTI_QUERY), eight lookups at once.
    overrides = {"enabled_retrievers": ["COUNTING", "BM25"],
                 "retrieval_execution_mode": "PARALLEL", "enable_query_transform": True,
                 "query_transform_strategy": "MULTI_QUERY"}
    Counting.shared = None

    def one(_: int) -> EvidenceStatus:
        try:
            return lookup_knowledge(filters=filters, query="请问 kafka lag 怎么办",
                                    overrides=overrides).evidence_status
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(8)))
    assert statuses == [EvidenceStatus.READY] * 8
    counting = Counting.shared
    assert counting is not None and counting.calls == 8 * 3
    assert counting.most == 1


def test_listeners_hear_how_an_abandoned_call_ended_and_nothing_after() -> None:
    events: list[RetrieverEvent] = []
    gate = threading.Event()

    class Blocked:
        spec: ClassVar[RetrieverSpec] = RetrieverSpec(name="BLOCKED", needs_vector=False)

        def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
            gate.wait(5)
            return []

    registry = default_registry()
    registry.register(Blocked.spec, Blocked)
    run = registry.submit(Blocked(), RetrieverCall("q", None, SearchFilters(1, (1,)), 5),
                          [events.append])
    time.sleep(0.05)
    assert run.abandon("the stage failed")
    gate.set()
    time.sleep(0.1)
    assert run.future.done() and [e.kind for e in events] == ["start", "error"]
    assert "the stage failed" in events[1].error
