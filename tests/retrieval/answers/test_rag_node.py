"""POST /api/rag/node, the RAG node of an agent loop (seed 003 §5): the query by priority, every
dataset-selection branch, NO_KNOWLEDGE_BASE and NEEDS_INPUT, delegation to a named RagAgent,
and what the node hands back."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import Outcome, ToolInvocation
from datasets.documents.services import tenant_get_or_create
from datasets.models import Dataset
from retrieval.answers.rag_node import (
    DatasetRef,
    NodeInput,
    node_query,
    rag_sub_agent,
    select_datasets,
)
from retrieval.models import RagAgent
from tests.retrieval.chat_server import ChatServer, careful_reply, chat_server
from tests.retrieval.conftest import Imported, MakeKey, client_for

TWO_PARTS = "How do I fix nginx 502 bad gateway? Why does kafka consumer lag grow?"
OPS, EDGE, ARCHIVE = DatasetRef(1, "ops"), DatasetRef(2, "edge"), DatasetRef(3, "ops-archive")


# --- the query by priority and the datasets by target (the seed's order) -----------------------

@pytest.mark.parametrize(("node", "expected"), [
    (NodeInput(query=" nginx 502 ", rag_keywords=("kafka",), user_input="hi"),
     ("nginx 502", "query")),
    (NodeInput(query="  ", rag_keywords=("kafka", " ", "lag"), user_input="hi"),
     ("kafka lag", "rag_keywords")),
    (NodeInput(rag_keywords=(" ",), user_input=" why is kafka slow "),
     ("why is kafka slow", "user_input")),
    (NodeInput(rag_keywords=("",), user_input="  "), ("", "")),
])
def test_the_query_is_the_tasks_then_the_intents_keywords_then_the_users_input(
        node: NodeInput, expected: tuple[str, str]) -> None:
    assert node_query(node) == expected


@pytest.mark.parametrize(("ids", "name", "expected", "rule"), [
    ((2, 99), "ops", (EDGE,), "ids"),  # ids win over a name; an unreadable id matches nothing
    ((99,), "", (), "ids"),
    ((), "", (OPS, EDGE, ARCHIVE), "all"),
    ((), " 全部 ", (OPS, EDGE, ARCHIVE), "all"),
    ((), "ALL", (OPS, EDGE, ARCHIVE), "all"),
    ((), "OPS", (OPS,), "name"),  # exactly, before contains (ops-archive contains it too)
    ((), "archive", (ARCHIVE,), "contains"),
    ((), "Ops Archive", (ARCHIVE,), "contains"),  # case, spaces, - and _ aside
    ((), "p", (OPS, ARCHIVE), "contains"),
    ((), "billing", (), "contains"),
])
def test_datasets_are_chosen_by_ids_then_all_then_name_then_contains(
        ids: tuple[int, ...], name: str, expected: tuple[DatasetRef, ...], rule: str) -> None:
    assert select_datasets([OPS, EDGE, ARCHIVE], ids=ids, name=name) == (expected, rule)


# --- through REST ------------------------------------------------------------------------------

def node(secret: str, **body: Any) -> tuple[int, dict[str, Any]]:
    response = client_for(secret).post("/api/rag/node",
                                       {"tool_call_id": f"n-{uuid.uuid4().hex}", **body},
                                       format="json")
    payload: dict[str, Any] = response.json()
    return response.status_code, payload


def audited(body: dict[str, Any]) -> dict[str, Any]:
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    assert row.tool_name == "rag_node"
    return {"outcome": row.outcome, **row.details["answer"]}


def stems(acme: Imported, body: dict[str, Any]) -> set[str | None]:
    return {acme.stem_of(item["document_id"]) for item in body["evidence"]}


@pytest.mark.django_db
def test_the_node_answers_from_every_readable_dataset_with_its_structured_block(
        acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    status, body = node(secret, rag_keywords=["nginx", "502", "bad", "gateway"],
                        user_input="ignored: the keywords come first")
    assert status == 200 and body["status"] == "ANSWERED"
    assert (body["query"], body["query_source"]) == ("nginx 502 bad gateway", "rag_keywords")
    assert body["result"] == body["answer"] and body["citations"]
    assert body["selected_by"] == "all" and body["delegated_to"] == ""
    structured = body["structured"]
    assert {d["name"] for d in structured["target_datasets"]} == {"ops", "edge"}
    assert structured["iterations"] >= 1 and 0 < structured["confidence"] <= 1
    guard = client_for(secret).post("/api/tools/evidence_guard",
                                    {"session_id": body["session_id"],
                                     "document_ids": body["citations"]}, format="json")
    assert guard.json()["ready"] == body["citations"]
    trace = audited(body)
    assert trace["outcome"] == Outcome.OK
    assert trace["node"] == {"status": "ANSWERED", "query_source": "rag_keywords",
                             "selected_by": "all", "delegated_to": "", "delegated_by": "",
                             "target_datasets": [d["id"] for d in
                                                 structured["target_datasets"]]}


@pytest.mark.django_db
def test_a_target_name_or_ids_narrow_the_search(acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    edge = Dataset.objects.get(tenant=acme_edge.tenant, name="edge")
    ops = Dataset.objects.get(tenant=acme_edge.tenant, name="ops")
    query = "nginx 502 bad gateway upstream"
    for target, expected in [({"target_dataset_name": "EDGE"}, "edge"),
                             ({"target_dataset_name": "dg"}, "edge"),
                             ({"target_dataset_ids": [ops.pk]}, "ops")]:
        status, body = node(secret, query=query, **target)
        assert status == 200 and body["status"] == "ANSWERED", target
        assert [d["name"] for d in body["structured"]["target_datasets"]] == [expected]
        chosen = edge if expected == "edge" else ops
        assert {item["document_id"].split("#")[0] for item in body["evidence"]} <= \
            {str(doc.doc_key) for doc in chosen.documents.all()}


@pytest.mark.django_db
def test_no_readable_dataset_is_no_knowledge_base_not_empty(
        acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    foreign = Dataset.objects.get(tenant=globex.tenant, name="ops")
    for target in [{"target_dataset_ids": [foreign.pk]},  # another tenant's: "does not exist"
                   {"target_dataset_name": "billing"}]:
        status, body = node(secret, query="nginx 502 bad gateway", **target)
        assert status == 200, target
        assert (body["status"], body["result"]) == ("NO_KNOWLEDGE_BASE", "未配置知识库")
        assert body["evidence"] == [] and body["structured"]["target_datasets"] == []
        trace = audited(body)
        assert trace["answer_status"] == "NO_KNOWLEDGE_BASE"
        assert trace["outcome"] == Outcome.EMPTY

    tenant_get_or_create(slug="empty-co")
    _, lonely = make_key("empty-co")
    status, body = node(lonely, query="nginx 502 bad gateway")
    assert (status, body["status"]) == (200, "NO_KNOWLEDGE_BASE")


@pytest.mark.django_db
def test_a_scoped_key_reaches_only_its_datasets_even_for_all(
        acme_edge: Imported, make_key: MakeKey) -> None:
    edge = Dataset.objects.get(tenant=acme_edge.tenant, name="edge")
    _, secret = make_key("acme", datasets=(edge,))
    status, body = node(secret, query="nginx 502 bad gateway", target_dataset_name="all")
    assert status == 200
    assert body["structured"]["target_datasets"] == [{"id": edge.pk, "name": "edge"}]
    status, body = node(secret, query="nginx 502", target_dataset_name="ops")
    assert body["status"] == "NO_KNOWLEDGE_BASE"  # ops is out of the key's scope


@pytest.mark.django_db
def test_nothing_to_look_up_needs_input(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    status, body = node(secret, query=" ", rag_keywords=[""], user_input="")
    assert status == 200 and body["status"] == "NEEDS_INPUT"
    assert body["missing"] == ["query"] and "query" in body["result"]
    assert audited(body)["answer_status"] == "NEEDS_INPUT"
    status, body = node(secret)
    assert (status, body["status"]) == (200, "NEEDS_INPUT")


@pytest.mark.django_db
def test_the_node_delegates_to_a_named_rag_agent_with_its_settings(
        acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    # The node's own graph (FULL) plans two sub-questions.
    _, own = node(secret, query=TWO_PARTS, sub_agents=["planner", "researcher"])
    assert own["delegated_to"] == "" and "continue" in [h["route"] for h in own["routes"]]

    RagAgent.objects.create(tenant=globex.tenant, name="AgenticRAG-ops",
                            agentic_graph="SIMPLIFIED")  # not acme's
    _, still_own = node(secret, query=TWO_PARTS, sub_agents=["AgenticRAG-ops"])
    # A RAG sub-agent by its name, on acme's own config: globex's agent settings never apply.
    assert still_own["delegated_to"] == "AgenticRAG-ops"
    assert "continue" in [h["route"] for h in still_own["routes"]]

    RagAgent.objects.create(tenant=acme.tenant, name="AgenticRAG-ops",
                            agentic_graph="SIMPLIFIED")
    status, body = node(secret, query=TWO_PARTS, sub_agents=["planner", "agenticrag-ops"])
    assert status == 200 and body["delegated_to"] == "AgenticRAG-ops"
    assert [h["route"] for h in body["routes"]] == ["synthesize"]  # its graph: one search
    assert audited(body)["node"]["delegated_to"] == "AgenticRAG-ops"
    staff = Client()
    staff.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-123456"))
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    page = staff.get(f"/admin/audit/toolinvocation/{row.pk}/change/").content.decode()
    assert "delegated to AgenticRAG-ops" in page.split('id="rag-node"', 1)[1].split("</td>")[0]
    # The task's own agent parameter comes before the loop's sub-agents.
    RagAgent.objects.create(tenant=acme.tenant, name="rag-agentic-full", agentic_graph="FULL")
    _, body = node(secret, query=TWO_PARTS, agent="rag-agentic-full",
                   sub_agents=["AgenticRAG-ops"])
    assert body["delegated_to"] == "rag-agentic-full"


@pytest.fixture
def server(settings: Any) -> Iterator[ChatServer]:
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = running.url, "local-chat"
        yield running


@pytest.mark.django_db
def test_a_delegated_agent_uses_its_own_model_name(acme: Imported, make_key: MakeKey,
                                                   server: ChatServer) -> None:
    RagAgent.objects.create(tenant=acme.tenant, name="AgenticRAG", chat_model="big-model")
    _, secret = make_key("acme")
    status, body = node(secret, query="kafka consumer lag alert", agent="AgenticRAG")
    assert status == 200 and body["status"] == "ANSWERED"
    assert {r["model"] for r in server.requests} == {"big-model"}
    assert audited(body)["generator"] == "openai/big-model"


@pytest.mark.django_db
def test_without_an_answer_the_node_hands_back_the_evidence_as_untrusted_snippets(
        acme: Imported, make_key: MakeKey, server: ChatServer) -> None:
    def script(body: dict[str, Any]) -> str:
        content = body["messages"][-1]["content"]
        if content.startswith("Question:"):  # the answer: the evidence does not answer
            return json.dumps({"answerable": False, "answer": "", "citations": []})
        return careful_reply(body)

    server.reply = script
    _, secret = make_key("acme")
    status, body = node(secret, query="kafka consumer lag alert")
    assert status == 200 and body["status"] == "NO_ANSWER" and body["answer"] == ""
    assert body["evidence"] and "<sources>" in body["result"]
    assert "untrusted data" in body["result"]
    for item in body["evidence"]:
        assert f'<source id="{item["document_id"]}"' in body["result"]


@pytest.mark.django_db
def test_a_failing_model_without_fallback_is_unavailable(acme: Imported, make_key: MakeKey,
                                                         server: ChatServer) -> None:
    from retrieval.models import RagConfig

    RagConfig.objects.create(tenant=acme.tenant, enable_fallback=False)
    server.behaviour = "401"
    _, secret = make_key("acme")
    status, body = node(secret, query="kafka consumer lag alert")
    assert status == 503 and body["status"] == "UNAVAILABLE"
    assert "not an empty result" in body["result"]
    trace = audited(body)
    assert trace["outcome"] == Outcome.UNAVAILABLE and "refused the API key" in trace["error"]


@pytest.mark.django_db
def test_the_input_is_bounded(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    words = ["x" * 200] * 50
    status, body = node(secret, rag_keywords=words)
    assert status == 400 and "rag_keywords" in json.dumps(body)
    status, _ = node(secret, query="q", sub_agents=["a"] * 21)
    assert status == 400
    assert client_for(None).post("/api/rag/node", {"query": "q"},
                                 format="json").status_code == 401


@pytest.mark.parametrize(("names", "chosen"), [
    (("planner", "AgenticRAG-ops"), "AgenticRAG-ops"),
    (("planner", "agenticrag", "ops-rag"), "agenticrag"),
    (("storage-agent", "RagAgent"), "RagAgent"),  # "storage" holds the letters, not the word
    (("writer", "my_rag_helper"), "my_rag_helper"),
    (("planner", "coverage", "researcher"), ""),
])
def test_a_sub_agent_is_a_rag_agent_when_its_name_says_so(names: tuple[str, ...],
                                                          chosen: str) -> None:
    assert rag_sub_agent(names) == chosen


@pytest.mark.django_db
def test_a_rag_agents_exact_name_comes_before_a_rag_sub_agents_name(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    # No RagAgent: the first sub-agent whose name says RAG runs the node's agentic graph.
    status, body = node(secret, query=TWO_PARTS, sub_agents=["planner", "ops-rag", "AgenticRAG"])
    assert status == 200 and body["delegated_to"] == "ops-rag"
    assert "continue" in [h["route"] for h in body["routes"]]  # the tenant's config: FULL
    assert audited(body)["node"]["delegated_by"] == "rag_word"

    # A RagAgent named exactly, later in the list, wins over an earlier RAG-ish name.
    RagAgent.objects.create(tenant=acme.tenant, name="Knowledge", agentic_graph="SIMPLIFIED")
    status, body = node(secret, query=TWO_PARTS, sub_agents=["ops-rag", "knowledge"])
    assert body["delegated_to"] == "Knowledge" and [h["route"] for h in body["routes"]] == [
        "synthesize"]
    assert audited(body)["node"]["delegated_by"] == "rag_agent"


@pytest.mark.django_db
def test_the_nodes_audit_row_keeps_every_iterations_retrieval_details(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, body = node(secret, query=TWO_PARTS)
    assert body["structured"]["iterations"] >= 2
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    kept = row.details["retrievalDetails"]["iterations"]
    assert len(kept) == body["structured"]["iterations"]
    cited = {c.split("#")[0] for c in body["citations"]}
    handed = {key.split("#")[0] for hop in kept for key in hop["pack"]["evidence_keys"]}
    assert cited <= handed  # the evidence of every sub-question, not only of the last search
    staff = Client()
    staff.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-123456"))
    page = staff.get(f"/admin/audit/toolinvocation/{row.pk}/change/").content.decode()
    assert page.split('id="agentic-retrieval"', 1)[1].split("</table>")[0].count("<tr>") == \
        1 + len(kept)
