"""replay_evidence (GET /api/evidence/{tool_call_id}, MCP): exactly the excerpts a call served,
byte for byte, after the document was edited and the index rebuilt; scoped like the guard
(another tenant's call, or one of datasets the key may not read, is the same 404 as one that
never was; a piece whose document may no longer be served is withheld); audited; pruned with
the canonical records."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.canonical import canonical_prune
from audit.models import Channel, EvidenceReplay, ToolInvocation
from datasets.documents.services import dataset_create, document_delete
from datasets.models import Document
from retrieval.tools.mcp_server import call_tool
from tests.conftest import Kb
from tests.retrieval.conftest import MakeKey, client_for

RUNBOOK = ("# Kafka consumer lag\n\n## Restart a stuck consumer\n\nStop the consumer, reset "
           "its offsets to the latest committed ones with kafka-consumer-groups, then start it "
           "again and watch the lag fall.\n")
EDITED = RUNBOOK.replace("watch the lag fall", "check the lag graph is flat within ten minutes")
QUESTION = "how do I restart a stuck kafka consumer"


def replay(client: Any, tool_call_id: str) -> Any:
    return client.get(f"/api/evidence/{tool_call_id}")


def served(client: Any, **body: Any) -> dict[str, Any]:
    response = client.post("/api/tools/lookup_knowledge", {"query": QUESTION, **body},
                           format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["evidence_status"] == "READY", body
    return body


@pytest.mark.django_db
def test_a_lookup_replays_byte_identical_after_an_edit_and_a_rebuild(
        kb: Kb, ingest: Any, store: Any) -> None:
    document: Document = ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    lookup = served(kb.tool, tool_call_id="call_replay_1")

    first = replay(kb.tool, "call_replay_1")
    assert first.status_code == 200, first.content
    body = first.json()
    assert (body["tool_call_id"], body["evidence_status"], body["withheld"]) == (
        "call_replay_1", "READY", 0)
    assert body["index_version"] is not None
    # Each piece exactly as served, with the version it was read from.
    assert [{k: v for k, v in e.items() if k not in ("revision", "current")}
            for e in body["evidence"]] == lookup["evidence"]
    assert {(e["revision"], e["current"]) for e in body["evidence"]} == {
        (document.content_hash, True)}

    ingest(kb.dataset, "kafka/lag.md", EDITED.encode())
    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())
    now = served(kb.tool)
    assert "flat within ten minutes" in now["evidence"][0]["excerpt"]

    again = replay(kb.tool, "call_replay_1").json()
    assert [e["excerpt"] for e in again["evidence"]] == [e["excerpt"] for e in lookup["evidence"]]
    assert "watch the lag fall" in again["evidence"][0]["excerpt"]
    assert {e["current"] for e in again["evidence"]} == {False}
    assert again["index_version"] == body["index_version"]  # the call's, not today's


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
def test_a_fetch_replays_as_its_section_and_the_mcp_tool_answers_the_same(
        kb: Kb, ingest: Any, make_key: MakeKey) -> None:
    document: Document = ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    fetched = kb.tool.post("/api/tools/fetch_evidence", {
        "document_id": f"{document.doc_key}#chunk-0", "tool_call_id": "call_fetch_1"},
        format="json").json()

    body = replay(kb.tool, "call_fetch_1").json()
    assert body["index_version"] is None
    [piece] = body["evidence"]
    assert (piece["document_id"], piece["excerpt"], piece["breadcrumb"]) == (
        fetched["document_id"], fetched["text"], fetched["breadcrumb"])

    _, secret = make_key("acme")
    mcp = call_tool("replay_evidence", {"tool_call_id": "call_fetch_1"}, secret)
    assert not mcp.is_error and mcp.structured_content == body
    rows = ToolInvocation.objects.filter(tool_name="replay_evidence").order_by("pk")
    assert [(row.channel, row.tool_call_id, row.returned_count) for row in rows] == [
        (Channel.REST, "call_fetch_1", 1), (Channel.MCP, "call_fetch_1", 1)]


@pytest.mark.django_db
def test_a_call_outside_the_key_is_the_same_404_as_one_that_never_was(
        kb: Kb, ingest: Any, make_key: MakeKey) -> None:
    ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    served(kb.tool, tool_call_id="call_replay_2")
    other = dataset_create(tenant=kb.tenant, name="hr")
    _, narrow = make_key(role="tool", datasets=(other,))
    _, foreign = make_key(tenant="globex", role="tool")

    never = replay(kb.tool, "call_never_made")
    assert never.status_code == 404 and never.json()["code"] == "not_found"
    # The id asked is in the refused call's audit row: probing by id leaves a trace.
    probe = ToolInvocation.objects.get(tool_name="replay_evidence", tool_call_id="call_never_made")
    assert probe.outcome != "ok"
    assert kb.tool.head("/api/evidence/call_replay_2").status_code == 405  # no HEAD: no run
    for secret in (narrow, foreign):
        refused = replay(client_for(secret), "call_replay_2")
        assert refused.status_code == 404
        assert refused.json()["message"] == never.json()["message"].replace(
            "call_never_made", "call_replay_2")
    assert replay(kb.tool, "no spaces allowed").status_code in (400, 404)
    assert replay(client_for(None), "call_replay_2").status_code == 401


@pytest.mark.django_db
def test_a_deleted_document_is_withheld_and_expired_replays_are_pruned(
        kb: Kb, ingest: Any) -> None:
    document: Document = ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    served(kb.tool, tool_call_id="call_replay_3")

    document_delete(document=document)
    body = replay(kb.tool, "call_replay_3").json()
    assert (body["evidence"], body["withheld"]) == ([], 1)

    EvidenceReplay.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert replay(kb.tool, "call_replay_3").status_code == 404
    assert canonical_prune() >= 1 and not EvidenceReplay.objects.exists()


@pytest.mark.django_db
def test_a_copy_in_a_dataset_the_key_may_not_read_is_not_named(
        kb: Kb, ingest: Any, make_key: MakeKey) -> None:
    hidden = dataset_create(tenant=kb.tenant, name="team-b")
    ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    ingest(hidden, "notes/lag-copy.md", RUNBOOK.encode())
    lookup = served(kb.tool, tool_call_id="call_replay_4")  # the tenant's key reads both
    assert any(e["also_in"] for e in lookup["evidence"]), lookup

    _, narrow = make_key(role="tool", datasets=(kb.dataset,))
    body = replay(client_for(narrow), "call_replay_4").json()
    shown = [e for e in body["evidence"] if e["source"] == "kafka/lag.md"]
    assert shown and all(e["also_in"] == [] for e in shown)
    assert "notes/lag-copy.md" not in str(body)


@pytest.mark.django_db
def test_a_piece_kept_before_evidence_said_how_current_it_is_reads_as_unknown(
        kb: Kb, ingest: Any) -> None:
    from jsonschema import validate

    from retrieval.tools.schemas import output_schema

    ingest(kb.dataset, "kafka/lag.md", RUNBOOK.encode())
    served(kb.tool, tool_call_id="call_replay_5")
    row = EvidenceReplay.objects.get(tool_call_id="call_replay_5")
    row.evidence = [{k: v for k, v in piece.items()
                     if k not in ("updated_at", "reviewed_at", "valid_until", "owner", "stale")}
                    for piece in row.evidence]
    row.save()
    body = replay(kb.tool, "call_replay_5").json()
    assert {(e["stale"], e["owner"], e["updated_at"]) for e in body["evidence"]} == {
        (False, "", None)}
    validate(body, output_schema("replay_evidence"))
