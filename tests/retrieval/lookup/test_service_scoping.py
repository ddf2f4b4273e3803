"""Who sees what: the tenant comes from the key, and `dataset_ids` can only narrow its scope."""

from __future__ import annotations

import pytest

from audit.models import Outcome, ToolInvocation
from datasets.models import Dataset
from tests.conftest import BOTH_RUNTIMES
from tests.retrieval.conftest import (
    Imported,
    MakeKey,
    client_for,
    evidence_ids,
    lookup,
    ready,
)

BAD_GATEWAY = "nginx 502 bad gateway upstream connection refused"
COOLANT = "the coolant pump vibrates, is the bearing worn?"


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_tenant_a_key_never_sees_tenant_b_chunks(runtime: str, acme: Imported,
                                                 globex: Imported, make_key: MakeKey) -> None:
    _, a_secret = make_key("acme")
    _, b_secret = make_key("globex")
    a, b = client_for(a_secret), client_for(b_secret)

    # Both tenants have a 502 runbook: each key gets its own tenant's, never the other's.
    a_ids = evidence_ids(ready(lookup(a, BAD_GATEWAY)))
    b_ids = evidence_ids(ready(lookup(b, BAD_GATEWAY)))
    assert {acme.stem_of(e) for e in a_ids} == {"nginx"}
    assert {globex.stem_of(e) for e in b_ids} == {"nginx-globex"}

    # A topic only tenant B knows about is nothing at all to tenant A.
    assert {globex.stem_of(e) for e in evidence_ids(ready(lookup(b, COOLANT)))} == {"coolant"}
    answer = lookup(a, COOLANT)
    assert answer.status_code == 200
    assert answer.json()["evidence_status"] == "EMPTY" and answer.json()["evidence"] == []

    # Naming tenant B's dataset does not help tenant A: to A it does not exist.
    stolen = lookup(a, COOLANT, dataset_ids=[globex.dataset.pk])
    assert stolen.status_code == 400
    assert stolen.json()["code"] == "unknown_dataset"
    assert b"pump" not in stolen.content


@pytest.mark.django_db
def test_dataset_ids_narrow_the_search_to_those_datasets(
        acme: Imported, acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)

    def datasets_of(response_ids: list[str]) -> set[str]:
        return {"ops" if acme.stem_of(e) else "edge" if acme_edge.stem_of(e) else "?"
                for e in response_ids}

    assert datasets_of(evidence_ids(ready(lookup(client, BAD_GATEWAY)))) == {"ops", "edge"}
    only_ops = ready(lookup(client, BAD_GATEWAY, dataset_ids=[acme.dataset.pk]))
    assert datasets_of(evidence_ids(only_ops)) == {"ops"}
    only_edge = ready(lookup(client, BAD_GATEWAY, dataset_ids=[acme_edge.dataset.pk]))
    assert datasets_of(evidence_ids(only_edge)) == {"edge"}


@pytest.mark.django_db
def test_a_scoped_key_cannot_widen_its_scope(acme: Imported, acme_edge: Imported,
                                            globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme", datasets=(acme_edge.dataset,))
    client = client_for(secret)

    # Without dataset_ids the key searches its own scope only.
    assert {acme_edge.stem_of(e) for e in evidence_ids(ready(lookup(client, BAD_GATEWAY)))} \
        == {"edge-502"}

    refused = {
        "same tenant, out of the key's scope": [acme.dataset.pk],
        "in scope plus out of scope": [acme_edge.dataset.pk, acme.dataset.pk],
        "another tenant's dataset": [globex.dataset.pk],
    }
    for why, ids in refused.items():
        # Exactly the answer for an id that does not exist: nothing tells the key it does.
        response = lookup(client, BAD_GATEWAY, dataset_ids=ids)
        assert response.status_code == 400, (why, response.content)
        assert response.json()["code"] == "unknown_dataset", why
        assert b"Bad Gateway" not in response.content, why
    assert ToolInvocation.objects.filter(outcome=Outcome.INVALID).count() == len(refused)

    assert ready(lookup(client, BAD_GATEWAY, dataset_ids=[acme_edge.dataset.pk]))


@pytest.mark.django_db
def test_unknown_or_malformed_dataset_ids_are_a_400(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    missing = (Dataset.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1000

    for ids in ([missing], [acme.dataset.pk, missing]):
        response = lookup(client, BAD_GATEWAY, dataset_ids=ids)
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "unknown_dataset"
        assert str(missing) in response.json()["message"]
    malformed: list[object] = [[0], ["ops"], "ops", [-1]]
    for value in malformed:
        response = lookup(client, BAD_GATEWAY, dataset_ids=value)
        assert response.status_code == 400, (value, response.content)
        assert "dataset_ids" in response.json()["extra"]["fields"]


@pytest.mark.django_db
def test_a_deactivated_dataset_is_neither_searched_nor_selectable(
        acme: Imported, acme_edge: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    Dataset.objects.filter(pk=acme_edge.dataset.pk).update(activated=False)

    ids = evidence_ids(ready(lookup(client, BAD_GATEWAY)))
    assert {acme.stem_of(e) for e in ids} == {"nginx"}
    assert lookup(client, BAD_GATEWAY, dataset_ids=[acme_edge.dataset.pk]).status_code == 400

    # A key whose only dataset is off reads nothing: an EMPTY answer, not an error.
    _, scoped = make_key("acme", datasets=(acme_edge.dataset,))
    answer = lookup(client_for(scoped), BAD_GATEWAY)
    assert answer.status_code == 200
    assert answer.json()["evidence_status"] == "EMPTY" and answer.json()["evidence"] == []


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_an_empty_answer_names_what_the_key_searched_and_what_it_covers(
        runtime: str, acme: Imported, globex: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    client = client_for(secret)
    empty = lookup(client, COOLANT).json()
    assert empty["evidence_status"] == "EMPTY"
    assert empty["searched_datasets"] == [{"id": acme.dataset.pk, "name": acme.dataset.name}]
    # acme's own domains only, never globex's ("plant").
    assert 0 < len(empty["covered_topics"]) and set(empty["covered_topics"]) <= {
        "zoology", "photography", "web", "messaging"}
    found = ready(lookup(client, BAD_GATEWAY))
    assert (found["searched_datasets"], found["covered_topics"]) == ([], [])
