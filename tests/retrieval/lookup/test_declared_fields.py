"""Frontmatter fields a tenant declares filterable: a call narrows to the documents whose field
holds one of its values (case aside), every transport takes them, a field the tenant did not
declare is refused naming those it did, and the audit keeps the field's name, never a value."""

from __future__ import annotations

import json

import openai
import pytest
from django.core.exceptions import ValidationError

from audit.models import Outcome, ToolInvocation
from datasets.documents.services import tenant_fields_declare
from datasets.models import Tenant, validate_filterable_fields
from retrieval.tools.mcp_server import call_tool
from tests.conftest import BOTH_RUNTIMES
from tests.retrieval.conftest import Imported, MakeKey, client_for, evidence_ids, lookup
from tests.retrieval.lookup.test_service_scoping import BAD_GATEWAY

KAFKA_LAG = "kafka consumer group lag keeps growing"


def _declare(tenant: Tenant, *names: str) -> None:
    tenant_fields_declare(tenant=tenant, names=list(names))


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_a_declared_field_narrows_to_the_documents_holding_one_of_its_values(
        runtime: str, acme: Imported, make_key: MakeKey) -> None:
    _declare(acme.tenant, "team", "service")
    _, secret = make_key("acme")
    client = client_for(secret)
    # nginx.md says `team: Web-Platform`, kafka.md `team: [data, sre]`.
    web = lookup(client, BAD_GATEWAY, tool_call_id="call-team",
                 filters={"fields": {"team": ["web-platform"]}}).json()
    assert {acme.stem_of(e) for e in evidence_ids(web)} == {"nginx"}
    sre = lookup(client, KAFKA_LAG, filters={"fields": {"team": ["SRE", "nobody"]}}).json()
    assert {acme.stem_of(e) for e in evidence_ids(sre)} == {"kafka"}
    # Every field given must match; a document without the field never does.
    for fields in ({"team": ["sre"], "service": ["orders"]}, {"service": ["orders"]}):
        empty = lookup(client, BAD_GATEWAY, filters={"fields": fields}).json()
        assert (empty["evidence_status"], empty["evidence"]) == ("EMPTY", []), fields
    assert client.get("/api/datasets").json()["filterable_fields"] == ["team", "service"]
    audited = ToolInvocation.objects.get(tool_call_id="call-team").details[
        "retrievalDetails"]["filters"]["call"]
    assert audited["fields"] == ["fields.team"] and "platform" not in json.dumps(audited).lower()


@pytest.mark.django_db
def test_a_declared_field_never_reaches_another_tenants_documents(
        acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    """Both tenants' 502 runbooks say `team: web-platform`; each key is served its own."""
    for tenant in (acme.tenant, globex.tenant):
        _declare(tenant, "team")
    for imported, other in ((acme, globex), (globex, acme)):
        _, secret = make_key(imported.tenant.slug)
        found = lookup(client_for(secret), BAD_GATEWAY, tool_call_id=f"x-{imported.tenant.pk}",
                       filters={"fields": {"team": ["web-platform"]}}).json()
        served = evidence_ids(found)
        assert served and all(imported.stem_of(e) for e in served)
        assert not any(other.stem_of(e) for e in served)


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
def test_a_field_the_tenant_did_not_declare_is_refused_naming_the_declared(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    undeclared = lookup(client, BAD_GATEWAY, filters={"fields": {"team": ["sre"]}})
    assert undeclared.status_code == 400, undeclared.content
    assert "'team'" in undeclared.json()["message"] and "declared: none" in \
        undeclared.json()["message"]
    assert "filters" in undeclared.json()["extra"]["fields"]
    _declare(acme.tenant, "service")
    for fields in ({"team": ["sre"]}, {"Team": ["sre"]}, {}, {"a" * 41: ["x"]},
                   {f"f{n}": ["x"] for n in range(11)}, {"service": "orders"}):
        refused = lookup(client, BAD_GATEWAY, filters={"fields": fields})
        assert refused.status_code == 400, (fields, refused.content)
    assert "declared: service" in lookup(client, BAD_GATEWAY, filters={
        "fields": {"team": ["sre"]}}).json()["message"]
    assert ToolInvocation.objects.filter(outcome=Outcome.INVALID).count() == 8
    over_mcp = call_tool("lookup_knowledge", {"query": BAD_GATEWAY,
                                              "filters": {"fields": {"team": ["sre"]}}}, secret)
    assert over_mcp.is_error


@pytest.mark.django_db(transaction=True)
def test_dify_and_openai_take_declared_fields_by_name(acme: Imported, make_key: MakeKey,
                                                      web: str) -> None:
    _declare(acme.tenant, "team")
    _, secret = make_key("acme")
    agent = client_for(secret)
    dify = agent.post("/api/dify/retrieval", {
        "knowledge_id": "ops", "query": KAFKA_LAG,
        "retrieval_setting": {"top_k": 5, "score_threshold": 0.0},
        "metadata_condition": {"conditions": [
            {"name": "team", "comparison_operator": "is", "value": "web-platform"}]}},
        format="json")
    assert dify.status_code == 200, dify.content
    assert {acme.stem_of(r["metadata"]["document_id"]) for r in dify.json()["records"]} <= \
        {"nginx"}
    undeclared = agent.post("/api/dify/retrieval", {
        "knowledge_id": "ops", "query": KAFKA_LAG,
        "retrieval_setting": {"top_k": 5, "score_threshold": 0.0},
        "metadata_condition": {"conditions": [
            {"name": "region", "comparison_operator": "is", "value": "eu"}]}}, format="json")
    assert undeclared.status_code == 400 and "region" in undeclared.json()["error_msg"]
    client = openai.OpenAI(base_url=f"{web}/api/openai", api_key=secret, max_retries=0)
    found = client.vector_stores.search("ops", query=KAFKA_LAG, filters={
        "type": "or", "filters": [{"type": "eq", "key": "team", "value": "data"},
                                  {"type": "eq", "key": "team", "value": "nobody"}]})
    assert found.data and {acme.stem_of(h.file_id) for h in found.data} == {"kafka"}
    with pytest.raises(openai.BadRequestError, match="region"):
        client.vector_stores.search("ops", query="x", filters={
            "type": "eq", "key": "region", "value": "eu"})


@pytest.mark.parametrize("names", [
    ["Team"], ["owner"], ["domain"], ["team", "team"], [f"f{n}" for n in range(11)], "team",
    [1], ["a" * 41], ["source"], ["fields"], ["updated_at"], ["document_id"]])
def test_a_declaration_names_identifiers_of_the_tenants_own(names: object) -> None:
    with pytest.raises(ValidationError):
        validate_filterable_fields(names)
    validate_filterable_fields(["team", "service_tier", "region2"])


@pytest.mark.pure
def test_no_declared_field_can_take_a_built_in_filters_name() -> None:
    from datasets.models import RESERVED_FIELD_NAMES
    from retrieval.ragconfig.filters import LookupFiltersInput
    from retrieval.tools.compat import FIELDS, UPDATED

    assert set(LookupFiltersInput().fields) | {*FIELDS, UPDATED, "document_id"} <= \
        RESERVED_FIELD_NAMES
