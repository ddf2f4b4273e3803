"""Per-tenant calibration of the relevance gate (evaluation/calibration.py, `calibrate_gate`): the
thresholds refitted by real lookups of the tenant's gate questions over the acme runbooks, and
proposed as a change the regression gate checks before it serves."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import ToolInvocation
from audit.selectors import confirmed_questions
from datasets.models import Job
from evaluation.calibration import (
    MIN_OFF_TOPIC,
    CalibrationError,
    Score,
    _meets,
    _within_the_gate,
    calibrate,
    calibration_hold,
    calibration_start,
)
from evaluation.gate import gate_sets
from evaluation.models import GateCheck, GateRule, QuestionSet
from retrieval.models import RagConfig, RagConfigDraft
from retrieval.ragconfig.drafts import rag_config_propose
from retrieval.ragconfig.selectors import rag_config_for
from retrieval.ragconfig.services import rag_config_update
from tests.conftest import wait_until
from tests.evaluation.test_gate import staff
from tests.retrieval.conftest import Imported, MakeKey, client_for, evidence_ids, lookup, ready

pytestmark = pytest.mark.django_db
RATE = "/api/tools/rate_evidence"


def _on(query: str, runbook: str) -> dict[str, Any]:
    return {"id": query.replace(" ", "-")[:40], "query": query, "expected": [runbook]}


def _off(query: str) -> dict[str, Any]:
    return {"id": query.replace(" ", "-")[:40], "query": query, "expected": []}


ON_TOPIC = [
    _on("nginx returns 502 bad gateway", "nginx.md"),
    _on("upstream connection refused behind the reverse proxy", "nginx.md"),
    _on("php-fpm down and the web server shows an error page", "nginx.md"),
    _on("proxy_pass points at the wrong port", "nginx.md"),
    _on("kafka consumer group is falling behind", "kafka.md"),
    _on("how many consumers per partition", "kafka.md"),
    _on("alert when consumer lag grows", "kafka.md"),
    _on("kafka-consumer-groups describe a group", "kafka.md"),
    _on("why do zebras have black and white stripes", "zebra.md"),
    _on("striped animals and biting flies", "zebra.md"),
    _on("exposure for wildlife photos at sunrise", "photo.md"),
    _on("metering a telephoto shot of white fur at dawn", "photo.md"),
]
OFF_TOPIC = [_off(q) for q in (
    "quarterly sales tax filing deadline", "best sourdough starter hydration",
    "how to knit a scarf for beginners", "renew a passport abroad",
    "chess opening for the black pieces", "tune a guitar to drop D")]


def gate_set(imported: Imported, questions: list[dict[str, Any]]) -> QuestionSet:
    return QuestionSet.objects.create(tenant=imported.tenant, name="ops", gate=True,
                                      questions=questions)


def default_config(imported: Imported, **values: Any) -> RagConfig:
    return rag_config_update(config=None, tenant=imported.tenant, values=values,
                             changed_by="setup")


def rules(config: RagConfig) -> list[GateRule]:
    return [GateRule.of(s) for s in gate_sets(tenant_id=config.tenant_id,
                                              dataset_id=config.dataset_id)]


def command(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("calibrate_gate", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def test_thresholds_that_answer_off_topic_questions_are_raised_by_the_tenants_questions(
        acme: Imported) -> None:
    # Serving: a reference threshold so low that every off-topic question gets a runbook.
    config = default_config(acme, reference_threshold=0.0, precise_threshold=0.6)
    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    done: list[int] = []
    calibration = calibrate(config=config, rules=rules(config),
                            progress=lambda n, total: done.append(total))
    assert calibration.gate == "DISTANCE"
    assert calibration.fields == ("reference_threshold", "precise_threshold")
    assert (calibration.on_topic, calibration.off_topic) == (len(ON_TOPIC), len(OFF_TOPIC))
    serving, chosen = calibration.serving, calibration.chosen
    assert (serving.reference, serving.precise) == (0.0, 0.6)
    assert serving.off_topic_empty == 0  # the floor answers everything
    assert calibration.changed and chosen.reference > 0
    assert chosen.correct >= serving.correct + 2 and chosen.off_topic_empty > 0
    assert chosen.right_first >= serving.right_first  # the gate's tolerances: no loss
    assert set(done) == {len(ON_TOPIC + OFF_TOPIC) * 27}  # 1 + 13 + 13 passes at most
    assert chosen in calibration.tried and serving in calibration.tried
    assert calibration.summary().startswith("calibrated: reference_threshold 0 → ")
    assert len(calibration.summary()) <= 200  # a held change's note


def test_the_held_calibration_passes_the_gate_and_then_serves(acme: Imported,
                                                                applied: Any) -> None:
    default_config(acme, reference_threshold=0.0, precise_threshold=0.6)
    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    with applied():
        code, out = command("--tenant", "acme", "--hold")
    assert code == 0, out
    draft = RagConfigDraft.objects.get()
    assert f"held as change {draft.pk} of acme/default" in out
    assert draft.proposed_by == "calibrate_gate" and draft.note.startswith("calibrated: ")
    assert draft.status == RagConfigDraft.Status.APPLIED, draft.verdict  # the gate passed it
    assert GateCheck.objects.get(draft=draft).passed
    serving = rag_config_for(tenant_id=acme.tenant.pk, dataset_ids=()).settings
    assert serving.reference_threshold == draft.settings["reference_threshold"] > 0
    # Calibrated again, nothing better is found: nothing is proposed.
    code, out = command("--tenant", "acme", "--hold", "--json")
    report = json.loads(out)
    assert code == 0 and report["changed"] is False and report["held"] is None
    assert report["serving"]["reference"] == serving.reference_threshold
    assert RagConfigDraft.objects.count() == 1


def test_too_few_questions_of_either_kind_calibrate_nothing(acme: Imported) -> None:
    assert command("--tenant", "acme")[0] == 2  # no config yet
    config = default_config(acme)
    code, out = command("--tenant", "acme", "--hold")
    assert code == 2 and "no gate question set covers acme/default" in out
    gate_set(acme, ON_TOPIC + OFF_TOPIC[:MIN_OFF_TOPIC - 1])
    with pytest.raises(CalibrationError, match="at least 10 on-topic and 5 off-topic"):
        calibrate(config=config, rules=rules(config))
    code, out = command("--tenant", "acme", "--hold")
    assert code == 2 and "there are 12 and 4" in out
    assert not RagConfigDraft.objects.exists()
    assert command("--tenant", "acme", "--precision", "0")[0] == 2


def test_questions_whose_evidence_agents_confirmed_count_where_the_tenant_keeps_them(
        acme: Imported, make_key: MakeKey) -> None:
    config = default_config(acme)
    gate_set(acme, ON_TOPIC[:7] + OFF_TOPIC)
    _, secret = make_key("acme")
    agent = client_for(secret)

    def asked(query: str, call: str, *ratings: str) -> str:
        """The question asked, its first pieces rated in turn; the first piece's id."""
        served = evidence_ids(ready(lookup(agent, query, tool_call_id=call)))
        for piece, rating in zip(served, ratings, strict=False):
            answer = agent.post(RATE, {"tool_call_id": call, "document_ids": [piece],
                                       "rating": rating}, format="json")
            assert answer.status_code == 200, answer.content
        return served[0]

    asked("nginx 502 after a deploy", "c0", "helpful")  # not kept: the tenant keeps none
    assert confirmed_questions(tenant=acme.tenant, config_id=config.pk) == []
    acme.tenant.store_raw_queries, acme.tenant.raw_query_retention_days = True, 2
    acme.tenant.save(update_fields=["store_raw_queries", "raw_query_retention_days"])
    first = asked("nginx 502 after a deploy", "c1", "helpful")
    asked("nginx 502 after a deploy", "c2", "helpful")  # the same question again: once
    asked("kafka lag keeps growing", "c3", "helpful")
    asked("zebra stripes and flies", "c4", "helpful")
    # One piece helpful, another not: the call's answer was not right, no question.
    asked("php-fpm restarted, still 502", "c5", "helpful", "not_helpful")
    asked("photos of zebras at dawn", "c6", "helpful")  # past its retention below
    ToolInvocation.objects.filter(tool_call_id="c6").update(
        created_at=timezone.now() - timedelta(days=3))
    confirmed = confirmed_questions(tenant=acme.tenant, config_id=config.pk)
    assert [c.query for c in confirmed] == ["zebra stripes and flies",
                                            "kafka lag keeps growing",
                                            "nginx 502 after a deploy"]
    assert confirmed[-1].documents == (int(first.split("#")[0]),)
    assert confirmed[-1].dataset_ids == (acme.dataset.pk,)
    assert confirmed_questions(tenant=acme.tenant, config_id=config.pk, limit=1) == \
        confirmed[:1]

    with pytest.raises(CalibrationError, match="there are 7 and 6"):  # the sets alone
        calibrate(config=config, rules=rules(config))
    calibration = calibrate(config=config, rules=rules(config), confirmed=confirmed)
    assert (calibration.on_topic, calibration.confirmed) == (10, 3)
    assert calibration.serving.right_first >= 9  # the confirmed documents come first
    code, out = command("--tenant", "acme", "--json")
    report = json.loads(out)
    assert code == 0 and report["questions"] == {"on_topic": 10, "off_topic": 6,
                                                 "confirmed": 3}
    assert command("--tenant", "acme", "--gate-sets-only")[0] == 2


def test_staff_calibrate_their_tenants_config_from_the_admin_as_a_job(
        acme: Imported, globex: Imported, applied: Any, client: Client) -> None:
    config = default_config(acme, reference_threshold=0.0, precise_threshold=0.6)
    other = default_config(globex)
    url = reverse("admin:retrieval_ragconfigdraft_calibrate")
    held = reverse("admin:retrieval_ragconfigdraft_changelist")
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=("retrieval", "evaluation"), codename__startswith="view_"))
    acme.tenant.staff.add(viewer)
    client.force_login(viewer)  # may read the held changes, not change configs
    assert 'id="calibrate-link"' not in client.get(held).content.decode()
    assert client.get(url).status_code == 403
    assert client.post(url, {"config": config.pk, "precision": "0.9"}).status_code == 403

    operator = staff(client, acme)
    operator.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert 'id="calibrate-link"' in client.get(held).content.decode()
    form = client.get(url).content.decode()
    assert f'<option value="{config.pk}">acme/default v1</option>' in form
    assert f'value="{other.pk}"' not in form  # another tenant's config is not offered
    refused = client.post(url, {"config": other.pk, "precision": "0.9"}).content.decode()
    assert "Select a valid choice" in refused
    unguarded = client.post(url, {"config": config.pk, "precision": "0.9"}).content.decode()
    assert "no gate question set covers acme/default" in unguarded
    assert not Job.objects.filter(kind=Job.Kind.CALIBRATE).exists()

    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    with applied():
        response = client.post(url, {"config": config.pk, "precision": "0.9",
                                     "gate_sets_only": "on"})
    job = Job.objects.get(kind=Job.Kind.CALIBRATE)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:datasets_job_change", args=[job.pk])
    assert (job.status, job.tenant_id, job.done) == ("succeeded", acme.tenant.pk, job.total)
    draft = RagConfigDraft.objects.get()
    assert job.detail["draft"] == draft.pk and job.detail["gate_sets_only"] is True
    assert draft.proposed_by == "operator" and draft.status == RagConfigDraft.Status.APPLIED
    log = " ".join(line["message"] for line in job.log)
    assert "12 on-topic (0 from confirmed evidence) and 6 off-topic questions" in log
    assert f"held as change {draft.pk}: the regression gate checks it" in log
    page = client.get(response["Location"]).content.decode()
    assert "calibrated: reference_threshold 0 → " in page


def test_a_pair_the_gate_would_hold_is_never_within_it() -> None:
    rule = GateRule(tolerances={**QuestionSet().tolerances(), "first": 0.1})

    def score(first: float, off_topic_empty: float) -> Score:
        return Score(reference=0.3, precise=0.6, right_first=0, off_topic_empty=0,
                     on_topic_empty=0, precise_answers=0, precise_right=0,
                     sets=({"first": first, "mrr@10": 0.9, "ndcg@10": 0.9,
                            "off_topic_empty": off_topic_empty},))

    serving = score(0.9, 0.5)
    assert _within_the_gate(score(0.9, 1.0), serving, [rule])
    assert _within_the_gate(score(0.8, 0.5), serving, [rule])  # first: within its 0.1
    assert not _within_the_gate(score(0.7, 1.0), serving, [rule])  # more EMPTY buys nothing
    assert not _within_the_gate(score(0.9, 0.4), serving, [rule])  # off-topic: 0.05
    # No PRECISE answer at all is not a precision met: a pair cannot win by switching it off.
    assert not _meets(replace(serving, precise_answers=0), 0.9)
    assert _meets(replace(serving, precise_answers=10, precise_right=9), 0.9)


def test_one_calibration_at_a_time_and_none_proposed_over_a_moved_or_held_config(
        acme: Imported) -> None:
    config = default_config(acme, reference_threshold=0.0, precise_threshold=0.6)
    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    job = calibration_start(config=config, precision=0.9, gate_sets_only=True, by="ops")
    assert job.detail["version"] == 1 and job.status == Job.Status.QUEUED
    with pytest.raises(CalibrationError, match=rf"queued or running already \(job {job.pk}\)"):
        calibration_start(config=config, precision=0.9, gate_sets_only=False, by="ops")

    calibration = calibrate(config=config, rules=rules(config))
    assert calibration.changed and calibration.version == 1
    config = rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 4},
                               changed_by="editor")  # the gate held nothing: no gate job runs
    with pytest.raises(CalibrationError, match="moved from version 1 to 2 while it was"):
        calibration_hold(config=config, calibration=calibration, by="ops")
    held = rag_config_propose(config=config, tenant=acme.tenant, values={"return_n": 3},
                              changed_by="editor").draft  # its gate has not run yet
    assert held is not None
    with pytest.raises(CalibrationError, match=f"held already \\(held change {held.pk}\\)"):
        calibration_hold(config=config, calibration=replace(calibration, version=2), by="ops")
    assert list(RagConfigDraft.objects.all()) == [held]


@pytest.mark.integration  # the real worker runs the calibration, then the gate
@pytest.mark.django_db(transaction=True)
def test_the_calibration_runs_on_the_worker_and_its_change_through_the_gate(
        celery_worker: Any, acme: Imported) -> None:
    config = default_config(acme, reference_threshold=0.0, precise_threshold=0.6)
    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    job = calibration_start(config=config, precision=0.9, gate_sets_only=True, by="ops")
    wait_until(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed"),
               timeout=300, what="the calibration's job")
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.log
    draft = RagConfigDraft.objects.get(pk=job.detail["draft"])
    wait_until(lambda: RagConfigDraft.objects.get(pk=draft.pk).status == "applied",
               timeout=120, what="the gate of the calibrated change")
    assert RagConfig.objects.get(pk=config.pk).reference_threshold > 0


def test_a_calibration_whose_worker_died_fails(acme: Imported, settings: Any) -> None:
    from retrieval.index.recovery import recover

    config = default_config(acme)
    gate_set(acme, ON_TOPIC + OFF_TOPIC)
    job = calibration_start(config=config, precision=0.9, gate_sets_only=True, by="ops")
    silent = timezone.now() - timedelta(seconds=settings.KB_EVALUATION_STALE_SECONDS + 1)
    Job.objects.filter(pk=job.pk).update(status=Job.Status.RUNNING, updated_at=silent)
    recover()
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "during the calibration" in job.error
    calibration_start(config=config, precision=0.9, gate_sets_only=True, by="ops")  # again
