"""The rate_evidence tool (REST and MCP): helpful / not helpful, only for evidence served to a
call of the same key; anything else is refused with `not_served` and rates nothing; every call
is audited; the ratings are counted beside the cited rate."""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import Channel, Rating, ServedEvidence, ToolInvocation
from retrieval.tools.mcp_server import call_tool
from tests.retrieval.conftest import Imported, MakeKey, client_for, evidence_ids, lookup, ready

pytestmark = pytest.mark.django_db
RATE = "/api/tools/rate_evidence"
BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"


def rate(client: Any, **body: Any) -> Any:
    return client.post(RATE, body, format="json")


def test_a_key_rates_what_its_own_call_served_and_nothing_else(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    served = evidence_ids(ready(lookup(agent, BAD_GATEWAY, tool_call_id="r1")))
    zebra = acme.documents['zebra'].chunks.first().evidence_key  # served by its anchor

    answer = rate(agent, tool_call_id="r1", document_ids=served[:1], rating="helpful")
    assert answer.status_code == 200
    assert answer.json() == {"tool_call_id": "r1", "rating": "helpful", "rated": served[:1]}
    row = ToolInvocation.objects.get(tool_name="rate_evidence")
    assert (row.outcome, row.channel, row.returned_count) == ("ok", Channel.REST, 1)

    # Evidence the call did not serve: refused, and the served item asked with it unrated.
    refused = rate(agent, tool_call_id="r1", document_ids=[served[-1], zebra],
                   rating="not_helpful")
    assert refused.status_code == 404
    assert refused.json()["code"] == "not_served"
    assert refused.json()["extra"] == {"document_ids": [zebra]}
    # Another key of the same tenant, another tenant, a call never made: all the same answer.
    _, other_key = make_key("acme")
    _, stranger = make_key("globex")
    for client, call in ((client_for(other_key), "r1"), (client_for(stranger), "r1"),
                         (agent, "never-made")):
        again = rate(client, tool_call_id=call, document_ids=served[:1], rating="not_helpful")
        assert again.status_code == 404 and again.json()["code"] == "not_served"
    ratings = dict(ServedEvidence.objects.values_list("evidence_key", "rating"))
    assert ratings == {key: "helpful" if key == served[0] else "" for key in served}
    failed = ToolInvocation.objects.filter(tool_name="rate_evidence").exclude(outcome="ok")
    assert failed.count() == 4 and {r.outcome for r in failed} == {"invalid"}

    _, admin = make_key("acme", role="admin")
    total = client_for(admin).get("/api/audit/cited-rates").json()["total"]
    assert (total["served"], total["helpful"], total["not_helpful"]) == (len(served), 1, 0)


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
def test_over_mcp_alike_a_new_rating_replaces_the_last(acme: Imported,
                                                      make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, other_key = make_key("acme")
    served = evidence_ids(ready(lookup(client_for(secret), BAD_GATEWAY, tool_call_id="r2")))
    assert not call_tool("rate_evidence", {"tool_call_id": "r2", "document_ids": served[:1],
                                           "rating": "helpful"}, secret).is_error
    result = call_tool("rate_evidence", {"tool_call_id": "r2", "document_ids": served[:1],
                                         "rating": "not_helpful"}, secret)
    assert not result.is_error and result.structured_content["rated"] == served[:1]
    assert ServedEvidence.objects.get(evidence_key=served[0]).rating == Rating.NOT_HELPFUL
    assert ToolInvocation.objects.filter(tool_name="rate_evidence",
                                         channel=Channel.MCP).count() == 2
    refused = call_tool("rate_evidence", {"tool_call_id": "r2", "document_ids": served[:1],
                                          "rating": "helpful"}, other_key)
    assert refused.is_error and refused.structured_content["code"] == "not_served"
    assert ServedEvidence.objects.get(evidence_key=served[0]).rating == Rating.NOT_HELPFUL
    _, admin = make_key("acme", role="admin")
    total = client_for(admin).get("/api/audit/cited-rates").json()["total"]
    assert (total["helpful"], total["not_helpful"]) == (0, 1)


def test_rate_evidence_validates_its_input(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    for body in ({"tool_call_id": "x", "document_ids": ["1#chunk-0"], "rating": "meh"},
                 {"tool_call_id": "x", "document_ids": [], "rating": "helpful"},
                 {"tool_call_id": "x", "document_ids": ["k"] * 51, "rating": "helpful"},
                 {"document_ids": ["1#chunk-0"], "rating": "helpful"}):
        answer = rate(agent, **body)
        assert answer.status_code == 400 and answer.json()["code"] == "invalid", body
    assert rate(client_for(None), tool_call_id="x", document_ids=["1#chunk-0"],
                rating="helpful").status_code == 401
