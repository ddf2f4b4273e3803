"""Tenant-scoped staff: a staff user listed as a tenant's staff sees that tenant's rows on every
admin page, list, form and custom page, and another tenant's as if they did not exist."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import ToolInvocation
from datasets.models import Chunk, Dataset, Document, Job, Tenant
from datasets.tenancy.keys import api_key_create
from evaluation.models import EvaluationQuery, EvaluationRun, QuestionSet
from retrieval.models import ConfigExperiment, RagAgent, RagConfigDraft
from retrieval.ragconfig.drafts import experiment_start
from retrieval.ragconfig.services import rag_config_update

pytestmark = pytest.mark.django_db

APPS = ("datasets", "audit", "retrieval", "evaluation")


@dataclass
class Owned:
    """One tenant's rows of every tenant-owned model, each marked with the tenant's slug."""

    tenant: Tenant
    dataset: Dataset
    document: Document
    chunk: Chunk
    job: Job
    invocation: ToolInvocation
    config_change: Any
    agent: RagAgent
    key: Any
    run: EvaluationRun
    experiment: ConfigExperiment
    question_set: QuestionSet
    draft: RagConfigDraft

    def objects(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "document": self.document, "chunk": self.chunk,
                "job": self.job, "toolinvocation": self.invocation,
                "ragconfig": self.config_change.config, "ragconfigchange": self.config_change,
                "ragagent": self.agent, "apikey": self.key, "tenant": self.tenant,
                "evaluationrun": self.run, "configexperiment": self.experiment,
                "questionset": self.question_set, "ragconfigdraft": self.draft}


APP_OF = {"dataset": "datasets", "document": "datasets", "chunk": "datasets", "job": "datasets",
          "apikey": "datasets", "tenant": "datasets", "toolinvocation": "audit",
          "ragconfig": "retrieval", "ragconfigchange": "retrieval", "ragagent": "retrieval",
          "evaluationrun": "evaluation", "configexperiment": "retrieval",
          "questionset": "evaluation", "ragconfigdraft": "retrieval"}


def owned(slug: str) -> Owned:
    tenant = Tenant.objects.create(slug=slug)
    dataset = Dataset.objects.create(tenant=tenant, name=f"{slug}-runbooks")
    document = Document.objects.create(
        dataset=dataset, source_path=f"{slug}-doc.md", file_name=f"{slug}-doc.md",
        source_text=f"# {slug}", content_hash=slug.ljust(64, "0"),
        status=Document.Status.FAILED, error=f"{slug}: broken heading")
    chunk = Chunk.objects.create(document=document, chunk_index=0, content=f"{slug} chunk",
                                 breadcrumb=f"{slug}-crumb")
    job = Job.objects.create(tenant=tenant, dataset=dataset, kind=Job.Kind.IMPORT,
                             detail={"who": slug})
    invocation = ToolInvocation.objects.create(
        tenant=tenant, tool_call_id=f"{slug}-call", session_id=f"{slug}-session",
        outcome="ok", latency_ms=3, created_at=timezone.now())
    config = rag_config_update(config=None, tenant=tenant, values={"return_n": 3},
                               changed_by=f"{slug}-editor")
    agent = RagAgent.objects.create(tenant=tenant, name=f"{slug}-agent")
    key, _ = api_key_create(tenant=tenant, role="tool", name=f"{slug}-key")
    run = EvaluationRun.objects.create(tenant=tenant, kind="batch", name=f"{slug}-questions",
                                       settings={}, job=Job.objects.create(
                                           tenant=tenant, kind=Job.Kind.EVALUATE))
    EvaluationQuery.objects.create(run=run, position=1, query_id=f"{slug}-q", query="q",
                                   status="EMPTY", hit=False, reciprocal_rank=0, ndcg=0,
                                   latency_ms=1)
    config = rag_config_update(config=config, tenant=tenant, values={"return_n": 4},
                               changed_by=f"{slug}-editor")
    experiment = experiment_start(change=config.changes.get(version=1), share=10,
                                  started_by=f"{slug}-editor")
    question_set = QuestionSet.objects.create(tenant=tenant, name=f"{slug}-set", questions=[])
    draft = RagConfigDraft.objects.create(config=config, base_version=config.version,
                                          settings=config.setting_values(),
                                          proposed_by=f"{slug}-editor")
    return Owned(tenant, dataset, document, chunk, job, invocation, config.changes.get(version=1),
                 agent, key, run, experiment, question_set, draft)


@pytest.fixture
def two() -> tuple[Owned, Owned]:
    return owned("alpha"), owned("bravo")


def staff_of(client: Client, *tenants: Tenant, name: str = "staffer") -> User:
    """A staff user with every view and change permission of the project's models, listed as
    the staff of `tenants`."""
    user = User.objects.create_user(name, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=APPS, codename__regex=r"^(view|change|add)_"))
    for tenant in tenants:
        tenant.staff.add(user)
    client.force_login(user)
    return user


def page(client: Client, url: str, **params: Any) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def missing(client: Client, name: str, pk: Any) -> bool:
    """The change page of `pk` answers as for an id that does not exist."""
    response = client.get(reverse(f"admin:{APP_OF[name]}_{name}_change", args=[pk]),
                          follow=True)
    return "doesn’t exist" in response.content.decode()


def test_every_list_shows_the_staffs_tenant_only(client: Client,
                                                 two: tuple[Owned, Owned]) -> None:
    alpha, bravo = two
    staff_of(client, alpha.tenant)
    for name, obj in alpha.objects().items():
        html = page(client, reverse(f"admin:{APP_OF[name]}_{name}_changelist"))
        assert "alpha" in html, name
        assert "bravo" not in html, name  # not as a row, not as a filter's choice
        assert not missing(client, name, obj.pk), name
        assert missing(client, name, bravo.objects()[name].pk), name


def test_another_tenants_row_looks_like_one_that_does_not_exist(
        client: Client, two: tuple[Owned, Owned]) -> None:
    alpha, bravo = two
    staff_of(client, alpha.tenant)
    url = reverse("admin:datasets_document_change", args=[bravo.document.pk])
    theirs, none = (client.get(u, follow=True) for u in (
        url, url.replace(str(bravo.document.pk), "987654")))
    assert theirs.redirect_chain == [(reverse("admin:index"), 302)] == none.redirect_chain
    assert [str(m).replace(str(bravo.document.pk), "N") for m in theirs.context["messages"]] \
        == [str(m).replace("987654", "N") for m in none.context["messages"]]
    progress = reverse("admin:datasets_job_progress", args=[bravo.job.pk])
    assert client.get(progress).status_code == 404
    rollback = reverse("admin:retrieval_ragconfigchange_rollback",
                       args=[bravo.config_change.pk])
    assert client.post(rollback).status_code == 404
    for name in ("progress", "download"):
        url = reverse(f"admin:evaluation_evaluationrun_{name}", args=[bravo.run.pk])
        assert client.get(url).status_code == 404, name
    assert client.get(reverse("admin:evaluation_evaluationrun_query",
                              args=[bravo.run.pk, 1])).status_code == 404
    compare = reverse("admin:evaluation_evaluationrun_compare")
    assert client.get(compare, {"a": alpha.run.pk, "b": bravo.run.pk}).status_code == 404
    for url in (reverse("admin:retrieval_configexperiment_stop", args=[bravo.experiment.pk]),
                reverse("admin:retrieval_ragconfigchange_ab_test",
                        args=[bravo.config_change.pk])):
        client.post(url, {"share": 50, "promote": "1"})
    bravo.experiment.refresh_from_db()
    assert bravo.experiment.running and ConfigExperiment.objects.count() == 2
    chunks = reverse("admin:datasets_chunk_changelist")
    assert "bravo-doc.md" not in page(client, chunks, document__id__exact=bravo.document.pk)


def test_forms_offer_the_staffs_tenants_and_datasets_only(client: Client,
                                                          two: tuple[Owned, Owned]) -> None:
    alpha, _ = two
    staff_of(client, alpha.tenant)
    for url in (reverse("admin:datasets_document_add"), reverse("admin:datasets_apikey_add"),
                reverse("admin:retrieval_ragconfig_add"), reverse("admin:retrieval_ragagent_add"),
                reverse("admin:retrieval_ragconfig_hit_test"),
                reverse("admin:evaluation_evaluationrun_add")):
        html = page(client, url)
        assert "alpha" in html and "bravo" not in html, url
    # A dataset of another tenant submitted anyway is not a valid choice.
    response = client.post(reverse("admin:retrieval_ragagent_add"), {
        "tenant": two[1].tenant.pk, "name": "sneaky", "agentic_graph": "FULL",
        "max_retry_count": 1})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not RagAgent.objects.filter(name="sneaky").exists()


def test_hit_testing_and_the_glance_keep_to_the_staffs_tenant(
        client: Client, two: tuple[Owned, Owned]) -> None:
    alpha, bravo = two
    staff_of(client, alpha.tenant)
    html = client.post(reverse("admin:retrieval_ragconfig_hit_test"),
                       {"tenant": bravo.tenant.pk, "question": "anything"}).content.decode()
    assert "Select a valid choice" in html and 'id="hit-answer"' not in html
    glance = page(client, reverse("admin:audit_datasets_glance"))
    assert "alpha-runbooks" in glance and "bravo" not in glance


def test_staff_of_no_tenant_see_no_tenants_data(client: Client, two: tuple[Owned, Owned]) -> None:
    staff_of(client)
    for name in ("dataset", "document", "toolinvocation", "ragconfig", "tenant"):
        html = page(client, reverse(f"admin:{APP_OF[name]}_{name}_changelist"))
        assert "alpha" not in html and "bravo" not in html, name


def test_superusers_see_every_tenant_and_say_who_is_staff(admin_client: Client,
                                                          two: tuple[Owned, Owned]) -> None:
    html = page(admin_client, reverse("admin:datasets_document_changelist"))
    assert "alpha-doc.md" in html and "bravo-doc.md" in html
    tenant_page = page(admin_client, reverse("admin:datasets_tenant_change",
                                             args=[two[0].tenant.pk]))
    assert 'name="staff"' in tenant_page


def test_tenant_staff_cannot_say_who_is_staff_or_add_tenants(
        client: Client, two: tuple[Owned, Owned]) -> None:
    alpha, _ = two
    user = staff_of(client, alpha.tenant)
    other = User.objects.create_user("other", is_staff=True)
    url = reverse("admin:datasets_tenant_change", args=[alpha.tenant.pk])
    assert 'name="staff"' not in page(client, url)
    response = client.post(url, {"slug": "alpha", "name": "A", "staff": [user.pk, other.pk]})
    assert response.status_code == 302  # saved, without the field it may not change
    alpha.tenant.refresh_from_db()
    assert alpha.tenant.name == "A" and list(alpha.tenant.staff.all()) == [user]
    assert client.get(reverse("admin:datasets_tenant_add")).status_code == 403


def test_a_superuser_decides_a_tenants_questions_are_kept_its_staff_only_keep_them_less(
        client: Client, admin_client: Client, two: tuple[Owned, Owned], settings: Any) -> None:
    """Issue 36 item 16: keeping people's questions is a privacy decision (docs/admin.md)."""
    alpha, _ = two
    settings.KB_AUDIT_RAW_QUERY_RETENTION_DAYS = 30
    user = staff_of(client, alpha.tenant)
    url = reverse("admin:datasets_tenant_change", args=[alpha.tenant.pk])
    form = {"slug": "alpha", "name": "A"}
    assert 'name="store_raw_queries"' in page(client, url)

    refused = client.post(url, {**form, "store_raw_queries": "on"}).content.decode()
    assert "Only a superuser decides that this tenant&#x27;s questions are kept." in refused
    superuser = {**form, "staff": [user.pk], "store_raw_queries": "on"}
    past = admin_client.post(url, {**superuser, "raw_query_retention_days": "31"})
    assert past.status_code == 200 and "30 days at most" in past.content.decode()
    assert admin_client.post(url, {**superuser, "raw_query_retention_days": "14"}
                             ).status_code == 302

    kept = {**form, "store_raw_queries": "on"}
    for longer in ("20", ""):  # empty: the deployment's 30 days
        response = client.post(url, {**kept, "raw_query_retention_days": longer})
        assert "Only a superuser keeps raw queries longer than 14 days." in \
            response.content.decode(), longer
    assert client.post(url, {**kept, "raw_query_retention_days": "7"}).status_code == 302
    assert client.post(url, {**form, "raw_query_retention_days": "7"}).status_code == 302
    alpha.tenant.refresh_from_db()
    assert (alpha.tenant.store_raw_queries, alpha.tenant.raw_query_retention_days) == (False, 7)


def test_a_tenants_staff_declare_its_filterable_fields(
        client: Client, two: tuple[Owned, Owned]) -> None:
    alpha, _ = two
    staff_of(client, alpha.tenant)
    url = reverse("admin:datasets_tenant_change", args=[alpha.tenant.pk])
    form = {"slug": "alpha", "name": "A"}
    before = alpha.dataset.documents_revision
    saved = client.post(url, {**form, "filterable_fields": "team, service\nregion"})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    alpha.dataset.refresh_from_db()  # lookups read its documents' fields anew
    assert alpha.dataset.documents_revision != before
    alpha.tenant.refresh_from_db()
    assert alpha.tenant.filterable_fields == ["team", "service", "region"]
    assert 'value="team, service, region"' in page(client, url)
    refused = client.post(url, {**form, "filterable_fields": "team, owner"}).content.decode()
    assert "a frontmatter field of its own" in refused
    assert client.post(url, {**form, "filterable_fields": ""}).status_code == 302
    alpha.tenant.refresh_from_db()
    assert alpha.tenant.filterable_fields == []


def test_a_tenant_filter_value_that_is_no_id_filters_to_nothing(
        admin_client: Client, two: tuple[Owned, Owned]) -> None:
    for value in ("²", "9" * 40, "x"):
        html = page(admin_client, reverse("admin:datasets_document_changelist"),
                    dataset__tenant__id__exact=value)
        assert "alpha-doc.md" not in html and "bravo-doc.md" not in html


def test_a_dataset_never_moves_to_another_tenant(admin_client: Client,
                                                 two: tuple[Owned, Owned]) -> None:
    """Its chunks are indexed as its tenant's (the tenant's Milvus partition and filter):
    moved, they would stay where the new tenant never looks."""
    alpha, _ = two
    change = page(admin_client, reverse("admin:datasets_dataset_change",
                                        args=[alpha.dataset.pk]))
    assert 'name="tenant"' not in change and "alpha" in change
    assert 'name="tenant"' in page(admin_client, reverse("admin:datasets_dataset_add"))
