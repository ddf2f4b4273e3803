"""The cited rates (audit/cited.py) over real calls of the tools: every READY evidence item a
call served is recorded with its rank, config version and A/B arm; what the evidence guard or
the call's own answer confirmed counts as cited, once; the figures equal a hand count, and an
A/B test whose candidate serves less shows it as significant only once there is enough data."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.cited import MIN_SAMPLE
from audit.models import ServedEvidence, ToolInvocation
from retrieval.models import ConfigExperiment
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.conftest import Imported, MakeKey, client_for, evidence_ids, lookup, ready

pytestmark = pytest.mark.django_db
GUARD = "/api/tools/evidence_guard"
BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"
KAFKA_LAG = "kafka consumer group lag keeps growing"
ZEBRA = "why do zebras have black and white stripes"
# The scripted agent's known answers: a question's relevant evidence is its document's.
QUESTIONS = {BAD_GATEWAY: "nginx", KAFKA_LAG: "kafka", ZEBRA: "zebra"}
MARKER = "qzv-marker-5517"


def guard(client: Any, **body: Any) -> list[str]:
    response = client.post(GUARD, body, format="json")
    assert response.status_code == 200, response.content
    confirmed: list[str] = response.json()["ready"]
    return confirmed


def rates(client: Any, **params: Any) -> dict[str, Any]:
    response = client.get("/api/audit/cited-rates", params)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_the_cited_rates_equal_a_hand_count(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    _, admin = make_key("acme", role="admin")
    agent = client_for(secret)
    served: list[list[str]] = []  # each READY call's evidence, in its order
    cited: set[tuple[int, str]] = set()  # (call number, evidence key)

    served.append(evidence_ids(ready(lookup(agent, BAD_GATEWAY, tool_call_id="c1"))))
    first = served[0][0]
    # A made-up id and one never served are not cited; asking twice counts once.
    assert guard(agent, tool_call_id="c1", document_ids=[first, "1#chunk-99"]) == [first]
    assert guard(agent, tool_call_id="c1", document_ids=[first]) == [first]
    cited.add((0, first))

    # Two calls of a session served the same kafka evidence: the latest call gets the citation.
    served.append(evidence_ids(ready(lookup(agent, KAFKA_LAG, session_id="s1"))))
    served.append(evidence_ids(ready(lookup(agent, KAFKA_LAG + " again", session_id="s1"))))
    both = [key for key in served[2] if key in served[1]]
    assert both
    assert guard(agent, session_id="s1", document_ids=both[:1]) == both[:1]
    cited.add((2, both[0]))

    # An EMPTY lookup serves nothing; the answer's own confirmed citations are cited.
    assert lookup(agent, "quantum chromodynamics lattice gauge").json()["evidence_status"] \
        == "EMPTY"
    answer = agent.post("/api/rag/answer", {"query": BAD_GATEWAY, "tool_call_id": "a1"},
                        format="json").json()
    assert answer["answer_status"] == "ANSWERED" and answer["citations"]
    served.append([e["document_id"] for e in answer["evidence"]])
    cited |= {(3, key) for key in answer["citations"]}

    # Another tenant's key confirms nothing of acme's calls, and cites nothing.
    _, stranger = make_key("globex")
    assert guard(client_for(stranger), tool_call_id="c1", document_ids=served[0]) == []

    figures = rates(client_for(admin))
    total_served = sum(len(keys) for keys in served)
    assert figures["total"]["served"] == total_served
    assert figures["total"]["cited"] == len(cited) == 2 + len(answer["citations"])
    assert figures["total"]["cited_rate"] == round(len(cited) / total_served, 4)
    by_rank = {row["rank"]: row for row in figures["by_rank"]}
    hand = Counter(keys.index(key) + 1 for n, key in cited for keys in [served[n]])
    for rank in range(1, max(len(keys) for keys in served) + 1):
        assert by_rank[rank]["served"] == sum(len(keys) >= rank for keys in served)
        assert by_rank[rank]["cited"] == hand[rank]
    assert [row["config_version"] for row in figures["by_config_version"]] == [None]
    checks = {"sentences_checked": 0, "unsupported": 0, "unsupported_rate": None}
    assert {key: figures["total"].pop(key) for key in checks} == checks  # no answer checked
    assert figures["by_dataset"] == [{"dataset_id": acme.dataset.pk, **figures["total"]}]
    docs = {key.split("#", 1)[0] for keys in served for key in keys}
    never = {row["document_id"] for row in figures["documents_never_cited"]}
    most = {row["document_id"] for row in figures["documents_cited_most"]}
    cited_docs = {key.split("#", 1)[0] for _, key in cited}
    assert most == cited_docs and never == docs - cited_docs

    # The document page shows its own figures (the panel the audit registers).
    nginx = acme.documents["nginx"]
    page = _superuser_page(reverse("admin:datasets_document_change", args=[nginx.pk]))
    mine = [(n, key) for n, keys in enumerate(served) for key in keys
            if key.startswith(f"{nginx.doc_key}#")]
    assert f'<b class="cited-served">{len(mine)}</b>' in page
    assert f'<b class="cited-cited">{len(set(mine) & cited)}</b>' in page

    glance = _superuser_page(reverse("admin:audit_datasets_glance"), "root-glance")
    row = glance.split(f'data-dataset="{acme.dataset.pk}"', 1)[1].split("</tr>", 1)[0]
    share = round(100 * len(cited) / total_served)
    assert f'<td class="glance-cited">{share} % of {total_served}</td>' in row

    # A tool key reads no figures; a filter on another tenant's dataset is refused.
    assert agent.get("/api/audit/cited-rates").status_code == 403
    other = client_for(admin).get("/api/audit/cited-rates", {"dataset_id": 10**9})
    assert other.status_code == 400 and other.json()["code"] == "unknown_dataset"


def _superuser_page(url: str, name: str = "root-cited") -> str:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser(name, f"{name}@example.com", "pw-x")
    client = Client()
    client.force_login(user)
    return client.get(url).content.decode()


def test_the_rates_per_config_version_tell_two_configs_of_one_version_apart(
        acme: Imported, acme_edge: Imported, make_key: MakeKey) -> None:
    """Issue 36 item 15: the ops dataset's own config and the tenant default are both at
    version 1; their calls are two rows, each naming its config, not one "version 1"."""
    default = rag_config_update(config=None, tenant=acme.tenant, values={},
                                changed_by="setup")
    own = rag_config_update(config=None, tenant=acme.tenant, dataset=acme.dataset,
                            values={"return_n": 3}, changed_by="setup")
    assert default.version == own.version == 1
    _, secret = make_key("acme")
    _, admin = make_key("acme", role="admin")
    agent = client_for(secret)
    on_ops = evidence_ids(ready(lookup(agent, BAD_GATEWAY, dataset_ids=[acme.dataset.pk])))
    on_edge = evidence_ids(ready(lookup(agent, BAD_GATEWAY,
                                        dataset_ids=[acme_edge.dataset.pk])))
    # A row from before config ids were recorded: its version names no config.
    before = ServedEvidence.objects.first()
    assert before is not None
    ServedEvidence.objects.filter(pk=before.pk).update(config_id=None)

    rows = {(r["config_id"], r["config_version"]): r
            for r in rates(client_for(admin))["by_config_version"]}

    assert rows[(own.pk, 1)]["served"] + rows[(default.pk, 1)]["served"] + \
        rows[(None, 1)]["served"] == len(on_ops) + len(on_edge)
    assert rows[(None, 1)] == {"config_id": None, "config_version": 1, "config_known": False,
                               "served": 1, "cited": 0, "cited_rate": 0.0, "helpful": 0,
                               "not_helpful": 0, "sentences_checked": 0, "unsupported": 0,
                               "unsupported_rate": None}
    assert rows[(own.pk, 1)]["config_known"] and rows[(default.pk, 1)]["config_known"]
    assert {rows[(own.pk, 1)]["served"], rows[(default.pk, 1)]["served"]} == {
        len(on_ops) - (before.dataset_id == acme.dataset.pk),
        len(on_edge) - (before.dataset_id == acme_edge.dataset.pk)}
    served_by = dict(ServedEvidence.objects.exclude(config_id=None)
                     .values_list("dataset_id", "config_id").distinct())
    assert served_by == {acme.dataset.pk: own.pk, acme_edge.dataset.pk: default.pk}
    assert ToolInvocation.objects.filter(config_id=own.pk).count() == 1


def test_no_query_text_is_kept_by_the_recording(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    body = ready(lookup(agent, f"{BAD_GATEWAY} {MARKER}", tool_call_id="m1"))
    guard(agent, tool_call_id="m1", document_ids=evidence_ids(body))
    assert agent.post("/api/tools/rate_evidence", {
        "tool_call_id": "m1", "document_ids": evidence_ids(body)[:1], "rating": "helpful"},
        format="json").status_code == 200
    rows = list(ServedEvidence.objects.values())
    assert rows and all(MARKER not in str(value) for row in rows for value in row.values())
    rated = ToolInvocation.objects.get(tool_name="rate_evidence")
    assert MARKER not in str(rated.details) and not rated.query_text


def test_an_ab_test_whose_candidate_serves_less_is_told_apart_only_with_enough_calls(
        admin_client: Client, acme: Imported, make_key: MakeKey) -> None:
    """Version 1 (the candidate) hands out one item, version 2 (serving) up to five; a scripted
    agent cites, of what each call served, the evidence of the question's own document."""
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="a")
    config = rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 5},
                               changed_by="b")
    admin_client.post(reverse("admin:retrieval_ragconfigchange_ab_test",
                              args=[config.changes.get(version=1).pk]), {"share": 50})
    experiment = ConfigExperiment.objects.get()
    _, secret = make_key("acme")
    _, admin = make_key("acme", role="admin")
    agent = client_for(secret)
    questions = list(QUESTIONS)
    hand: dict[str, list[int]] = {"control": [], "candidate": []}  # cited per call

    def ask(n: int) -> None:
        query = questions[n % len(questions)]
        call = f"ab-{n}"
        keys = evidence_ids(ready(lookup(agent, query, tool_call_id=call)))
        relevant = [k for k in keys if acme.stem_of(k) == QUESTIONS[query]]
        if relevant:
            assert guard(agent, tool_call_id=call, document_ids=relevant) == relevant
        arm = ToolInvocation.objects.get(tool_call_id=call).experiment_arm
        hand[arm].append(len(relevant))

    def figures() -> dict[str, Any]:
        response = client_for(admin).get(f"/api/rag/experiments/{experiment.pk}/cited-rates")
        assert response.status_code == 200, response.content
        body: dict[str, Any] = response.json()
        return body

    for n in range(12):
        ask(n)
    early = figures()
    assert early["cited_per_call"]["verdict"] == "not enough data yet"
    assert early["cited_rate"]["verdict"] == "not enough data yet"
    assert not early["cited_per_call"]["significant"]

    for n in range(12, 12 + 20 * MIN_SAMPLE):  # each call's arm is drawn: bounded all the same
        if min(len(hand["control"]), len(hand["candidate"])) >= MIN_SAMPLE:
            break
        ask(n)
    assert min(len(hand["control"]), len(hand["candidate"])) >= MIN_SAMPLE
    late = figures()
    arms = {arm["arm"]: arm for arm in late["arms"]}
    for arm, counts in hand.items():  # the figures are the scripted agent's own count
        assert arms[arm]["calls"] == len(counts)
        assert arms[arm]["cited"] == sum(counts)
    assert max(hand["candidate"]) == 1 and max(hand["control"]) >= 2
    assert late["cited_per_call"]["significant"], late
    assert late["cited_per_call"]["difference"] < 0
    assert late["cited_per_call"]["verdict"].startswith("candidate significantly lower")

    page = admin_client.get(reverse("admin:retrieval_configexperiment_change",
                                    args=[experiment.pk])).content.decode()
    assert 'class="cited-per-call-verdict">candidate significantly lower' in page
    row = page.split('class="cited-arm" data-arm="candidate"', 1)[1].split("</tr>", 1)[0]
    assert f'<td class="cited-calls">{len(hand["candidate"])}</td>' in row

    # Another tenant's admin key does not see the test at all.
    _, stranger = make_key("globex", role="admin")
    assert client_for(stranger).get(
        f"/api/rag/experiments/{experiment.pk}/cited-rates").status_code == 404


def test_an_agentic_runs_evidence_and_confirmed_citations_are_recorded(
        acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    agent = client_for(secret)
    body = agent.post("/api/rag/agentic", {
        "query": f"{BAD_GATEWAY}? {KAFKA_LAG}?", "tool_call_id": "g1", "session_id": "gs"},
        format="json").json()
    assert body["answer_status"] == "ANSWERED" and body["citations"]
    rows = list(ServedEvidence.objects.filter(tool_call_id="g1").order_by("rank")
                .values_list("evidence_key", "cited"))
    # What the run handed out, in its order; cited: what its answer cited.
    assert [key for key, _ in rows] == [item["document_id"] for item in body["evidence"]]
    assert {key for key, cited in rows if cited} == set(body["citations"])
    # The agent confirms the rest through the session: counted, once.
    rest = [key for key, cited in rows if not cited]
    assert guard(agent, session_id="gs", document_ids=rest) == rest
    assert ServedEvidence.objects.filter(tool_call_id="g1", cited=False).count() == 0
