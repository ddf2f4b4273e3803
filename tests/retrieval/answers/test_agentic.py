"""POST /api/rag/agentic: every route of the agentic graph (direct, continue, self_correct,
synthesize, no_answer), offline and with a real local chat-completions server as the judge."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from audit.models import Outcome, ToolInvocation
from audit.privacy import audited_text
from retrieval.models import RagConfig
from tests.retrieval.chat_server import ChatServer, asks_to_judge, careful_reply, chat_server
from tests.retrieval.conftest import Imported, MakeKey, client_for

pytestmark = pytest.mark.django_db

TWO_PARTS = "How do I fix nginx 502 bad gateway? Why does kafka consumer lag grow?"


@pytest.fixture
def server(settings: Any) -> Iterator[ChatServer]:
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = running.url, "local-chat"
        yield running


def agentic(secret: str, query: str) -> tuple[int, dict[str, Any]]:
    response = client_for(secret).post("/api/rag/agentic",
                                       {"query": query, "tool_call_id": f"c-{uuid.uuid4().hex}"},
                                       format="json")
    payload: dict[str, Any] = response.json()
    return response.status_code, payload


def routes(body: dict[str, Any]) -> list[str]:
    return [hop["route"] for hop in body["routes"]]


def audited(body: dict[str, Any]) -> dict[str, Any]:
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    assert row.tool_name == "rag_agentic" and row.session_id == body["session_id"]
    return {"outcome": row.outcome, **row.details["answer"]}


def guarded(secret: str, body: dict[str, Any]) -> list[str]:
    response = client_for(secret).post(
        "/api/tools/evidence_guard",
        {"session_id": body["session_id"], "document_ids": body["citations"]}, format="json")
    ready: list[str] = response.json()["ready"]
    return ready


def test_a_two_part_question_continues_to_its_second_part_then_synthesizes(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    status, body = agentic(secret, TWO_PARTS)
    assert status == 200 and body["answer_status"] == "ANSWERED"
    assert routes(body)[-1] == "synthesize" and "continue" in routes(body)
    assert [hop["query"] for hop in body["routes"] if hop["route"] == "continue"][0] == \
        "How do I fix nginx 502 bad gateway"
    assert body["iterations"] == len(body["routes"]) >= 2
    cited = {acme.stem_of(c) for c in body["citations"]}
    assert cited == {"nginx", "kafka"}  # each sub-question's evidence answers its part
    assert guarded(secret, body) == body["citations"]
    assert 0 < body["confidence"] <= 1
    trace = audited(body)
    assert [hop["route"] for hop in trace["iterations"]] == routes(body)
    assert trace["outcome"] == Outcome.OK and trace["analysis"]["sub_questions"] == 2
    # The audit keeps no query text unless the tenant keeps raw queries: the plan and each
    # iteration's query are their lengths and hashes.
    assert "nginx" not in json.dumps(trace) and len(trace["plan"]) == 2
    assert all(re.fullmatch(r"\d+ characters #[0-9a-f]{8}", q) for q in trace["plan"])

    # The operator reads the iterations on the invocation's admin page.
    staff = Client()
    staff.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-123456"))
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    page = staff.get(f"/admin/audit/toolinvocation/{row.pk}/change/").content.decode()
    table = page.split('id="agentic-iterations"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 1 + len(body["routes"])
    assert "continue" in table and "synthesize" in table


def test_a_question_with_nothing_to_look_up_goes_direct(acme: Imported,
                                                        make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    status, body = agentic(secret, "谢谢！")
    assert status == 200
    assert (body["answer_status"], routes(body), body["iterations"]) == ("NO_ANSWER", ["direct"],
                                                                         0)
    assert audited(body)["answer_status"] == "NO_ANSWER"


def test_nothing_found_self_corrects_then_answers_no_answer(acme: Imported,
                                                            make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    status, body = agentic(secret, "What is the capital of Mongolia?")
    assert status == 200 and body["answer_status"] == "EMPTY"
    assert routes(body) == ["self_correct", "no_answer"]
    assert body["routes"][0]["next"] == "capital of Mongolia"  # the words of asking dropped
    assert (body["answer"], body["citations"], body["evidence"]) == ("", [], [])
    staff = Client()
    staff.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-123456"))
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    page = staff.get(f"/admin/audit/toolinvocation/{row.pk}/change/").content.decode()
    assert "<th>generator</th><td>none</td>" in page and "no_answer" in page


def test_the_judges_better_query_is_searched_and_corrections_are_bounded(
        acme: Imported, make_key: MakeKey, server: ChatServer) -> None:
    RagConfig.objects.create(tenant=acme.tenant, agentic_max_retry_count=1)
    grades = iter([0.1, 0.2])

    def script(body: dict[str, Any]) -> str:
        if asks_to_judge(body):  # never satisfied
            return json.dumps({"score": next(grades), "reason": "not the fix",
                               "better_query": "kafka consumer lag fix add consumers"})
        return careful_reply(body)

    server.reply = script
    _, secret = make_key("acme")
    status, body = agentic(secret, "why is kafka slow")
    assert status == 200 and body["answer_status"] == "ANSWERED"
    assert routes(body) == ["self_correct", "synthesize"]  # agentic_max_retry_count=1
    assert body["routes"][0]["next"] == "kafka consumer lag fix add consumers"
    assert body["routes"][1]["query"] == "kafka consumer lag fix add consumers"
    assert [hop["quality"] for hop in body["routes"]] == [0.1, 0.2]
    assert body["confidence"] == 0.2
    trace = audited(body)
    assert trace["generator"] == "openai/local-chat"
    # Every model call of the run is counted: the plan, two judges and the answer.
    assert all(hop["judge_usage"]["model"] == "local-chat" for hop in body["routes"])
    usage = trace["model_usage"]
    assert usage["calls"] == 4 and usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def test_a_failing_judge_falls_back_to_the_rules_or_is_unavailable(
        acme: Imported, make_key: MakeKey, server: ChatServer) -> None:
    server.behaviour = "500"
    _, secret = make_key("acme")
    status, body = agentic(secret, "kafka consumer lag alert")
    assert status == 200 and body["answer_status"] == "ANSWERED"  # rules judge, extractive
    assert audited(body)["generator"] == "extractive (fallback)"
    assert body["routes"][0]["judge_error"] == "the chat model answered HTTP 500"

    RagConfig.objects.create(tenant=acme.tenant, enable_fallback=False)
    status, body = agentic(secret, "kafka consumer lag alert")
    assert status == 503 and body["answer_status"] == "UNAVAILABLE"
    trace = audited(body)
    assert "the chat model answered HTTP 500" in trace["error"]
    assert trace["outcome"] == Outcome.UNAVAILABLE


def test_with_raw_queries_on_the_audit_keeps_the_plan(acme: Imported, make_key: MakeKey,
                                                      settings: Any) -> None:
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    _, secret = make_key("acme")
    _, body = agentic(secret, TWO_PARTS)
    trace = audited(body)
    assert trace["plan"] == [audited_text("How do I fix nginx 502 bad gateway"),
                             audited_text("Why does kafka consumer lag grow")]
    assert [hop["query"] for hop in trace["iterations"]] == [
        audited_text(h["query"]) for h in body["routes"]]


def test_the_whole_run_keeps_its_deadline(acme: Imported, make_key: MakeKey,
                                          server: ChatServer) -> None:
    """A slow judge on every iteration: the run stops correcting once its time is spent."""
    RagConfig.objects.create(tenant=acme.tenant, timeout_millis=1500, agentic_max_retry_count=5)
    server.behaviour, server.delay_s = "slow", 0.6
    _, secret = make_key("acme")
    started = time.monotonic()
    status, body = agentic(secret, TWO_PARTS)
    assert time.monotonic() - started < 5.0
    assert status in (200, 503) and body["iterations"] <= 4
