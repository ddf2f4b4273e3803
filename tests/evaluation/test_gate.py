"""The regression gate on config changes: a change of a config that the tenant's gate question
sets cover is held, not served, until the sets score no worse than their tolerances; a
superuser may serve it anyway, with a reason in the config's history. Real lookups over the
acme runbooks (both runtimes); the gate's job runs in this process (`applied`) or on the real
worker (services)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from datasets.documents.services import dataset_create
from datasets.models import Job
from evaluation.gate import EvaluationGate
from evaluation.models import GateCheck, QuestionSet
from retrieval.models import RagConfig, RagConfigChange, RagConfigDraft
from retrieval.ragconfig.drafts import (
    experiment_promote,
    experiment_start,
    rag_config_draft_discard,
    rag_config_propose,
    rag_config_rollback,
)
from retrieval.ragconfig.selectors import rag_config_for
from retrieval.ragconfig.services import rag_config_update
from tests.conftest import wait_until
from tests.retrieval.conftest import Imported

pytestmark = pytest.mark.django_db

QUESTIONS = [
    {"id": "nginx", "query": "nginx 502 bad gateway upstream connection refused",
     "expected": ["nginx.md"]},
    {"id": "lag", "query": "Kafka consumer lag alerting", "expected": ["kafka.md"]},
    {"id": "off", "query": "quarterly sales tax filing deadline", "expected": []},
]
# kb_scope names no dataset of acme: every answer is EMPTY, so both on-topic questions lose
# their right-first document (1.0 -> 0.0) while the off-topic one stays right.
WORSE = {"kb_scope": "none"}


def gate_set(imported: Imported, **fields: Any) -> QuestionSet:
    values: dict[str, Any] = {"tenant": imported.tenant, "name": "ops", "gate": True,
                              "questions": QUESTIONS, **fields}
    return QuestionSet.objects.create(**values)


def default_config(imported: Imported, **values: Any) -> RagConfig:
    return rag_config_update(config=None, tenant=imported.tenant, values=values,
                             changed_by="setup")


def serving_scope(imported: Imported, dataset_ids: tuple[int, ...] = ()) -> str:
    return rag_config_for(tenant_id=imported.tenant.pk, dataset_ids=dataset_ids).settings.kb_scope


def test_a_change_that_lowers_right_first_beyond_the_tolerance_is_held_not_served(
        acme: Imported, applied: Any) -> None:
    config = default_config(acme)
    gate_set(acme)
    with applied():
        proposal = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                      changed_by="editor")
        assert proposal.held and serving_scope(acme) == ""  # held while the gate runs
    draft = RagConfigDraft.objects.get(pk=proposal.draft.pk)
    assert draft.status == RagConfigDraft.Status.HELD, draft.verdict
    config.refresh_from_db()
    assert (config.version, config.kb_scope, serving_scope(acme)) == (1, "", "")
    check = GateCheck.objects.get(draft=draft)
    assert not check.passed
    assert check.baseline.metrics["first"] == 1.0 and check.candidate.metrics["first"] == 0.0
    assert check.drops == {"first": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0, "off_topic_empty": 0.0}
    assert "right first dropped 1.000 (tolerance 0.020)" in draft.verdict
    assert draft.job.kind == Job.Kind.GATE and draft.job.status == Job.Status.SUCCEEDED
    assert draft.job.done == draft.job.total == 6  # 3 questions, under both versions
    assert check.baseline.config_label == "acme/default, version 1"
    assert check.candidate.config_label == f"acme/default, held change {draft.pk}"


def test_the_same_change_with_a_better_score_serves(acme: Imported, applied: Any) -> None:
    config = default_config(acme, **WORSE)  # serving: nothing found
    gate_set(acme)
    with applied():
        proposal = rag_config_propose(config=config, tenant=acme.tenant,
                                      values={"kb_scope": ""}, changed_by="editor")
    draft = RagConfigDraft.objects.get(pk=proposal.draft.pk)
    assert draft.status == RagConfigDraft.Status.APPLIED and draft.applied_version == 2
    config.refresh_from_db()
    assert config.version == 2 and serving_scope(acme) == ""
    change = config.changes.get(version=2)
    assert change.changed_by == "editor"
    assert f"gate passed it (held change {draft.pk})" in change.note
    assert GateCheck.objects.get(draft=draft).drops["first"] == -1.0


def test_a_drop_within_the_tolerance_serves(acme: Imported, applied: Any) -> None:
    config = default_config(acme)
    gate_set(acme, max_drop_first=1, max_drop_mrr=1, max_drop_ndcg=1)
    with applied():
        proposal = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                      changed_by="editor")
    assert RagConfigDraft.objects.get(pk=proposal.draft.pk).status == "applied"
    assert serving_scope(acme) == "none"


def test_without_a_gate_set_a_change_serves_at_once(acme: Imported, applied: Any) -> None:
    config = default_config(acme)
    gate_set(acme, gate=False)  # stored, not named as the gate
    with applied():
        proposal = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                      changed_by="editor")
    assert not proposal.held and proposal.config.version == 2
    assert serving_scope(acme) == "none" and not RagConfigDraft.objects.exists()


def test_dataset_configs_are_gated_by_their_datasets_sets(acme: Imported, acme_edge: Imported,
                                                          applied: Any) -> None:
    default = default_config(acme)
    gate = EvaluationGate()
    gate_set(acme, dataset=acme.dataset)  # searches ops alone
    # While ops has no config of its own the default serves the set's lookups, and guards it.
    assert gate.covers(tenant_id=acme.tenant.pk, dataset_id=None)
    assert gate.covers(tenant_id=acme.tenant.pk, dataset_id=acme.dataset.pk)
    assert not gate.covers(tenant_id=acme.tenant.pk, dataset_id=acme_edge.dataset.pk)
    with applied():
        proposal = rag_config_propose(config=None, tenant=acme.tenant, dataset=acme.dataset,
                                      values=WORSE, changed_by="editor")
    own = proposal.config
    # Created as what served the dataset's lookups (the default), the change held over it.
    assert own.dataset == acme.dataset and own.version == 1
    assert own.setting_values() == default.setting_values()
    draft = RagConfigDraft.objects.get(pk=proposal.draft.pk)
    assert draft.status == "held" and draft.base_version == 1
    assert serving_scope(acme, (acme.dataset.pk,)) == ""
    # Now ops has its own config: the default no longer serves that set.
    assert not gate.covers(tenant_id=acme.tenant.pk, dataset_id=None)
    # Another dataset's config is not covered: it changes at once.
    other = rag_config_propose(config=None, tenant=acme.tenant, dataset=acme_edge.dataset,
                               values=WORSE, changed_by="editor")
    assert not other.held and serving_scope(acme, (acme_edge.dataset.pk,)) == "none"


def test_a_rollback_and_an_ab_promotion_go_through_the_gate(acme: Imported,
                                                            applied: Any) -> None:
    config = default_config(acme, **WORSE)
    config = rag_config_update(config=config, tenant=acme.tenant, values={"kb_scope": ""},
                               changed_by="setup")
    gate_set(acme)
    worse = config.changes.get(version=1)
    with applied():
        rollback = rag_config_rollback(change=worse, changed_by="editor")
    assert RagConfigDraft.objects.get(pk=rollback.draft.pk).status == "held"
    assert rollback.draft.kind == "rollback" and serving_scope(acme) == ""

    experiment = experiment_start(change=worse, share=50, started_by="editor")
    with applied():
        promotion = experiment_promote(experiment=experiment, promoted_by="editor")
    draft = RagConfigDraft.objects.get(pk=promotion.draft.pk)
    assert draft.kind == "promotion" and draft.status == "held"
    rollback.draft.refresh_from_db()
    assert rollback.draft.status == "superseded"  # one held change per config
    experiment.refresh_from_db()
    config.refresh_from_db()
    assert not experiment.running and "held by the gate" in experiment.outcome
    assert config.experiment is None and config.version == 2 and serving_scope(acme) == ""


def test_two_changes_at_once_the_later_supersedes_the_held_one(acme: Imported,
                                                               applied: Any) -> None:
    config = default_config(acme)
    gate_set(acme)
    with applied():  # both gates run when the block ends: the first finds itself superseded
        first = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                   changed_by="a")
        second = rag_config_propose(config=config, tenant=acme.tenant,
                                    values={"return_n": 4}, changed_by="b")
    first_draft = RagConfigDraft.objects.get(pk=first.draft.pk)
    second_draft = RagConfigDraft.objects.get(pk=second.draft.pk)
    assert first_draft.status == "superseded" and not first_draft.gate_checks.exists()
    assert first_draft.job.status == "succeeded"
    assert second_draft.status == "applied", second_draft.verdict
    config.refresh_from_db()
    assert (config.version, config.return_n, config.kb_scope) == (2, 4, "")


def staff(client: Client, imported: Imported) -> User:
    user = User.objects.create_user("operator", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=("retrieval", "evaluation"),
        codename__regex=r"^(view|change|add)_"))
    imported.tenant.staff.add(user)
    client.force_login(user)
    return user


def test_the_held_change_shows_the_diff_and_a_superuser_override_is_audited(
        acme: Imported, applied: Any, admin_client: Client, client: Client) -> None:
    config = default_config(acme)
    gate_set(acme)
    with applied():
        draft = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                   changed_by="editor").draft
    assert draft is not None
    url = reverse("admin:retrieval_ragconfigdraft_change", args=[draft.pk])
    html = admin_client.get(url).content.decode()
    assert 'data-status="held"' in html and 'data-passed="false"' in html
    assert html.count('class="gate-diff-row" data-change="now a miss"') == 2  # nginx, lag
    assert html.count('data-failed="true"') == 3  # right first, MRR, nDCG
    config_page = admin_client.get(reverse("admin:retrieval_ragconfig_change",
                                           args=[config.pk])).content.decode()
    assert 'id="held-change"' in config_page

    decide = reverse("admin:retrieval_ragconfigdraft_decide", args=[draft.pk])
    staff(client, acme)  # tenant staff may see and discard, never override
    assert "Only a superuser may serve" in client.get(url).content.decode()
    assert client.post(decide, {"override": "1", "reason": "trust me"}).status_code == 403
    assert admin_client.post(decide, {"override": "1", "reason": " "}).status_code == 302
    assert RagConfig.objects.get(pk=config.pk).version == 1  # no reason: refused

    admin_client.post(decide, {"override": "1", "reason": "the off-topic fix matters more"})
    config.refresh_from_db()
    assert config.version == 2 and config.kb_scope == "none"
    change = RagConfigChange.objects.get(config=config, version=2)
    assert change.changed_by == "admin"
    assert change.note == (f"gate overridden by admin (held change {draft.pk}): the off-topic "
                           "fix matters more")
    draft.refresh_from_db()
    assert (draft.status, draft.decided_by, draft.applied_version) == ("applied", "admin", 2)
    history = admin_client.get(reverse("admin:retrieval_ragconfig_change", args=[config.pk]))
    assert "gate overridden by admin" in history.content.decode()


def test_tenant_staff_discard_a_held_change(acme: Imported, applied: Any,
                                            client: Client) -> None:
    config = default_config(acme)
    gate_set(acme)
    with applied():
        draft = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                   changed_by="editor").draft
    assert draft is not None
    staff(client, acme)
    client.post(reverse("admin:retrieval_ragconfigdraft_decide", args=[draft.pk]),
                {"discard": "1"})
    draft.refresh_from_db()
    assert draft.status == "discarded" and RagConfig.objects.get(pk=config.pk).version == 1


def test_the_admin_save_of_a_covered_config_is_held(acme: Imported, applied: Any,
                                                    admin_client: Client) -> None:
    from tests.retrieval.admin.test_ragconfig import form_data

    config = default_config(acme)
    url = reverse("admin:retrieval_ragconfig_change", args=[config.pk])
    assert "no gate question set covers this config" in admin_client.get(url).content.decode()
    gate_set(acme)
    data = form_data(acme.tenant, **WORSE)
    data.pop("tenant"), data.pop("dataset")  # the scope is read-only once created
    data.update({"changes-TOTAL_FORMS": "1", "changes-INITIAL_FORMS": "1",
                 "changes-0-id": str(config.changes.get().pk), "changes-0-config": config.pk})
    with applied():
        response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    draft = RagConfigDraft.objects.get()
    assert response["Location"] == reverse("admin:retrieval_ragconfigdraft_change",
                                           args=[draft.pk])
    assert draft.status == "held" and RagConfig.objects.get(pk=config.pk).version == 1


def gate_command(*args: str) -> tuple[int, str]:
    import io

    out = io.StringIO()
    try:
        call_command("gate_config", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def test_the_gate_command_exits_non_zero_on_a_regression(acme: Imported) -> None:
    assert gate_command("--tenant", "acme", "--set", "kb_scope=none")[0] == 2  # no config
    default_config(acme)
    code, out = gate_command("--tenant", "acme", "--set", "kb_scope=none")
    assert code == 2 and "no gate question set covers acme/default" in out
    gate_set(acme)
    code, out = gate_command("--tenant", "acme", "--set", "kb_scope=none")
    assert code == 1 and "REGRESSION" in out and "regression on ops" in out
    assert "now a miss nginx: nginx.md -> EMPTY" in " ".join(out.split())
    code, out = gate_command("--tenant", "acme", "--set", "return_n=4")
    assert code == 0 and "passed: acme/default may take the change" in out
    assert gate_command("--tenant", "acme", "--set", "return_n=0")[0] == 2  # refused value
    assert gate_command("--tenant", "acme")[0] == 2  # no change named
    code, out = gate_command("--tenant", "acme", "--set", "kb_scope=none", "--json")
    report = json.loads(out[:out.rindex("}") + 1])
    assert code == 1 and report["passed"] is False
    assert report["sets"][0]["failed"] == ["first", "mrr@10", "ndcg@10"]
    assert RagConfig.objects.get(tenant=acme.tenant).version == 1  # nothing saved


@pytest.mark.integration  # the real worker runs the gate; the page polls its progress
@pytest.mark.django_db(transaction=True)
def test_the_gate_runs_on_the_worker(celery_worker: Any, admin_user: Any,
                                     acme: Imported) -> None:
    config = default_config(acme)
    gate_set(acme)
    draft = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                               changed_by="editor").draft
    assert draft is not None
    client = Client()
    client.force_login(admin_user)
    progress = reverse("admin:retrieval_ragconfigdraft_progress", args=[draft.pk])
    wait_until(lambda: client.get(progress).json()["finished"], timeout=120,
               what="the gate's job")
    shown = client.get(progress).json()
    assert shown["status"] == "succeeded" and shown["done"] == shown["total"] == 6
    draft.refresh_from_db()
    assert draft.status == "held" and RagConfig.objects.get(pk=config.pk).version == 1


def test_a_gate_whose_worker_died_fails_and_is_checked_again(
        acme: Imported, applied: Any, admin_client: Client, settings: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from retrieval.index.recovery import recover

    config = default_config(acme)
    gate_set(acme)
    # Without a worker here, the gate's job stays queued; then it "runs" and falls silent.
    draft = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                               changed_by="editor").draft
    assert draft is not None and draft.job is not None
    silent = timezone.now() - timedelta(seconds=settings.KB_EVALUATION_STALE_SECONDS + 1)
    Job.objects.filter(pk=draft.job.pk).update(status=Job.Status.RUNNING, updated_at=silent)
    recover()
    draft.refresh_from_db()
    assert draft.job.status == Job.Status.FAILED and "worker stopped" in draft.job.error
    assert draft.status == "checking" and draft.recheckable  # not served, not judged
    url = reverse("admin:retrieval_ragconfigdraft_change", args=[draft.pk])
    assert 'id="draft-recheck"' in admin_client.get(url).content.decode()
    with applied():
        admin_client.post(reverse("admin:retrieval_ragconfigdraft_decide", args=[draft.pk]),
                          {"recheck": "1"})
    draft.refresh_from_db()
    assert draft.status == "held" and draft.job.status == Job.Status.SUCCEEDED
    assert RagConfig.objects.get(pk=config.pk).version == 1


def test_question_sets_are_stored_from_the_admin_and_the_gate_is_bounded(
        acme: Imported, admin_client: Client, settings: Any, monkeypatch: Any) -> None:
    import evaluation.admin_gate

    add = reverse("admin:evaluation_questionset_add")
    fields = {"tenant": acme.tenant.pk, "name": "ops", "gate": "on", "max_drop_first": "0.1",
              "max_drop_mrr": "0.02", "max_drop_ndcg": "0.02",
              "max_drop_off_topic_empty": "0.05"}
    pasted = "\n".join(json.dumps(q) for q in QUESTIONS)
    bad = admin_client.post(add, {**fields, "questions_text": '{"expected": "x.md"}'})
    assert bad.status_code == 200 and "line 1: no query" in bad.content.decode()
    over = admin_client.post(add, {**fields, "max_drop_first": "1.5", "questions_text": pasted})
    assert over.status_code == 200 and not QuestionSet.objects.exists()
    assert admin_client.post(add, {**fields, "questions_text": pasted}).status_code == 302
    stored = QuestionSet.objects.get()
    assert (stored.gate, stored.max_drop_first, stored.created_by) == (True, 0.1, "admin")
    assert [q["id"] for q in stored.questions] == ["nginx", "lag", "off"]
    assert stored.questions[2]["expected"] == []

    monkeypatch.setattr(evaluation.admin_gate, "MAX_GATE_QUESTIONS", 5)
    second = admin_client.post(add, {**fields, "name": "more", "questions_text": pasted})
    assert second.status_code == 200
    assert "The tenant&#x27;s gate sets would ask 6 questions; 5 at most" in \
        second.content.decode()
    fields.pop("gate")  # stored, not part of the gate: no bound
    assert admin_client.post(add, {**fields, "name": "more",
                                   "questions_text": pasted}).status_code == 302


def test_a_batch_hit_test_runs_a_stored_question_set(acme: Imported, globex: Imported,
                                                     applied: Any, admin_client: Client) -> None:
    from evaluation.models import EvaluationRun

    stored = gate_set(acme, gate=False)
    other = gate_set(globex)
    add = reverse("admin:evaluation_evaluationrun_add")
    assert "… or a stored question set" in admin_client.get(add).content.decode()
    wrong = admin_client.post(add, {"tenant": acme.tenant.pk, "question_set": other.pk})
    assert "a question set of acme, please" in wrong.content.decode()
    both = admin_client.post(add, {"tenant": acme.tenant.pk, "question_set": stored.pk,
                                   "questions_text": "q"})
    assert "(one of the three)" in both.content.decode()
    with applied():
        response = admin_client.post(add, {"tenant": acme.tenant.pk,
                                           "question_set": stored.pk})
    assert response.status_code == 302
    run = EvaluationRun.objects.get()
    assert run.name == "ops" and run.queries == 3 and run.metrics["first"] == 1.0


# --- Issue 36 item 2: the gate does not bend for the tenant's own staff ---------------------

def staff_who_deletes(client: Client, imported: Imported) -> User:
    """Tenant staff with every right on configs, question sets and datasets, deletion too."""
    user = staff(client, imported)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=("retrieval", "evaluation", "datasets"),
        codename__regex=r"^(view|change|add|delete)_"))
    return user


def set_form(question_set: QuestionSet, **changes: Any) -> dict[str, Any]:
    """The change form of a stored set as the admin shows it, with `changes`."""
    fields: dict[str, Any] = {
        "tenant": question_set.tenant_id, "name": question_set.name,
        "dataset": question_set.dataset_id or "", "max_drop_first": question_set.max_drop_first,
        "max_drop_mrr": question_set.max_drop_mrr, "max_drop_ndcg": question_set.max_drop_ndcg,
        "max_drop_off_topic_empty": question_set.max_drop_off_topic_empty}
    if question_set.gate:
        fields["gate"] = "on"
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def test_staff_tighten_a_gate_set_and_never_loosen_it(acme: Imported, acme_edge: Imported,
                                                      client: Client,
                                                      admin_client: Client) -> None:
    stored = gate_set(acme)
    staff_who_deletes(client, acme)
    url = reverse("admin:evaluation_questionset_change", args=[stored.pk])
    pasted = "\n".join(json.dumps(q) for q in QUESTIONS[:1])  # the hard questions dropped
    loosening = {
        "a tolerance raised": set_form(stored, max_drop_first="1"),
        "the gate unticked": set_form(stored, gate=None),
        "its questions changed": set_form(stored, questions_text=pasted),
        "another dataset": set_form(stored, dataset=acme_edge.dataset.pk),
    }
    for what, form in loosening.items():
        response = client.post(url, form)
        assert response.status_code == 200, what
        assert "Only a superuser loosens the regression gate" in response.content.decode(), what
    assert QuestionSet.objects.get(pk=stored.pk).tolerances() == stored.tolerances()
    assert QuestionSet.objects.get(pk=stored.pk).gate and stored.dataset_id is None

    # Deleting it, alone or in a batch, is refused; so is the dataset that would take it.
    assert client.post(reverse("admin:evaluation_questionset_delete", args=[stored.pk]),
                       {"post": "yes"}).status_code == 403
    client.post(reverse("admin:evaluation_questionset_changelist"),
                {"action": "delete_selected", "_selected_action": [stored.pk], "post": "yes"})
    empty = dataset_create(tenant=acme.tenant, name="drafts")  # nothing else keeps it
    on_empty = gate_set(acme, name="drafts-only", dataset=empty)
    assert client.post(reverse("admin:datasets_dataset_delete", args=[empty.pk]),
                       {"post": "yes"}).status_code == 403
    assert QuestionSet.objects.filter(pk__in=[stored.pk, on_empty.pk]).count() == 2

    # Tightening is theirs: a lower tolerance, a new name.
    assert client.post(url, set_form(stored, max_drop_first="0.01",
                                      name="ops strict")).status_code == 302
    stored.refresh_from_db()
    assert (stored.max_drop_first, stored.name) == (0.01, "ops strict")
    # A superuser may loosen it.
    assert admin_client.post(url, set_form(stored, max_drop_first="1")).status_code == 302
    assert QuestionSet.objects.get(pk=stored.pk).max_drop_first == 1


def test_a_held_change_is_judged_by_the_rules_it_was_held_under(
        acme: Imported, applied: Any, client: Client) -> None:
    config = default_config(acme)
    # The set searches ops alone: it guards the default while ops has no config of its own.
    rules = gate_set(acme, dataset=acme.dataset)
    with applied():
        draft = rag_config_propose(config=config, tenant=acme.tenant, values=WORSE,
                                   changed_by="editor").draft
    assert draft is not None and RagConfigDraft.objects.get(pk=draft.pk).status == "held"
    # Since: ops gets a config of its own (so the set no longer guards the default) and the
    # set's tolerances are raised (by a superuser, say). Neither judges the held change.
    rag_config_propose(config=None, tenant=acme.tenant, dataset=acme.dataset, values={},
                       changed_by="editor")
    QuestionSet.objects.filter(pk=rules.pk).update(max_drop_first=1, max_drop_mrr=1,
                                                   max_drop_ndcg=1)
    assert not EvaluationGate().covers(tenant_id=acme.tenant.pk, dataset_id=None)
    staff(client, acme)
    with applied():
        client.post(reverse("admin:retrieval_ragconfigdraft_decide", args=[draft.pk]),
                    {"recheck": "1"})
    draft.refresh_from_db()
    assert draft.status == "held", draft.verdict
    assert "right first dropped 1.000 (tolerance 0.020)" in draft.verdict
    assert RagConfig.objects.get(pk=config.pk).version == 1 and serving_scope(acme) == ""
    assert [r.name for r in draft.gate_rules.all()] == ["ops"]


def test_an_ab_test_of_a_gated_config_takes_its_share_only_once_the_gate_passes(
        acme: Imported, applied: Any, client: Client, admin_client: Client) -> None:
    from retrieval.models import ConfigExperiment

    config = default_config(acme, **WORSE)
    config = rag_config_update(config=config, tenant=acme.tenant, values={"kb_scope": ""},
                               changed_by="setup")
    gate_set(acme)
    staff(client, acme)
    worse = config.changes.get(version=1)
    with applied():
        page = client.post(reverse("admin:retrieval_ragconfigchange_ab_test", args=[worse.pk]),
                           {"share": "99"}, follow=True).content.decode()
    experiment = ConfigExperiment.objects.get()
    assert (experiment.share, experiment.asked_share) == (0, 99) and experiment.running
    assert "runs on no lookup yet" in page and 'id="experiment-gate"' in page
    # No lookup runs with the candidate while the gate holds it.
    assert all(rag_config_for(tenant_id=acme.tenant.pk, dataset_ids=(),
                              routing_key=f"s{n}").experiment == (experiment.pk, "control")
               for n in range(50))
    draft = RagConfigDraft.objects.get(experiment=experiment)
    assert draft.kind == "experiment" and draft.status == "held", draft.verdict
    decide = reverse("admin:retrieval_ragconfigdraft_decide", args=[draft.pk])
    held = client.get(reverse("admin:retrieval_ragconfigdraft_change", args=[draft.pk]))
    assert 'data-status="held"' in held.content.decode()
    assert client.post(decide, {"override": "1", "reason": "trust me"}).status_code == 403
    with applied():
        client.post(decide, {"recheck": "1"})
    experiment.refresh_from_db()
    assert experiment.share == 0

    # A superuser may give it its share against the gate.
    done = admin_client.post(decide, {"override": "1", "reason": "a measured risk"},
                             follow=True).content.decode()
    assert f"A/B test {experiment.pk} takes its share" in done
    experiment.refresh_from_db()
    draft.refresh_from_db()
    assert experiment.share == 99 and draft.status == "applied"
    assert RagConfig.objects.get(pk=config.pk).version == 2  # the config itself is unchanged


def test_an_ab_test_the_gate_passes_takes_its_share_and_its_end_ends_the_wait(
        acme: Imported, applied: Any) -> None:
    config = default_config(acme)
    config = rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 4},
                               changed_by="setup")
    gate_set(acme)
    with applied():
        passing = experiment_start(change=config.changes.get(version=1), share=30,
                                   started_by="editor")
    passing.refresh_from_db()
    assert passing.share == 30
    assert RagConfigDraft.objects.get(experiment=passing).status == "applied"
    experiment_promote(experiment=passing, promoted_by="editor")  # ends it (and is held)

    waiting = experiment_start(change=config.changes.get(version=1), share=30,
                               started_by="editor")  # no worker here: its gate waits
    draft = RagConfigDraft.objects.get(experiment=waiting)
    assert waiting.share == 0 and draft.status == "checking"
    rag_config_draft_discard(draft=draft, discarded_by="editor")
    waiting.refresh_from_db()
    assert not waiting.running and "was discarded" in waiting.outcome
