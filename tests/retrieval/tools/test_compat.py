"""Drop-in backends: Dify's External Knowledge API and OpenAI's vector-store search, each the
same scoped, audited lookup, in the shapes those stacks send and read (Dify's as documented;
OpenAI's through its own SDK on a real local server)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from audit.models import InvocationDataset, ToolInvocation
from tests.retrieval.conftest import Imported, MakeKey, client_for

DIFY = "/api/dify/retrieval"
BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"
OFF_TOPIC = "What is the capital of Mongolia?"


def dify(client: Any, **body: Any) -> Any:
    body.setdefault("retrieval_setting", {"top_k": 5, "score_threshold": 0.0})
    return client.post(DIFY, body, format="json")


@pytest.mark.django_db
def test_dify_retrieves_records_from_a_dataset_of_the_key(acme: Imported,
                                                          make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    for knowledge in ("ops", str(acme.dataset.pk)):  # by name or by id
        answer = dify(agent, knowledge_id=knowledge, query=BAD_GATEWAY)
        assert answer.status_code == 200, answer.content
        records = answer.json()["records"]
        assert records and set(records[0]) == {"content", "score", "title", "metadata"}
        assert acme.stem_of(records[0]["metadata"]["document_id"]) == "nginx"
        assert all(0 <= r["score"] <= 1 and isinstance(r["metadata"], dict) for r in records)
    # top_k and score_threshold, as Dify sends them (its metadata_condition null): only
    # what is handed out is recorded, for the guard as for the audit.
    one = dify(agent, knowledge_id="ops", query=BAD_GATEWAY, metadata_condition=None,
               retrieval_setting={"top_k": 1, "score_threshold": 0.0}).json()["records"]
    assert len(one) == 1
    call = one[0]["metadata"]["tool_call_id"]
    others = [r["metadata"]["document_id"] for r in records[1:]]
    verdict = agent.post("/api/tools/evidence_guard", {
        "tool_call_id": call, "document_ids": [one[0]["metadata"]["document_id"], *others]},
        format="json").json()
    assert verdict["ready"] == [one[0]["metadata"]["document_id"]]
    row = ToolInvocation.objects.get(tool_call_id=call)
    assert row.returned_count == 1 and row.details["retrievalDetails"]["trim"]["limit"] == 1
    # A threshold nothing reaches: EMPTY, but no knowledge gap (the caller asked for less).
    none = dify(agent, knowledge_id="ops", query=BAD_GATEWAY,
                retrieval_setting={"top_k": 5, "score_threshold": 1.0}).json()
    assert none == {"records": []} or all(r["score"] >= 1.0 for r in none["records"])
    last = ToolInvocation.objects.filter(tool_name="dify_retrieval").latest("id")
    assert last.details["retrievalDetails"]["trim"]["min_quality"] == 1.0
    assert set(InvocationDataset.objects.filter(invocation=last)
               .values_list("narrowed", flat=True)) == {True}
    best = one[0]["score"]
    above = dify(agent, knowledge_id="ops", query=BAD_GATEWAY,
                 retrieval_setting={"top_k": 5, "score_threshold": min(best + 0.0001, 1)})
    assert all(r["score"] > best for r in above.json()["records"])
    assert dify(agent, knowledge_id="ops", query=OFF_TOPIC).json() == {"records": []}
    # Metadata conditions narrow the lookup; one it cannot keep is refused, never ignored.
    kafka = dify(agent, knowledge_id="ops", query=BAD_GATEWAY, metadata_condition={
        "logical_operator": "and", "conditions": [
            {"name": "category", "comparison_operator": "is", "value": "messaging"}]})
    assert {acme.stem_of(r["metadata"]["document_id"]) for r in kafka.json()["records"]} <= \
        {"kafka"}
    refused = dify(agent, knowledge_id="ops", query=BAD_GATEWAY, metadata_condition={
        "conditions": [{"name": "category", "comparison_operator": "contains", "value": "w"}]})
    assert refused.status_code == 400 and refused.json()["error_code"] == 400
    assert "contains" in refused.json()["error_msg"] and "ErrorDetail" not in refused.text
    # A date as Dify keeps its time metadata: epoch seconds.
    later = dify(agent, knowledge_id="ops", query=BAD_GATEWAY, metadata_condition={
        "conditions": [{"name": "updated_at", "comparison_operator": "after",
                        "value": 4_000_000_000}]})
    assert later.json() == {"records": []}
    rows = ToolInvocation.objects.filter(tool_name="dify_retrieval")
    assert rows.count() == 9 and rows.filter(outcome="invalid").count() == 1


@pytest.mark.django_db
def test_dify_errors_are_difys_and_another_tenants_dataset_does_not_exist(
        acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    body = {"knowledge_id": "ops", "query": BAD_GATEWAY}
    assert dify(client_for(None), **body).json() == {
        "error_code": 1001,
        "error_msg": "Invalid Authorization header format. Expected 'Bearer <api-key>' format."}
    refused = dify(client_for("kb_wrong_key"), **body)
    assert (refused.status_code, refused.json()["error_code"]) == (403, 1002)
    for knowledge in ("no-such-dataset", str(globex.dataset.pk)):
        missing = dify(client_for(secret), **{**body, "knowledge_id": knowledge})
        assert missing.status_code == 404
        assert missing.json() == {"error_code": 2001,
                                  "error_msg": "The knowledge does not exist"}
    # An id is an id before it is a name: a dataset named "1" does not shadow dataset 1.
    from datasets.documents.services import dataset_create

    dataset_create(tenant=acme.tenant, name=str(acme.dataset.pk))
    by_id = dify(client_for(secret), **{**body, "knowledge_id": str(acme.dataset.pk)})
    assert by_id.json()["records"]
    invalid = client_for(secret).post(DIFY, {"query": "x"}, format="json")
    assert invalid.status_code == 400 and invalid.json()["error_code"] == 400
    assert ToolInvocation.objects.filter(tool_name="dify_retrieval").count() == 6


@pytest.mark.django_db(transaction=True)
def test_openais_sdk_searches_a_dataset_as_a_vector_store(acme: Imported, make_key: MakeKey,
                                                          web: str) -> None:
    _, secret = make_key("acme")
    client = openai.OpenAI(base_url=f"{web}/api/openai", api_key=secret, max_retries=0)
    page = client.vector_stores.search("ops", query=BAD_GATEWAY, max_num_results=2)
    assert 0 < len(page.data) <= 2 and page.search_query == [BAD_GATEWAY]  # type: ignore
    hit = page.data[0]
    assert acme.stem_of(hit.file_id) == "nginx" and hit.filename.endswith("nginx.md")
    assert hit.content[0].type == "text" and hit.content[0].text and 0 <= hit.score <= 1
    narrowed = client.vector_stores.search(
        str(acme.dataset.pk), query=[BAD_GATEWAY],
        filters={"type": "eq", "key": "category", "value": "messaging"})
    assert {acme.stem_of(h.file_id) for h in narrowed.data} <= {"kafka"}
    assert client.vector_stores.search("ops", query=OFF_TOPIC).data == []

    with pytest.raises(openai.BadRequestError, match="not a filter"):
        client.vector_stores.search("ops", query="x", filters={
            "type": "ne", "key": "category", "value": "web"})
    with pytest.raises(openai.BadRequestError):  # a date past any calendar: refused, not a 500
        client.vector_stores.search("ops", query="x", filters={
            "type": "gte", "key": "updated_at", "value": 1e20})
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.search("no-such-store", query=BAD_GATEWAY)
    stranger = openai.OpenAI(base_url=f"{web}/api/openai", api_key="kb_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.vector_stores.search("ops", query=BAD_GATEWAY)
    rows = ToolInvocation.objects.filter(tool_name="vector_store_search")
    assert [r.outcome for r in rows.order_by("id")] == [
        "ok", "empty", "empty", "invalid", "invalid", "invalid", "unauthenticated"]
