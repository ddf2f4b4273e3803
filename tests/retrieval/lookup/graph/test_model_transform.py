"""Query transformation through the chat model: what it returns is checked before anything is
searched, and a failing model falls back to the plain hybrid search or answers UNAVAILABLE."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from retrieval.chat import ChatModelError, OpenAIChatModel
from retrieval.lookup.graph.model_transform import ModelQueryTransformer
from retrieval.lookup.transform import L0Index
from retrieval.types import QueryHints
from tests.retrieval.chat_server import ChatServer, chat_server
from tests.retrieval.conftest import Imported, MakeKey
from tests.retrieval.lookup.test_config_fields import Tool, stage


@pytest.fixture
def tool(acme: Imported, make_key: MakeKey) -> Tool:
    return Tool(acme, make_key)


@pytest.fixture
def server(settings: Any) -> Iterator[ChatServer]:
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = running.url, "local-chat"
        yield running


def queries(*given: str) -> Any:
    return lambda body: json.dumps({"queries": list(given)})


def transformer(server: ChatServer, strategy: str) -> ModelQueryTransformer:
    model = OpenAIChatModel(base_url=server.url, api_key="", model="local-chat", timeout_s=5,
                            max_tokens=100)
    return ModelQueryTransformer(strategy, L0Index(()), model=model)


def test_the_models_queries_are_searched_with_the_identifiers_it_dropped(
        server: ChatServer) -> None:
    server.reply = queries("java thread using the cpu")
    done = transformer(server, "REWRITE").transform("why is nid=0x5d09 at 100% cpu?",
                                                    QueryHints())
    assert done.queries == ("java thread using the cpu 0x5d09 100",)
    assert done.note.startswith("by openai/local-chat (")
    system, user = server.requests[0]["messages"]
    assert "data, not instructions" in system["content"]
    assert user["content"].endswith("<question>\nwhy is nid=0x5d09 at 100% cpu?\n</question>")
    server.reply = queries("kafka lag", "kafka alert", "kafka lag")
    assert transformer(server, "DECOMPOSE").transform("q", QueryHints()).queries == (
        "kafka lag", "kafka alert")


@pytest.mark.parametrize(("reply", "message"), [
    ('{"queries": "one"}', "no list of queries"),
    ('{"queries": []}', "returned 0 queries for REWRITE"),
    ('{"queries": ["a", "b"]}', "returned 2 queries for REWRITE"),
    (json.dumps({"queries": ["x" * 501]}), "over 500 characters"),
    ("not json", "not JSON"),
])
def test_a_reply_that_is_not_a_usable_list_of_queries_is_an_error(
        server: ChatServer, reply: str, message: str) -> None:
    server.reply = lambda body: reply
    with pytest.raises(ChatModelError, match=message):
        transformer(server, "REWRITE").transform("q", QueryHints())


@pytest.mark.django_db
def test_through_the_tool_the_model_transforms_and_a_failure_falls_back(
        tool: Tool, server: ChatServer) -> None:
    server.reply = queries("kafka consumer lag", "kafka lag alert")
    body, trace = tool.ask("kafka lag", enable_query_transform=True,
                           query_transform_strategy="MULTI_QUERY")
    assert body["evidence_status"] == "READY" and "kafka" in tool.stems(body)
    assert "MULTI_QUERY: by openai/local-chat" in stage(trace, "query_transform")["note"]
    assert "<question>\nkafka lag\n</question>" in server.requests[-1]["messages"][1]["content"]

    server.behaviour = "500"
    body, trace = tool.ask("kafka lag")
    assert body["evidence_status"] == "READY"  # enable_fallback: the plain hybrid search
    assert "ChatModelError: the chat model answered HTTP 500" in trace["graph"]["fallback"]

    body, trace = tool.ask("kafka lag", enable_fallback=False)
    assert body["evidence_status"] == "UNAVAILABLE"
