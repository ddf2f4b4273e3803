"""POST /api/tools/evidence_guard: only evidence an agent really got as READY counts."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from datasets.models import Chunk
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    lookup,
    ready,
)

GUARD = "/api/tools/evidence_guard"
BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"
KAFKA_LAG = "kafka consumer group lag keeps growing"


def new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


def guard(client: APIClient, **body: Any) -> dict[str, list[str]]:
    response = client.post(GUARD, body, format="json")
    assert response.status_code == 200, response.content
    verdict: dict[str, list[str]] = response.json()
    return verdict


def chunk_ids(imported: Imported, stem: str) -> list[str]:
    document = imported.documents[stem]
    return [chunk.evidence_key for chunk in Chunk.objects.filter(document=document)]


@pytest.mark.django_db
def test_the_guard_accepts_exactly_the_ready_evidence_of_one_invocation(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    call = new_id("call")
    got = evidence_ids(ready(lookup(client, BAD_GATEWAY, tool_call_id=call)))

    zebra = chunk_ids(acme, "zebra")[0]  # a real chunk, but not one this call returned
    made_up = f"{acme.documents['nginx'].doc_key}#chunk-99"
    verdict = guard(client, tool_call_id=call, document_ids=[*got, zebra, made_up])
    assert verdict == {"ready": got, "not_ready": [zebra, made_up]}

    # Evidence of one call is not evidence of another, nor of a call never made.
    assert guard(client, tool_call_id=new_id("call"), document_ids=got) == \
        {"ready": [], "not_ready": got}


@pytest.mark.django_db
def test_an_empty_answer_makes_nothing_ready(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    call = new_id("call")
    answer = lookup(client, "the coolant pump vibrates, is the bearing worn?", tool_call_id=call)
    assert answer.json()["evidence_status"] == "EMPTY"

    nginx = chunk_ids(acme, "nginx")
    assert guard(client, tool_call_id=call, document_ids=nginx)["ready"] == []


@pytest.mark.django_db
def test_the_guard_accepts_the_ready_evidence_of_every_call_of_a_session(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    sid = new_id("s")
    first = evidence_ids(ready(lookup(client, BAD_GATEWAY, session_id=sid)))
    second = evidence_ids(ready(lookup(client, KAFKA_LAG, session_id=sid)))
    other_session = evidence_ids(ready(lookup(client, "why do zebras have stripes",
                                              session_id=new_id("s"))))

    verdict = guard(client, session_id=sid, document_ids=[*first, *second, *other_session])
    assert verdict == {"ready": [*first, *second], "not_ready": other_session}


@pytest.mark.django_db
def test_another_tenants_call_or_session_gives_nothing(acme: Imported,
                                                      make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, stranger_secret = make_key("globex")
    call, sid = new_id("call"), new_id("s")
    got = evidence_ids(ready(lookup(client_for(secret), BAD_GATEWAY, tool_call_id=call,
                                    session_id=sid)))

    stranger = client_for(stranger_secret)
    assert guard(stranger, tool_call_id=call, document_ids=got) == \
        {"ready": [], "not_ready": got}
    assert guard(stranger, session_id=sid, document_ids=got)["ready"] == []
    # The owner still gets its verdict: the stranger's question changed nothing.
    assert guard(client_for(secret), tool_call_id=call, document_ids=got)["ready"] == got


@pytest.mark.django_db
def test_the_guard_validates_its_input_and_needs_a_key(make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    invalid = [
        {"document_ids": ["1#chunk-0"]},  # neither id
        {"tool_call_id": "c", "session_id": "s", "document_ids": ["1#chunk-0"]},  # both
        {"tool_call_id": "c", "document_ids": []},
        {"tool_call_id": "c"},
        {"tool_call_id": "no spaces allowed", "document_ids": ["1#chunk-0"]},
    ]
    for body in invalid:
        response = client.post(GUARD, body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["code"] == "invalid"

    body = {"tool_call_id": "c", "document_ids": ["1#chunk-0"]}
    assert client_for(None).post(GUARD, body, format="json").status_code == 401
    assert client_for("kb_bad_key").post(GUARD, body, format="json").status_code == 401


@pytest.mark.django_db
def test_a_call_id_reused_by_another_session_does_not_lend_it_evidence(
        acme: Imported, make_key: MakeKey) -> None:
    # Agent runs often number their calls ("call_0", "call_1", ...): ids repeat across runs.
    _, secret = make_key("acme")
    client = client_for(secret)
    call, mine, theirs = new_id("call"), new_id("s"), new_id("s")
    nginx = evidence_ids(ready(lookup(client, BAD_GATEWAY, tool_call_id=call, session_id=mine)))
    kafka = evidence_ids(ready(lookup(client, KAFKA_LAG, tool_call_id=call, session_id=theirs)))

    assert guard(client, session_id=mine, document_ids=[*nginx, *kafka]) == \
        {"ready": nginx, "not_ready": kafka}
    assert guard(client, session_id=theirs, document_ids=[*nginx, *kafka]) == \
        {"ready": kafka, "not_ready": nginx}
