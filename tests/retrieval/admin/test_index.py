"""The admin's index operations page and a job's live page: rebuild, rollback and reconcile
start a job (rebuild and rollback with their confirm word), the job's page shows its progress,
its log and its end state, and polls them as JSON; superusers only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from datasets.jobs.progress import GENERIC_ERROR, LOG_LINES, job_fail, job_update
from datasets.models import Job, Tenant
from retrieval.index import milvus
from retrieval.models import IndexVersion
from tests.datasets.builders import lookup, runbook, top_doc_id, upload

pytestmark = pytest.mark.django_db
OPERATIONS = "admin:retrieval_indexversion_operations"


def start(client: Client, applied: Any, operation: str, **fields: str) -> Any:
    with applied():  # the worker's part, in this process
        return client.post(reverse(OPERATIONS), {"operation": operation, **fields})


def progress(client: Client, job: Job) -> dict[str, Any]:
    response = client.get(reverse("admin:datasets_job_progress", args=[job.pk]))
    assert response.status_code == 200, response.content
    return response.json()


def index_jobs() -> Any:
    return Job.objects.filter(tenant__isnull=True)


def messages_of(client: Client) -> str:
    return client.get(reverse(OPERATIONS)).content.decode()


def test_a_rebuild_then_a_rollback_from_the_page(admin_client: Client, kb, ingest, store,
                                                  applied) -> None:
    kafka = [ingest(kb.dataset, f"{topic}.md", runbook(topic)) for topic in ("redis", "kafka")][1]
    first = store.serving
    page = admin_client.get(reverse("admin:retrieval_indexversion_changelist")).content.decode()
    assert 'id="index-operations-link"' in page  # reachable from the index versions
    assert first in messages_of(admin_client)  # what serves

    response = start(admin_client, applied, "rebuild", confirm="REBUILD")

    job = Job.objects.get(kind=Job.Kind.REBUILD)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:datasets_job_change", args=[job.pk])
    shown = progress(admin_client, job)
    assert shown["status"] == "succeeded" and shown["finished"]
    assert shown["done"] == shown["total"] == 2
    assert shown["end"].startswith("Succeeded in")
    lines = [line["message"] for line in shown["log"]]
    new = store.serving
    assert lines[0] == "started by a worker"
    assert lines[1].startswith(f"building {new} ") and lines[1].endswith("from 2 documents")
    assert "indexed 2 of 2 documents" in lines
    assert lines[-1] == f"serving {new}: 2 documents"
    job_page = admin_client.get(response["Location"]).content.decode()
    assert 'id="job-progress"' in job_page and f"serving {new}: 2 documents" in job_page
    assert "Succeeded in" in job_page

    response = start(admin_client, applied, "rollback", confirm="ROLLBACK")

    rollback = Job.objects.get(kind=Job.Kind.ROLLBACK)
    assert response["Location"] == reverse("admin:datasets_job_change", args=[rollback.pk])
    assert progress(admin_client, rollback)["status"] == "succeeded"
    assert store.serving == first
    assert progress(admin_client, rollback)["log"][-1]["message"].startswith(
        f"serving {first} again; repaired {first}: 2 documents")
    assert top_doc_id(lookup(kb.tool, "kafka dashboard restart")) == kafka.doc_key


def test_rebuild_and_rollback_need_their_confirm_word(admin_client: Client, kb, ingest, store,
                                                      applied) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    for operation, word in [("rebuild", "rebuild"), ("rebuild", ""), ("rollback", "REBUILD")]:
        response = start(admin_client, applied, operation, confirm=word)
        assert response.status_code == 302
        assert response["Location"] == reverse(OPERATIONS)
    page = messages_of(admin_client)
    assert "Type REBUILD to confirm" in page and "Type ROLLBACK to confirm" in page
    assert not index_jobs().exists()
    # Nothing retired yet: a rollback is refused before it is queued, and its button is off.
    start(admin_client, applied, "rollback", confirm="ROLLBACK")
    assert "no retired index version" in messages_of(admin_client)
    assert not index_jobs().exists()


def test_one_index_operation_at_a_time(admin_client: Client, kb, ingest, store,
                                       applied) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    running = Job.objects.create(kind=Job.Kind.REBUILD, status=Job.Status.RUNNING)

    start(admin_client, applied, "reconcile")

    page = messages_of(admin_client)
    assert f"Job {running.pk} (rebuild) is still running" in page
    assert reverse("admin:datasets_job_change", args=[running.pk]) in page  # "follow it"
    assert index_jobs().get() == running


def test_a_reconcile_reports_and_repairs(admin_client: Client, kb, ingest, store,
                                         applied) -> None:
    redis = ingest(kb.dataset, "redis.md", runbook("redis", sections=3))
    milvus.writer().delete_document(redis.doc_id, collection=store.serving)  # lost from Milvus

    start(admin_client, applied, "reconcile")
    start(admin_client, applied, "reconcile", repair="on")

    checked, repaired = Job.objects.filter(kind=Job.Kind.RECONCILE).order_by("pk")
    assert progress(admin_client, checked)["log"][-1]["message"].startswith(
        f"checked {store.serving}: 1 documents")
    assert "drift: missing 1" in progress(admin_client, checked)["log"][-1]["message"]
    assert "repaired" in progress(admin_client, repaired)["log"][-1]["message"]
    start(admin_client, applied, "reconcile")
    last = Job.objects.filter(kind=Job.Kind.RECONCILE).order_by("-pk").first()
    assert progress(admin_client, last)["log"][-1]["message"].endswith("drift: none")


def test_an_uploads_job_page_links_from_the_message_and_logs_what_it_did(
        admin_client: Client, kb, store, applied) -> None:
    with applied():
        response = upload(kb.admin, kb.dataset.pk, "redis.md", runbook("redis"))
    job = Job.objects.get(pk=response.json()["job"]["id"])

    shown = progress(admin_client, job)
    assert [line["message"] for line in shown["log"]] == [
        "indexing", f"ready, chunks: {kb.dataset.documents.get().chunk_count}"]
    assert kb.admin.get(f"/api/jobs/{job.pk}").json()["log"] == shown["log"]  # the API's too


def test_a_failed_job_says_why_in_its_end_state_and_keeps_its_last_lines(
        admin_client: Client) -> None:
    job = Job.objects.create(kind=Job.Kind.REBUILD)
    for n in range(LOG_LINES + 5):
        job_update(job, done=n, log=f"line {n}")
    stale = Job.objects.get(pk=job.pk)
    job_update(job, log="written by another process")
    job_fail(stale, RuntimeError("dsn=secret"))  # appends to the stored log, not its copy
    shown = progress(admin_client, job)
    assert len(shown["log"]) == LOG_LINES and shown["log"][0]["message"] == "line 7"
    assert [line["message"] for line in shown["log"][-2:]] == [
        "written by another process", f"failed: {GENERIC_ERROR}"]
    assert shown["end"].startswith("Failed after") and shown["end"].endswith(GENERIC_ERROR)
    assert "secret" not in str(shown)


def test_the_pages_are_for_superusers_and_the_jobs_viewers(admin_client: Client,
                                                          client: Client) -> None:
    job = Job.objects.create(kind=Job.Kind.REBUILD)
    progress_url = reverse("admin:datasets_job_progress", args=[job.pk])
    assert client.get(progress_url).status_code == 302  # to the login page
    staff = User.objects.create_user("operator", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse(OPERATIONS)).status_code == 403
    assert client.post(reverse(OPERATIONS), {"operation": "reconcile"}).status_code == 403
    assert client.get(progress_url).status_code == 403
    staff.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_job", "view_indexversion", "change_indexversion"]))
    # A platform job (no tenant) is the superusers'; a job of the staff's tenant is theirs.
    assert client.get(progress_url).status_code == 404
    tenant = Tenant.objects.create(slug="ops")
    tenant.staff.add(staff)
    own = Job.objects.create(kind=Job.Kind.IMPORT, tenant=tenant)
    assert client.get(reverse("admin:datasets_job_progress",
                              args=[own.pk])).json()["status"] == "queued"
    # May view and change index versions, still not a superuser: no operations.
    assert client.get(reverse(OPERATIONS)).status_code == 403
    assert client.post(reverse(OPERATIONS), {"operation": "reconcile"}).status_code == 403
    listed = client.get(reverse("admin:retrieval_indexversion_changelist")).content.decode()
    assert 'id="index-operations-link"' not in listed
    assert admin_client.get(reverse("admin:datasets_job_progress",
                                    args=[own.pk + 1])).status_code == 404
    assert not IndexVersion.objects.exists() and Job.objects.count() == 2
