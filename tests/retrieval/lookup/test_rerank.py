"""The HTTP reranker against a real local server speaking the rerank protocol."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from retrieval.lookup.rerank import HttpReranker, RerankError
from tests.retrieval.rerank_server import RerankServer, rerank_server

DOCUMENTS = ["kafka consumer lag", "alerting on lag: alert alert", "nginx 502", "alert once"]


@pytest.fixture
def server() -> Iterator[RerankServer]:
    with rerank_server() as running:
        running.favourite = "alert"
        yield running


def reranker(server: RerankServer, *, key: str = "sk-rerank") -> HttpReranker:
    return HttpReranker(base_url=server.url, api_key=key, model="bge-reranker", timeout_s=5)


def test_best_first_at_most_top_n_and_the_protocol_as_sent(server: RerankServer) -> None:
    ranked = reranker(server).rerank("when to alert", DOCUMENTS, top_n=2, timeout_s=5)
    assert [r.index for r in ranked] == [1, 3]
    assert ranked[0].score > ranked[1].score
    [sent] = server.requests
    assert sent["path"] == "/v1/rerank" and sent["authorization"] == "Bearer sk-rerank"
    assert (sent["model"], sent["query"], sent["top_n"]) == ("bge-reranker", "when to alert", 2)
    assert sent["documents"] == DOCUMENTS


def test_no_key_sends_no_authorization(server: RerankServer) -> None:
    reranker(server, key="").rerank("q", DOCUMENTS, top_n=1, timeout_s=5)
    assert server.requests[0]["authorization"] is None


@pytest.mark.parametrize(("behaviour", "message"), [
    ("401", "refused the API key (401)"),
    ("500", "answered HTTP 500"),
    ("not_json", "not JSON"),
    ("no_results", "no results list"),
    ("bad_index", "malformed: index 7"),
])
def test_each_failure_is_a_rerank_error_naming_it(server: RerankServer, behaviour: str,
                                                  message: str) -> None:
    server.behaviour = behaviour
    with pytest.raises(RerankError, match=message.replace("(", r"\(").replace(")", r"\)")):
        reranker(server).rerank("q", DOCUMENTS, top_n=4, timeout_s=5)


def test_a_slow_reranker_is_cut_off_at_the_callers_timeout(server: RerankServer) -> None:
    server.behaviour, server.delay_s = "slow", 3.0
    started = time.monotonic()
    with pytest.raises(RerankError, match="did not answer within 0.30 s"):
        reranker(server).rerank("q", DOCUMENTS, top_n=2, timeout_s=0.3)
    assert time.monotonic() - started < 2.0


def test_a_trickled_answer_is_cut_off_at_the_callers_timeout_in_total(
        server: RerankServer) -> None:
    server.trickle_s = 0.1  # each byte well within the timeout; the answer in ~15 s
    started = time.monotonic()
    with pytest.raises(RerankError, match="did not answer within 0.50 s"):
        reranker(server).rerank("q", DOCUMENTS, top_n=2, timeout_s=0.5)
    assert time.monotonic() - started < 2.0


def test_an_unreachable_reranker_is_an_error_not_a_hang() -> None:
    dead = HttpReranker(base_url="http://127.0.0.1:9/v1", api_key="", model="m", timeout_s=2)
    with pytest.raises(RerankError, match="the reranker could not be reached"):
        dead.rerank("q", DOCUMENTS, top_n=1, timeout_s=2)
