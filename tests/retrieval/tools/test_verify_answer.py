"""verify_answer: each sentence of an agent's answer against what its call (or session) was
served — supported by a chunk holding its words and every identifier it names, or listed as
unsupported; scoped like the guard; audited, and counted per config version beside the cited
rate."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from audit.models import AnswerCheck, ToolInvocation
from retrieval.answers.verify import JUDGE_PROMPT, judged, verify
from retrieval.tools.mcp_server import call_tool
from tests.retrieval.chat_server import chat_server
from tests.retrieval.conftest import Imported, MakeKey, client_for, evidence_ids, lookup, ready

VERIFY = "/api/tools/verify_answer"
BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"


def check(client: Any, **body: Any) -> Any:
    return client.post(VERIFY, body, format="json")


def test_a_sentence_is_supported_by_a_chunk_with_its_words_and_identifiers() -> None:
    served = {"1#chunk-0": "Restart php-fpm when nginx answers 502 Bad Gateway; check "
                           "proxy_pass points at the port the application listens on.",
              "2#chunk-0": "Kafka consumer lag grows when consumers are slow."}
    done = verify("Restart php-fpm when nginx answers 502 [1#chunk-0]. Then check that "
                  "proxy_pass points at the application's port.\nSources:\nThe fix needs "
                  "nginx 1.25.3 or later. Drink more coffee in the morning. 重启 php-fpm。",
                  served)
    by_text = {s.text: s for s in done.sentences}
    first = by_text["Restart php-fpm when nginx answers 502."]
    assert first.supported and first.evidence == ("1#chunk-0",)
    assert first.cited == ("1#chunk-0",)
    assert by_text["Then check that proxy_pass points at the application's port."].supported
    # An identifier the evidence does not hold: unsupported, whatever else matches.
    assert not by_text["The fix needs nginx 1.25.3 or later."].supported
    assert "Drink more coffee in the morning." in done.unsupported
    assert by_text["重启 php-fpm。"].supported  # its identifier, and 2 of its 3 terms
    assert done.skipped == 1 and done.evidence == 2  # "Sources:": too short to judge
    assert verify("Restart php-fpm.", {}).unsupported == ("Restart php-fpm.",)
    # Every number counts, however short; an abbreviation is no identifier; a marker after
    # the sentence's end, or several in one, cite that sentence.
    timeouts = {"1#chunk-0": "Set the proxy read timeout to 30 seconds in nginx.conf."}
    numbers = verify("Set the proxy read timeout to 90 seconds. Set the proxy read timeout "
                     "to 30 seconds in nginx.conf e.g. [1#chunk-0, 2#chunk-4]\n"
                     + "重" * 500, timeouts)
    assert [s.supported for s in numbers.sentences] == [False, True]
    assert numbers.sentences[1].cited == ("1#chunk-0", "2#chunk-4")
    assert numbers.skipped == 1  # a 500-character run is not judged (nor timed out on)


@pytest.mark.django_db
def test_an_answer_is_checked_against_its_call_scoped_audited_and_counted(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    served = evidence_ids(ready(lookup(agent, BAD_GATEWAY, tool_call_id="v-1",
                                       session_id="s-v")))
    answer = ("Nginx answers 502 Bad Gateway when the upstream refuses the connection. "
              "Restart php-fpm or the upstream application. "
              "Zebras have stripes to confuse biting flies in the savanna.")
    for ask in ({"tool_call_id": "v-1"}, {"session_id": "s-v"}):
        body = check(agent, answer=answer, **ask).json()
        assert [s["supported"] for s in body["sentences"]] == [True, True, False]
        assert set(body["sentences"][0]["evidence"]) <= set(served)
        assert body["unsupported"] == [answer.split(". ")[2]]
    # Another tenant's key: the call served it nothing, so nothing is supported.
    _, stranger = make_key("globex")
    theirs = check(client_for(stranger), answer=answer, tool_call_id="v-1").json()
    assert theirs["evidence_checked"] == 0 and len(theirs["unsupported"]) == 3
    rows = ToolInvocation.objects.filter(tool_name="verify_answer").order_by("id")
    assert [(r.outcome, r.returned_count) for r in rows] == [("ok", 3), ("ok", 3),
                                                             ("empty", 3)]
    # Counted when served evidence was read: the stranger's check counts for no config.
    checks = AnswerCheck.objects.order_by("id")
    assert [(c.sentences, c.unsupported) for c in checks] == [(3, 1), (3, 1)]
    # The quality loop: the unsupported rate beside the cited rate, per config version.
    _, admin = make_key("acme", role="admin")
    figures = client_for(admin).get("/api/audit/cited-rates").json()
    assert (figures["total"]["sentences_checked"], figures["total"]["unsupported"]) == (6, 2)
    assert figures["total"]["unsupported_rate"] == round(2 / 6, 4)
    for invalid in ({"answer": answer}, {"answer": answer, "tool_call_id": "a",
                                         "session_id": "b"}, {"tool_call_id": "v-1"}):
        assert check(agent, **invalid).status_code == 400


@pytest.mark.django_db
def test_the_chat_model_judges_the_sentences_the_words_leave_to_it(
        acme: Imported, make_key: MakeKey, settings: Any) -> None:
    """The model decides what the words cannot: a negation that shares every word, a
    paraphrase sharing few. A sentence missing a number of every chunk is never asked."""
    _, secret = make_key("acme")
    agent = client_for(secret)
    ready(lookup(agent, BAD_GATEWAY, tool_call_id="v-j"))
    answer = ("Nginx answers 502 Bad Gateway when the upstream refuses the connection. "
              "Never restart php-fpm or the upstream application. "
              "Nginx answers 502 when port 9999 refuses the upstream connection.")
    assert check(agent, answer=answer, tool_call_id="v-j", judge=True).status_code == 400
    asked: list[str] = []

    def judge(body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        assert body["messages"][0]["content"] == JUDGE_PROMPT
        asked.append(prompt)
        sentences = re.findall(r'<sentence n="(\d+)">(.*?)</sentence>', prompt)
        return json.dumps({"verdicts": [{"sentence": int(n), "supported": "Never" not in text}
                                        for n, text in sentences]})

    with chat_server() as server:
        server.reply = judge
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = server.url, "local-judge"
        words = check(agent, answer=answer, tool_call_id="v-j").json()
        assert [s["supported"] for s in words["sentences"]] == [True, True, False]
        assert words["judge"] is None and not asked
        body = check(agent, answer=answer, tool_call_id="v-j", judge=True).json()
        assert [(s["supported"], s["judged_by"]) for s in body["sentences"]] == [
            (True, "model"), (False, "model"), (False, "words")]
        assert body["judge"] == "openai/local-judge" and len(asked) == 1
        assert "9999" not in asked[0]  # no chunk holds the number: not the model's to say
        assert '<source id="' in asked[0] and "untrusted" in asked[0]
        row = ToolInvocation.objects.filter(tool_name="verify_answer").latest("id")
        assert row.details["retrievalDetails"]["verified"]["judged"] == 2
        # No verdict on any sentence asked: no judgement, a 503 as for a model that fails.
        for reply in ({"verdicts": []}, {"verdicts": [{"sentence": 7, "supported": True}]},
                      {"verdicts": [{"sentence": True, "supported": True}]}, {"ok": 1}):
            server.reply = lambda body, reply=reply: json.dumps(reply)
            silent = check(agent, answer=answer, tool_call_id="v-j", judge=True)
            assert silent.status_code == 503, reply
        server.behaviour = "500"
        failed = check(agent, answer=answer, tool_call_id="v-j", judge=True)
        assert failed.status_code == 503 and failed.json()["code"] == "unavailable"


@pytest.mark.pure
def test_the_judge_reads_each_sentence_beside_its_own_chunks() -> None:
    """Sentences whose candidates no longer fit the judge's budget keep the words' verdict:
    none is judged without its evidence."""
    served = {f"{n}#chunk-0": f"Service alpha{n} restarts with systemctl restart alpha{n}."
              for n in range(1, 16)}
    answer = " ".join(f"Restart alpha{n} with systemctl restart alpha{n}." for n in range(1, 16))
    done = verify(answer, served)
    assert all(len(s.candidates) == 1 for s in done.sentences)

    class Judge:
        name = "scripted"
        prompt = ""

        def complete(self, messages: Any, **_: Any) -> Any:
            Judge.prompt = messages[-1]["content"]
            n = Judge.prompt.count("<sentence ")
            return type("Reply", (), {"text": json.dumps({"verdicts": [
                {"sentence": i, "supported": False} for i in range(1, n + 1)]})})()

    verdict = judged(done, served, Judge())
    assert Judge.prompt.count("<source ") == 10 and Judge.prompt.count("<sentence ") == 10
    assert [s.judged_by for s in verdict.sentences] == ["model"] * 10 + ["words"] * 5
    assert [s.supported for s in verdict.sentences] == [False] * 10 + [True] * 5


@pytest.mark.django_db(transaction=True)  # call_tool closes its connections
def test_over_mcp(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    ready(lookup(client_for(secret), BAD_GATEWAY, tool_call_id="v-m"))
    result = call_tool("verify_answer", {"answer": "Restart php-fpm or the upstream "
                                                   "application.", "tool_call_id": "v-m"},
                       secret)
    assert not result.is_error and result.structured_content["unsupported"] == []
    assert ToolInvocation.objects.get(tool_name="verify_answer").channel == "mcp"


@pytest.mark.django_db(transaction=True)
def test_the_agent_loop_of_the_docs_searches_reads_and_verifies(
        acme: Imported, make_key: MakeKey, web: str) -> None:
    """docs/agents.md's loop, as written (its block under "Search, read, verify")."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "agents.md").read_text()
    code = docs[docs.index("## Search, read, verify"):].split("```python\n", 1)[1]
    code = code.split("```", 1)[0]
    _, secret = make_key("acme")
    for written, here in (('"http://127.0.0.1:8000"', repr(web)),
                          ('open("var/demo-tool-key.txt").read().strip()', repr(secret))):
        assert written in code
        code = code.replace(written, here)
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/agents.md", "exec"), scope)  # noqa: S102
    assert scope["check"]["unsupported"] == [] and scope["answer"] == scope["draft"]
    assert scope["cited"] and acme.stem_of(scope["cited"][0]) == "nginx"
    assert [r.tool_name for r in ToolInvocation.objects.order_by("id")] == [
        "lookup_knowledge", "fetch_evidence", "verify_answer"]
