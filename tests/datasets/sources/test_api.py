"""Sources over the API, the admin, the command and the schedule: keys and staff see their
datasets' sources only; a sync is a job; a second one while it runs is refused."""

from __future__ import annotations

import io
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from datasets.documents.services import dataset_create
from datasets.models import Document, Job, Source, Tenant
from datasets.sources.services import sources_sync_due
from kbplatform.env import SourceRoot
from kbplatform.tasks import recover_periodically
from tests.conftest import wait_until
from tests.datasets.builders import api_client
from tests.datasets.sources.builders import Repo, doc, make_source

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


@pytest.fixture
def repo(settings, tmp_path):
    settings.KB_SOURCE_ROOTS = (SourceRoot(tmp_path / "roots"),)  # roots/<tenant slug>/
    settings.VAR_DIR = tmp_path / "var"
    made = Repo(tmp_path / "roots" / "acme" / "repo")
    made.write({"a.md": doc("Alpha"), "b.md": doc("Beta")})
    made.commit()
    return made


def test_create_sync_read_update_delete(kb, store, repo, settings) -> None:
    created = kb.admin.post("/api/sources", {
        "dataset_id": kb.dataset.pk, "name": "handbook", "kind": "git",
        "location": str(repo.path), "interval_minutes": 60}, format="json")
    assert created.status_code == 201, created.content
    source_id = created.json()["id"]

    synced = kb.admin.post(f"/api/sources/{source_id}/sync")
    assert synced.status_code == 202
    job = synced.json()
    assert (job["kind"], job["status"], job["detail"]["added"]) == ("sync_source", "succeeded", 2)
    assert kb.admin.get(f"/api/jobs/{job['id']}").json()["status"] == "succeeded"
    body = kb.admin.get(f"/api/sources/{source_id}").json()
    assert body["last_status"] == "succeeded" and len(body["last_revision"]) == 40
    documents = kb.admin.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"]
    assert {d["source_commit"] for d in documents} == {body["last_revision"]}
    assert {d["source_id"] for d in documents} == {source_id}

    changed = kb.admin.patch(f"/api/sources/{source_id}", {"include": ["a.md"], "name": "x"},
                             format="json")
    assert changed.status_code == 200 and changed.json()["name"] == "handbook"
    kb.admin.post(f"/api/sources/{source_id}/sync")
    assert [d.source_path for d in Document.objects.filter(deleted=False)] == ["handbook/a.md"]

    cache = settings.VAR_DIR / "sources" / "git" / str(source_id)
    assert (cache / "HEAD").exists()
    assert kb.admin.delete(f"/api/sources/{source_id}").status_code == 204
    assert not cache.exists()
    assert not Source.objects.exists()
    assert not Document.objects.filter(deleted=False).exists()


def test_evidence_names_the_commit_of_a_git_document(kb, store, repo) -> None:
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    kb.admin.post(f"/api/sources/{source.pk}/sync")
    source.refresh_from_db()

    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "All about Alpha"},
                          format="json").json()

    assert answer["evidence"] and answer["evidence"][0]["source"] == "src/a.md"
    assert answer["evidence"][0]["commit"] == source.last_revision


def test_invalid_and_refused_sources_are_400(kb, repo) -> None:
    for body, code in (({"kind": "git", "location": "ext::sh -c id"}, "invalid_source"),
                       ({"kind": "web", "location": "http://10.1.2.3/"}, "invalid_source"),
                       ({"kind": "folder", "location": "/etc"}, "invalid_source"),
                       ({"kind": "git", "location": str(repo.path), "branch": "--upload-pack=x"},
                        "invalid_source"),
                       ({"kind": "ftp", "location": "ftp://x/"}, "invalid")):
        answer = kb.admin.post("/api/sources", {"dataset_id": kb.dataset.pk, "name": "s",
                                                **body}, format="json")
        assert (answer.status_code, answer.json()["code"]) == (400, code), body


def test_a_sync_while_one_is_queued_is_409(kb, repo) -> None:
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    queued = Job.objects.create(kind=Job.Kind.SYNC_SOURCE, tenant=kb.tenant, dataset=kb.dataset,
                                source=source)

    answer = kb.admin.post(f"/api/sources/{source.pk}/sync")

    assert answer.status_code == 409
    assert answer.json()["code"] == "operation_running"
    assert answer.json()["extra"] == {"job_id": queued.pk}
    assert kb.admin.delete(f"/api/sources/{source.pk}").status_code == 409


def test_keys_see_their_datasets_sources_only(kb, repo, make_key) -> None:
    other = dataset_create(tenant=kb.tenant, name="other")
    mine = make_source(kb.dataset, kind="git", location=str(repo.path))
    theirs = make_source(other, kind="git", location=str(repo.path))
    _, scoped = make_key(role="admin", datasets=(kb.dataset,))
    _, stranger = make_key(tenant="globex", role="admin")
    scoped_client, stranger_client = api_client(scoped), api_client(stranger)

    assert [s["id"] for s in scoped_client.get("/api/sources").json()["sources"]] == [mine.pk]
    assert scoped_client.get(f"/api/sources/{theirs.pk}").status_code == 404
    assert scoped_client.post(f"/api/sources/{theirs.pk}/sync").status_code == 404
    assert stranger_client.get("/api/sources").json()["sources"] == []
    assert stranger_client.delete(f"/api/sources/{mine.pk}").status_code == 404
    assert stranger_client.post("/api/sources", {
        "dataset_id": kb.dataset.pk, "name": "s", "kind": "git",
        "location": str(repo.path)}, format="json").status_code == 404
    assert kb.tool.get("/api/sources").status_code == 403
    assert kb.tool.post(f"/api/sources/{mine.pk}/sync").status_code == 403


def test_the_schedule_enqueues_due_sources_only(kb, store, repo) -> None:
    due = make_source(kb.dataset, kind="git", location=str(repo.path), name="due",
                      interval_minutes=30)
    recent = make_source(kb.dataset, kind="git", location=str(repo.path), name="recent",
                         interval_minutes=30)
    make_source(kb.dataset, kind="git", location=str(repo.path), name="manual")
    Source.objects.filter(pk=recent.pk).update(last_sync_at=timezone.now())
    Source.objects.filter(pk=due.pk).update(last_sync_at=timezone.now() - timedelta(hours=1))

    jobs = sources_sync_due()

    assert [job.source_id for job in jobs] == [due.pk]
    due.refresh_from_db()
    assert due.last_status == "succeeded" and sources_sync_due() == []


def test_the_periodic_loop_syncs_a_scheduled_source(kb, store, repo, settings) -> None:
    # What the worker (and the embedded web process) runs: the recovery, then the due syncs.
    settings.KB_RECOVERY_INTERVAL_SECONDS = 1
    source = make_source(kb.dataset, kind="git", location=str(repo.path), interval_minutes=1)
    stop = threading.Event()
    thread = recover_periodically(stop)
    try:
        wait_until(lambda: Source.objects.get(pk=source.pk).last_status == "succeeded",
                   timeout=60, what="the scheduled sync")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert Job.objects.filter(source=source, kind=Job.Kind.SYNC_SOURCE).count() == 1
    assert Document.objects.filter(source=source, deleted=False).count() == 2


def test_the_command_syncs_and_prints_the_log(kb, store, repo) -> None:
    source = make_source(kb.dataset, kind="git", location=str(repo.path))
    out = io.StringIO()

    call_command("sync_source", str(source.pk), stdout=out)

    assert "added: a.md" in out.getvalue() and "done: 2 added" in out.getvalue()
    repo.git("branch", "-m", "main", "trunk")  # the branch the source follows is gone
    with pytest.raises(CommandError, match="could not fetch the branch"):
        call_command("sync_source", str(source.pk), stdout=io.StringIO())


def test_sync_now_in_the_admin_is_a_post_with_csrf_for_the_users_tenants(
        kb, store, repo) -> None:
    other = dataset_create(tenant=Tenant.objects.create(slug="globex"), name="theirs")
    mine = make_source(kb.dataset, kind="git", location=str(repo.path))
    theirs = make_source(other, kind="web", location="https://example.org/")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="_source"))
    kb.tenant.staff.add(staff)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    page = client.get("/admin/datasets/source/")
    assert page.status_code == 200
    assert mine.location in page.content.decode() and "globex" not in page.content.decode()
    body = {"action": "sync_now", "_selected_action": [mine.pk, theirs.pk]}

    assert client.post("/admin/datasets/source/", body).status_code == 403  # no CSRF token
    client.get("/admin/datasets/source/")
    token = client.cookies["csrftoken"].value
    client.post("/admin/datasets/source/", {**body, "csrfmiddlewaretoken": token})

    assert Job.objects.filter(source=mine, kind=Job.Kind.SYNC_SOURCE).count() == 1
    assert not Job.objects.filter(source=theirs).exists()


def test_the_admin_form_refuses_what_the_api_refuses_beside_the_field(
        kb, repo, admin_client, settings, tmp_path) -> None:
    settings.KB_MAX_UPLOAD_BYTES = 100_000
    (tmp_path / "roots" / "globex").mkdir(parents=True)
    form = {"dataset": kb.dataset.pk, "name": "handbook", "kind": "web",
            "location": "https://example.org/", "branch": "main", "subfolder": "",
            "include": "[]", "max_depth": 2, "max_pages": 10, "max_page_bytes": 2**31 - 1,
            "interval_minutes": ""}

    page = admin_client.post("/admin/datasets/source/add/", form).content.decode()
    assert "at most KB_MAX_UPLOAD_BYTES (100000)" in page
    page = admin_client.post("/admin/datasets/source/add/", {
        **form, "kind": "folder", "max_page_bytes": 4096,
        "location": str(tmp_path / "roots" / "globex")}).content.decode()
    assert f"inside this tenant&#x27;s source folders: {tmp_path}/roots/acme" in page
    assert not Source.objects.exists()
    answer = admin_client.post("/admin/datasets/source/add/", {**form, "max_page_bytes": 4096})
    assert answer.status_code == 302 and Source.objects.get().max_page_bytes == 4096
