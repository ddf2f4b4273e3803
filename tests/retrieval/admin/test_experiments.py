"""A/B tests of a config: started from a version's page, a share of the config's lookups (by
session) run with the candidate version; the audit records each call's arm and the test's page
shows both arms' figures from it; stopping or promoting ends it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import ToolInvocation
from retrieval.models import ConfigExperiment, RagConfig
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.conftest import Imported, MakeKey, client_for, lookup, ready

pytestmark = pytest.mark.django_db
QUESTION = "Kafka consumer lag"
SESSIONS = 40


def two_versions(acme: Imported) -> RagConfig:
    """Version 1 hands out one piece of evidence, version 2 (serving) up to five."""
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="a")
    return rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 5},
                             changed_by="b")


def start(client: Client, config: RagConfig, version: int, share: Any) -> Any:
    change = config.changes.get(version=version)
    return client.post(reverse("admin:retrieval_ragconfigchange_ab_test", args=[change.pk]),
                       {"share": share}, follow=True)


def test_a_share_of_sessions_runs_the_candidate_and_the_audit_tells_the_arms(
        admin_client: Client, acme: Imported, make_key: MakeKey) -> None:
    config = two_versions(acme)
    version_page = admin_client.get(reverse("admin:retrieval_ragconfigchange_change",
                                            args=[config.changes.get(version=1).pk]))
    assert 'id="ab-test"' in version_page.content.decode()

    page = start(admin_client, config, 1, 50).content.decode()

    experiment = ConfigExperiment.objects.get()
    assert experiment.running and experiment.share == 50 and experiment.started_by == "admin"
    assert "A/B test" in page and 'data-arm="candidate"' in page
    _, secret = make_key("acme")
    client = client_for(secret)
    for n in range(SESSIONS):
        for _ in range(2):  # one session, one arm
            ready(lookup(client, QUESTION, session_id=f"s{n}"))
    calls = ToolInvocation.objects.filter(tenant=acme.tenant)
    assert calls.filter(experiment_id=experiment.pk).count() == 2 * SESSIONS
    arms = {row.session_id: set() for row in calls}
    for row in calls:
        arms[row.session_id].add((row.experiment_arm, row.config_version))
        assert row.details["retrievalDetails"]["experiment"] == {
            "id": experiment.pk, "arm": row.experiment_arm}
    assert all(len(seen) == 1 for seen in arms.values())
    by_arm = {arm: [s for s, seen in arms.items() if (arm, v) in seen]
              for arm, v in (("candidate", 1), ("control", 2))}
    assert len(by_arm["candidate"]) + len(by_arm["control"]) == SESSIONS
    assert 10 <= len(by_arm["candidate"]) <= 30  # about half, stably by session
    assert {r.returned_count for r in calls.filter(experiment_arm="candidate")} == {1}
    assert max(r.returned_count for r in calls.filter(experiment_arm="control")) > 1

    page = admin_client.get(reverse("admin:retrieval_configexperiment_change",
                                    args=[experiment.pk])).content.decode()
    for arm in ("candidate", "control"):
        row = page.split(f'data-arm="{arm}"', 1)[1].split("</tr>", 1)[0]
        assert f'<td class="arm-calls">{2 * len(by_arm[arm])}</td>' in row
    assert "v1" in page.split('data-arm="candidate"', 1)[1].split("</tr>", 1)[0]
    config_page = admin_client.get(reverse("admin:retrieval_ragconfig_change",
                                           args=[config.pk])).content.decode()
    assert 'id="running-ab-test"' in config_page


def test_promoting_the_candidate_makes_it_the_configs_version_and_ends_the_test(
        admin_client: Client, acme: Imported, make_key: MakeKey) -> None:
    config = two_versions(acme)
    start(admin_client, config, 1, 30)
    experiment = ConfigExperiment.objects.get()

    response = admin_client.post(reverse("admin:retrieval_configexperiment_stop",
                                         args=[experiment.pk]), {"promote": "1"}, follow=True)

    assert "is at version 3, equal to version 1" in response.content.decode()
    config.refresh_from_db()
    experiment.refresh_from_db()
    assert (config.version, config.return_n, config.experiment) == (3, 1, None)
    assert config.changes.get(version=3).note == (f"promoted from A/B test {experiment.pk} "
                                                  "(version 1)")
    assert not experiment.running and experiment.outcome.startswith("promoted")
    _, secret = make_key("acme")
    ready(lookup(client_for(secret), QUESTION, session_id="after"))
    assert ToolInvocation.objects.get(session_id="after").experiment_id is None
    again = admin_client.post(reverse("admin:retrieval_configexperiment_stop",
                                      args=[experiment.pk]), {"stop": "1"}, follow=True)
    assert "has ended already" in again.content.decode()


def test_a_test_is_refused_when_it_could_not_run_as_asked(admin_client: Client,
                                                          acme: Imported) -> None:
    config = two_versions(acme)
    assert "version 2 is the one serving" in start(admin_client, config, 2, 10).content.decode()
    for share in (0, 100, "ten"):
        assert "between 1 and 99" in start(admin_client, config, 1, share).content.decode()
    start(admin_client, config, 1, 10)
    assert "stop it first" in start(admin_client, config, 1, 20).content.decode()
    assert ConfigExperiment.objects.count() == 1


def test_hit_tests_are_not_routed(admin_client: Client, acme: Imported) -> None:
    config = two_versions(acme)
    start(admin_client, config, 1, 99)
    for n in range(5):
        page = admin_client.post(reverse("admin:retrieval_ragconfig_hit_test"), {
            "tenant": acme.tenant.pk, "question": f"{QUESTION} {n}"}).content.decode()
        assert "<th>config version</th><td>2</td>" in page
