"""The datasets admin: no secret on any page, lists that do not query per row, a safe upload."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext

from datasets.admin.pages import DocumentUploadForm
from datasets.documents.services import document_store
from datasets.models import Chunk, Dataset, Document, Job, Source, Tenant
from datasets.tenancy.keys import api_key_create
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.builders import markdown, md_file, runbook

pytestmark = pytest.mark.django_db

ADD = "/admin/datasets/document/add/"
DOCUMENTS = "/admin/datasets/document/"
SECRETS = ("hunter2-very-secret", "sk-live0123456789abcdefghijkl")
VAULT = markdown("Vault access", {
    "Login": f"Sign in with password: {SECRETS[0]} and keep it to yourself.",
    "API": f"Call the API with {SECRETS[1]} as the bearer key.",
})


def page_queries(client: Client, url: str) -> int:
    """The queries of one GET of `url`, after a first GET has filled the per-process caches."""
    assert client.get(url).status_code == 200, url
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200, url
    return len(queries)


def assert_flat(client: Client, url: str, add_row: Callable[[int], object]) -> None:
    """The page costs as many queries with 20 rows as with 2: none per row."""
    for n in range(2):
        add_row(n)
    few = page_queries(client, url)
    for n in range(2, 20):
        add_row(n)
    many = page_queries(client, url)
    assert many == few, f"{url}: {few} queries with 2 rows, {many} with 20"


def tenant_dataset(n: int) -> Dataset:
    """A dataset of its own tenant: a list that reads either per row would show it."""
    tenant = Tenant.objects.create(slug=f"t{n}")
    return Dataset.objects.create(tenant=tenant, name=f"ds{n}")


def document(n: int) -> Document:
    return Document.objects.create(dataset=tenant_dataset(n), source_path=f"doc{n}.md",
                                   file_name=f"doc{n}.md", source_text=f"# Doc {n}\n\nText.",
                                   content_hash=str(n))


def job(n: int) -> Job:
    doc = document(n)
    return Job.objects.create(tenant=doc.dataset.tenant, dataset=doc.dataset, document=doc,
                              kind=Job.Kind.INDEX_DOCUMENT)


def chunk(n: int) -> Chunk:
    return Chunk.objects.create(document=document(n), chunk_index=0, content="Text.",
                                breadcrumb=f"Doc {n}")


def api_key(n: int) -> object:
    dataset = tenant_dataset(n)
    return api_key_create(tenant=dataset.tenant, name=f"key{n}", datasets=[dataset])


PAGES: list[tuple[str, Callable[[int], object]]] = [
    (DOCUMENTS, document),
    ("/admin/datasets/job/", job),
    ("/admin/datasets/chunk/", chunk),
    ("/admin/datasets/apikey/", api_key),
    ("/admin/datasets/dataset/", tenant_dataset),
    ("/admin/datasets/tenant/", lambda n: Tenant.objects.create(slug=f"t{n}")),
    # The add forms list every dataset, named with its tenant.
    ("/admin/datasets/apikey/add/", tenant_dataset),
    (ADD, tenant_dataset),
]


@pytest.mark.parametrize(("url", "add_row"), PAGES, ids=[p[0] for p in PAGES])
def test_pages_do_not_query_per_row(admin_client: Client, url: str,
                                    add_row: Callable[[int], object]) -> None:
    assert_flat(admin_client, url, add_row)


def dataset_with_documents(n: int) -> Dataset:
    """Two ready documents (3 + 2 chunks), one pending, one failed, one deleted."""
    dataset = tenant_dataset(n)
    for name, status, chunks, deleted in [("a", "ready", 3, False), ("b", "ready", 2, False),
                                          ("c", "pending", 0, False), ("d", "failed", 0, False),
                                          ("e", "ready", 0, True)]:
        Document.objects.create(dataset=dataset, source_path=f"{name}.md", file_name=f"{name}.md",
                                source_text="# A\n", content_hash=name, status=status,
                                chunk_count=chunks, deleted=deleted)
    return dataset


@BOTH_RUNTIMES
def test_the_datasets_list_counts_documents_and_chunks_without_a_query_per_row(
        runtime: str, admin_client: Client) -> None:
    url = "/admin/datasets/dataset/"
    assert_flat(admin_client, url, dataset_with_documents)
    tenant_dataset(99)  # an empty dataset counts zeros
    html = admin_client.get(url).content.decode()
    cells = re.findall(r'<td class="field-document_count">(.*?)</td>'
                       r'<td class="field-chunk_count">(\d+)</td>', html)
    # The documents, and below those not ready; then the chunks.
    counts = [(" ".join(re.sub(r"<[^>]+>", " ", documents).split()), chunks)
              for documents, chunks in cells]
    assert sorted(counts) == [("0", "0")] + [("4 1 in progress · 1 failed", "5")] * 20


def test_api_key_change_page_does_not_query_per_dataset(admin_client: Client) -> None:
    key, _ = api_key_create(tenant=Tenant.objects.create(slug="acme"))
    assert_flat(admin_client, f"/admin/datasets/apikey/{key.pk}/change/",
                lambda n: key.datasets.add(tenant_dataset(n)))


SAVE_BUTTONS = ('name="_save"', 'name="_continue"', 'name="_addanother"')


def assert_read_only_page(client: Client, url: str) -> None:
    """Shown, with a Close button and none of the Save buttons."""
    response = client.get(url)
    assert response.status_code == 200, url
    html = response.content.decode()
    assert [button for button in SAVE_BUTTONS if button in html] == [], url
    assert ">Close</a>" in html, url


def synced_document(n: int) -> Document:
    row = document(n)
    row.source = Source.objects.create(dataset=row.dataset, name=f"s{n}",
                                       kind=Source.Kind.FOLDER, location=f"/nowhere/{n}")
    row.save(update_fields=["source"])
    return row


READ_ONLY: list[tuple[str, Callable[[int], Any]]] = [
    ("/admin/datasets/job/", job), ("/admin/datasets/chunk/", chunk),
    (DOCUMENTS, synced_document)]


@BOTH_RUNTIMES
@pytest.mark.parametrize(("url", "add_row"), READ_ONLY, ids=[p[0] for p in READ_ONLY])
def test_read_only_pages_show_no_save_button(runtime: str, admin_client: Client, url: str,
                                             add_row: Callable[[int], Any]) -> None:
    assert_read_only_page(admin_client, f"{url}{add_row(1).pk}/change/")


def test_an_uploaded_documents_page_edits_its_readers_and_nothing_else(
        admin_client: Client) -> None:
    row = document(1)
    page = admin_client.get(f"{DOCUMENTS}{row.pk}/change/").content.decode()
    assert 'name="_save"' in page and 'name="readers"' in page
    assert 'name="title"' not in page  # every other field is shown, not edited
    response = admin_client.post(f"{DOCUMENTS}{row.pk}/change/", {
        "readers": "Group:SRE, user:alice@example.com", "title": "forged"})
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.readers, row.title) == (["group:sre", "user:alice@example.com"], "")
    refused = admin_client.post(f"{DOCUMENTS}{row.pk}/change/", {"readers": "sre"})
    assert refused.status_code == 200 and "no principal" in refused.content.decode()
    synced = synced_document(2)
    forged = admin_client.post(f"{DOCUMENTS}{synced.pk}/change/", {"readers": "group:x"})
    assert forged.status_code in (302, 403)
    synced.refresh_from_db()
    assert synced.readers == []  # a synced document's readers are its source's


def test_a_job_cannot_be_changed_by_a_post(admin_client: Client) -> None:
    row = job(1)
    response = admin_client.post(f"/admin/datasets/job/{row.pk}/change/", {"status": "failed"})
    assert response.status_code == 403
    assert Job.objects.get(pk=row.pk).status == Job.Status.QUEUED


# --- secrets ---------------------------------------------------------------------------------


def upload(client: Client, dataset: Dataset, name: str, raw: bytes) -> Any:
    return client.post(ADD, {"dataset": dataset.pk, "upload": md_file(name, raw)}, follow=True)


def assert_no_secret(html: str) -> None:
    for secret in SECRETS:
        assert secret not in html
    assert "password: [REDACTED]" in html


def test_uploaded_secrets_are_neither_stored_nor_shown_and_chunks_match(
        admin_client: Client, kb: Any, store: Any, applied: Any) -> None:
    with applied():  # the upload, then its indexing, as the worker would run it
        response = upload(admin_client, kb.dataset, "vault.md", VAULT)
    assert response.status_code == 200
    doc = Document.objects.get()
    assert doc.status == Document.Status.READY and doc.chunk_count == 2
    for secret in SECRETS:
        assert secret not in doc.source_text
    page = admin_client.get(f"{DOCUMENTS}{doc.pk}/change/").content.decode()
    assert_no_secret(page)

    chunks = list(doc.chunks.all())
    assert [c.content for c in chunks if "[REDACTED]" in c.content] == [c.content for c in chunks]
    shown = "".join(admin_client.get(f"/admin/datasets/chunk/{c.pk}/change/").content.decode()
                    for c in chunks)
    assert_no_secret(shown)
    # Redacted the same way: each chunk's text is in the stored source as the admin shows it.
    for c in chunks:
        assert c.content in doc.source_text


def test_a_row_stored_before_redaction_is_shown_redacted(admin_client: Client) -> None:
    doc = document(1)
    Document.objects.filter(pk=doc.pk).update(source_text=VAULT.decode())
    assert_no_secret(admin_client.get(f"{DOCUMENTS}{doc.pk}/change/").content.decode())


def test_a_frontmatter_secret_is_not_shown(admin_client: Client) -> None:
    doc = document(1)
    raw = markdown("Vault", {"Login": "Ask the team."}, api_key=SECRETS[1])
    Document.objects.filter(pk=doc.pk).update(source_text=raw.decode())
    page = admin_client.get(f"{DOCUMENTS}{doc.pk}/change/").content.decode()
    assert SECRETS[1] not in page and "Ask the team." in page


def test_a_frontmatter_secret_is_not_stored(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    upload(admin_client, dataset, "vault.md",
           markdown("Vault", {"Login": "Ask the team."}, api_key=SECRETS[1]))
    assert SECRETS[1] not in Document.objects.get().source_text


# --- the upload form -------------------------------------------------------------------------


def nothing_written() -> bool:
    return not (Document.objects.exists() or Job.objects.exists() or Chunk.objects.exists())


def test_validating_an_upload_writes_nothing() -> None:
    dataset = tenant_dataset(1)
    form = DocumentUploadForm(data={"dataset": dataset.pk},
                              files={"upload": md_file("redis.md", runbook("redis"))})
    assert form.is_valid(), form.errors
    assert nothing_written()


def test_invalid_upload_shows_the_error_and_writes_nothing(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    response = upload(admin_client, dataset, "gbk.md", "# 标题\n\n正文。\n".encode("gbk"))
    assert response.status_code == 200 and response.redirect_chain == []
    assert "not valid UTF-8" in response.content.decode()
    assert nothing_written()


def test_duplicate_name_with_other_content_is_refused(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    upload(admin_client, dataset, "redis.md", runbook("redis"))
    before = list(Document.objects.values()), list(Job.objects.values())

    response = upload(admin_client, dataset, "redis.md", runbook("kafka"))

    assert response.redirect_chain == []
    assert "already exists in this dataset" in response.content.decode()
    assert (list(Document.objects.values()), list(Job.objects.values())) == before
    assert not Chunk.objects.exists()


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@BOTH_RUNTIMES
def test_an_upload_says_once_what_happened_to_which_document(runtime: str,
                                                             admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    response = upload(admin_client, dataset, "redis.md", runbook("redis"))
    doc, job = Document.objects.get(), Job.objects.get()
    link = f'“<a href="{DOCUMENTS}{doc.pk}/change/">redis.md</a>” (redis runbook)'
    assert messages_of(response) == [  # the job's page follows the indexing
        f"Added {link} to t1/ds1: queued for indexing (<a href=\"/admin/datasets/job/{job.pk}"
        f"/change/\">job {job.pk}</a>)."]

    # Not indexed yet (no worker ran): the same bytes again queue the indexing again.
    response = upload(admin_client, dataset, "redis.md", runbook("redis"))
    again = Job.objects.latest("pk")
    assert again != job and messages_of(response) == [
        f"{link} is unchanged, but was not indexed yet: indexing queued again (<a href=\""
        f"/admin/datasets/job/{again.pk}/change/\">job {again.pk}</a>)."]

    # Indexed: nothing to do, nothing queued.
    Document.objects.filter(pk=doc.pk).update(status=Document.Status.READY,
                                              synced_revision=F("revision"))
    response = upload(admin_client, dataset, "redis.md", runbook("redis"))
    assert messages_of(response) == [f"{link} is unchanged and already indexed: nothing to do."]
    assert Job.objects.count() == 2


def test_save_and_continue_after_an_upload_opens_the_document(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    response = admin_client.post(ADD, {"dataset": dataset.pk, "_continue": "1",
                                       "upload": md_file("redis.md", runbook("redis"))})
    assert response["Location"] == f"{DOCUMENTS}{Document.objects.get().pk}/change/"


def test_valid_upload_writes_one_document_and_one_job(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    response = upload(admin_client, dataset, "redis.md", runbook("redis"))
    assert response.redirect_chain and response.redirect_chain[-1][1] == 302
    doc = Document.objects.get()
    assert (doc.dataset, doc.source_path, doc.status) == (dataset, "redis.md", "pending")
    assert Job.objects.get().document == doc
    # One message, naming (and linking) the stored document.
    [message] = messages_of(response)
    assert f'{DOCUMENTS}{doc.pk}/change/">redis.md</a>' in message


def test_unchanged_reupload_says_so_and_queues_nothing(admin_client: Client, kb: Any,
                                                       ingest: Any) -> None:
    doc = ingest(kb.dataset, "redis.md", runbook("redis"))
    jobs = Job.objects.count()
    response = upload(admin_client, kb.dataset, "redis.md", runbook("redis"))
    assert messages_of(response) == [
        f'“<a href="{DOCUMENTS}{doc.pk}/change/">redis.md</a>” (redis runbook) is unchanged '
        "and already indexed: nothing to do."]
    assert Job.objects.count() == jobs
    assert list(Document.objects.all()) == [doc]


# --- actions ---------------------------------------------------------------------------------


def act(client: Client, action: str, doc: Document) -> None:
    response = client.post(DOCUMENTS, {"action": action, "_selected_action": [doc.pk]})
    assert response.status_code == 302


def test_document_actions(admin_client: Client) -> None:
    dataset = tenant_dataset(1)
    doc = document_store(dataset=dataset, file_name="redis.md", raw=runbook("redis"),
                         max_bytes=settings.KB_MAX_UPLOAD_BYTES).document
    Chunk.objects.create(document=doc, chunk_index=0, content="Text.")
    choices = dict(admin_client.get(DOCUMENTS).context["action_form"].fields["action"].choices)
    assert "delete_selected" not in choices  # it would leave the chunks in Milvus

    act(admin_client, "deactivate", doc)
    assert not Document.objects.get(pk=doc.pk).activated
    act(admin_client, "activate", doc)
    assert Document.objects.get(pk=doc.pk).activated

    Document.objects.filter(pk=doc.pk).update(status=Document.Status.FAILED, error="boom")
    act(admin_client, "reindex", doc)
    reindexed = Document.objects.get(pk=doc.pk)
    assert (reindexed.status, reindexed.error) == (Document.Status.PENDING, "")
    assert Job.objects.filter(document=doc).count() == 2

    act(admin_client, "delete_documents", doc)
    deleted = Document.objects.get(pk=doc.pk)
    assert deleted.deleted and not deleted.activated and not Chunk.objects.exists()


def test_the_delete_page_does_not_bypass_the_delete_action(admin_client: Client) -> None:
    doc = document(1)
    url = f"{DOCUMENTS}{doc.pk}/delete/"
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Document.objects.filter(pk=doc.pk, deleted=False).exists()


def test_staff_with_view_permission_only_runs_no_action(client: Client) -> None:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_document"))
    client.force_login(user)
    doc = document(1)
    assert client.get(DOCUMENTS).status_code == 200
    client.post(DOCUMENTS, {"action": "deactivate", "_selected_action": [doc.pk]})
    assert Document.objects.get(pk=doc.pk).activated


def test_sync_now_is_a_button_on_the_sources_page_for_the_users_tenants(client: Client) -> None:
    """It was only an action of the list: the page of the source one looks at had none."""
    mine, theirs = (Source.objects.create(dataset=tenant_dataset(n), name="handbook",
                                          kind=Source.Kind.GIT,
                                          location="https://git.example.com/handbook.git")
                    for n in range(2))
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="_source"))
    mine.dataset.tenant.staff.add(staff)
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(staff)
    page = csrf.get(f"/admin/datasets/source/{mine.pk}/change/").content.decode()
    [action] = re.findall(r'<form method="post" action="([^"]+)" id="source-sync">', page)
    assert action == f"/admin/datasets/source/{mine.pk}/sync/"
    assert csrf.post(action).status_code == 403  # no CSRF token

    synced = csrf.post(action, {"csrfmiddlewaretoken": csrf.cookies["csrftoken"].value})

    job = Job.objects.get(source=mine, kind=Job.Kind.SYNC_SOURCE)
    assert synced["Location"] == f"/admin/datasets/job/{job.pk}/change/"  # it follows the sync
    token = {"csrfmiddlewaretoken": csrf.cookies["csrftoken"].value}
    again = csrf.post(action, token, follow=True)  # while that job is queued: refused
    assert "already queued or running" in again.content.decode()
    assert Job.objects.filter(source=mine).count() == 1
    other = csrf.post(f"/admin/datasets/source/{theirs.pk}/sync/", token, follow=True)
    assert other.redirect_chain[-1][0] == "/admin/"  # as a source that does not exist
    assert not Job.objects.filter(source=theirs).exists()
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_source"))
    mine.dataset.tenant.staff.add(viewer)
    client.force_login(viewer)
    assert 'id="source-sync"' not in client.get(
        f"/admin/datasets/source/{mine.pk}/change/").content.decode()
    assert client.post(action).status_code == 403
