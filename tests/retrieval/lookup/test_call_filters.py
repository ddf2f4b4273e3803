"""A call's `filters` narrow what its key may read, inside the Milvus query; they never widen
it, another tenant's document is one that does not exist, and the audit keeps which keys a
call filtered on, never their values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.models import InvocationDataset, Outcome, ToolInvocation
from datasets.documents.services import document_set_activation
from retrieval.tools.mcp_server import call_tool
from tests.conftest import BOTH_RUNTIMES
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    lookup,
    ready,
)
from tests.retrieval.lookup.test_service_scoping import BAD_GATEWAY, COOLANT


def _audited(call: str) -> dict[str, Any]:
    details: dict[str, Any] = ToolInvocation.objects.get(tool_call_id=call).details[
        "retrievalDetails"]
    return details


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_document_ids_narrow_the_search_to_those_documents(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    everywhere = evidence_ids(ready(lookup(client, BAD_GATEWAY)))
    assert {acme.stem_of(e) for e in everywhere} == {"nginx"}

    # An evidence id names its document, as its bare document id does.
    for named in (everywhere[0], acme.documents["nginx"].doc_key):
        body = ready(lookup(client, BAD_GATEWAY, filters={"document_ids": [named]}))
        assert {acme.stem_of(e) for e in evidence_ids(body)} == {"nginx"}
    # Narrowed to the other documents, the 502 runbook is never served.
    others = [d.doc_key for stem, d in acme.documents.items() if stem != "nginx"]
    body = lookup(client, BAD_GATEWAY, filters={"document_ids": others},
                  tool_call_id="call-others").json()
    assert "nginx" not in {acme.stem_of(e) for e in evidence_ids(body)}
    assert _audited("call-others")["filters"]["call"] == {"fields": [],
                                                          "documents": len(others)}


@pytest.mark.django_db
def test_another_tenants_document_looks_like_one_that_does_not_exist(
        acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    theirs = lookup(client, COOLANT, tool_call_id="call-theirs",
                    filters={"document_ids": [globex.documents["coolant"].doc_key]})
    nobody = lookup(client, COOLANT, tool_call_id="call-nobody",
                    filters={"document_ids": ["4242424242"]})
    malformed = lookup(client, COOLANT, tool_call_id="call-malformed",
                       filters={"document_ids": ["kafka.md", "0", "x#chunk-1"]})
    bodies = []
    for response in (theirs, nobody, malformed):
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["evidence_status"], body["evidence"]) == ("EMPTY", [])
        bodies.append({k: v for k, v in body.items() if k != "tool_call_id"})
    assert bodies[0] == bodies[1] == bodies[2]
    # EMPTY with its reason in the audit, the same for all three; no search ran.
    for call in ("call-theirs", "call-nobody", "call-malformed"):
        details = _audited(call)
        assert details["filters"]["call"] == {"fields": [], "documents": 0}
        assert details["retry"]["reason"] == ("the call's filters leave no document that may "
                                              "be served here")
        assert details["stages"] == []
    # Narrowed by its own filters, an EMPTY is no knowledge gap of the dataset (audit/gaps.py).
    assert set(InvocationDataset.objects.filter(invocation__tool_call_id__in=(
        "call-theirs", "call-nobody")).values_list("narrowed", flat=True)) == {True}
    lookup(client, COOLANT, tool_call_id="call-plain")
    assert not InvocationDataset.objects.get(invocation__tool_call_id="call-plain").narrowed


@pytest.mark.django_db
def test_a_document_outside_the_calls_datasets_or_switched_off_is_dropped_too(
        acme: Imported, acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    [edge] = acme_edge.documents.values()
    # The key reads both datasets; the call searches only ops: edge's runbook is not there.
    outside = lookup(client, BAD_GATEWAY, dataset_ids=[acme.dataset.pk],
                     filters={"document_ids": [edge.doc_key]}).json()
    assert (outside["evidence_status"], outside["evidence"]) == ("EMPTY", [])
    assert acme_edge.stem_of(evidence_ids(ready(lookup(
        client, BAD_GATEWAY, filters={"document_ids": [edge.doc_key]})))[0])
    document_set_activation(document=acme.documents["nginx"], activated=False)
    off = lookup(client, BAD_GATEWAY, tool_call_id="call-off",
                 filters={"document_ids": [acme.documents["nginx"].doc_key]}).json()
    assert (off["evidence_status"], off["evidence"]) == ("EMPTY", [])
    assert _audited("call-off")["filters"]["call"] == {"fields": [], "documents": 0}


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_metadata_keys_narrow_like_the_configs_and_only_their_names_are_audited(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    web = ready(lookup(client, BAD_GATEWAY, tool_call_id="call-web",
                       filters={"domain": ["web", "messaging"],
                                "updated_after": "2000-01-01"}))
    assert {acme.stem_of(e) for e in evidence_ids(web)} == {"nginx"}
    elsewhere = lookup(client, BAD_GATEWAY, filters={"domain": ["zoology"]}).json()
    assert {acme.stem_of(e) for e in evidence_ids(elsewhere)} <= {"zebra"}
    future = lookup(client, BAD_GATEWAY, filters={"updated_after": "2999-01-01"}).json()
    assert (future["evidence_status"], future["evidence"]) == ("EMPTY", [])

    audited = _audited("call-web")["filters"]
    assert audited["call"] == {"fields": ["domain", "updated_after"], "documents": None}
    assert "messaging" not in json.dumps(audited) and "2000" not in json.dumps(audited)


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_source_format_and_tags_narrow_by_what_the_documents_rows_hold(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    nginx = acme.documents["nginx"]
    for filters in ({"source": [nginx.source_path[:3]]}, {"tags": ["PHP-FPM"]},
                    {"format": ["md"], "tags": ["openresty", "kafka"]}):
        found = ready(lookup(client, BAD_GATEWAY, filters=filters))
        assert {acme.stem_of(e) for e in evidence_ids(found)} == {"nginx"}, filters
    for filters in ({"format": ["pdf"]}, {"source": ["no/such/folder/"]},
                    {"tags": ["kafka"], "document_ids": [nginx.doc_key]}):
        empty = lookup(client, BAD_GATEWAY, tool_call_id=f"call-{len(str(filters))}",
                       filters=filters).json()
        assert (empty["evidence_status"], empty["evidence"]) == ("EMPTY", []), filters
    # The audit keeps the keys, never the values.
    ready(lookup(client, BAD_GATEWAY, tool_call_id="call-tags", filters={"tags": ["php-fpm"]}))
    audited = _audited("call-tags")["filters"]["call"]
    assert audited["fields"] == ["tags"] and "php" not in json.dumps(audited)


@pytest.mark.django_db
def test_an_unknown_key_or_a_bad_value_is_refused_naming_it(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    refused: dict[str, object] = {
        "service": {"service": ["payments"]},  # silently dropped, it would search everything
        "domain": {"domain": "web"},  # a list, as the schema says
        "updated_after": {"updated_after": "last week"},
        "order": {"updated_after": "2026-02-01", "updated_before": "2026-01-01"},
        "empty": {"document_ids": []},
        "format": {"format": ["exe"]},
        "tags": {"tags": "kafka"},
    }
    for why, filters in refused.items():
        response = lookup(client, BAD_GATEWAY, filters=filters)
        assert response.status_code == 400, (why, response.content)
        assert "filters" in response.json()["extra"]["fields"], why
    assert ToolInvocation.objects.filter(outcome=Outcome.INVALID).count() == len(refused)


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
def test_the_mcp_tool_and_the_answering_tools_take_the_same_filters(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    others = [d.doc_key for stem, d in acme.documents.items() if stem != "nginx"]
    narrowed = call_tool("lookup_knowledge", {"query": BAD_GATEWAY,
                                              "filters": {"document_ids": others}}, secret)
    assert not narrowed.is_error
    content = narrowed.structured_content or {}
    assert "nginx" not in {acme.stem_of(e["document_id"]) for e in content["evidence"]}
    client = client_for(secret)
    answer = client.post("/api/rag/answer", {
        "query": BAD_GATEWAY, "filters": {"domain": ["web"]}}, format="json").json()
    assert {acme.stem_of(e["document_id"]) for e in answer["evidence"]} == {"nginx"}
    for path in ("/api/rag/agentic", "/api/rag/node"):
        body = client.post(path, {"query": BAD_GATEWAY, "filters": {"document_ids": others}},
                           format="json").json()
        assert "nginx" not in {acme.stem_of(e["document_id"]) for e in body["evidence"]}, path


def test_the_tools_filter_keys_are_the_configs_and_document_ids() -> None:
    """One whitelist: the tool's contract declares exactly metadata_filters' keys,
    document_ids and the documents' own (source, format, tags, fields), which is what call_filters
    (the commands', the admin's) accepts."""
    from retrieval.ragconfig.config import DOCUMENT_MATCH_KEYS
    from retrieval.ragconfig.filters import LookupFiltersInput
    from retrieval.ragconfig.settings import METADATA_FILTER_KEYS

    assert set(LookupFiltersInput().fields) == {*METADATA_FILTER_KEYS, "document_ids",
                                                *DOCUMENT_MATCH_KEYS}
