"""Documents in every format, end to end on each runtime (a real Celery worker on the services,
in-process tasks on the embedded defaults): the upload keeps the original, the worker converts
and indexes it, a lookup finds it with its page, slide or sheet; a failed conversion fails the
document with its reason; the admin offers the original to its tenant's staff only; a deleted
document's original is gone; a rebuild converts again what an older converter made."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.storage import default_storage
from django.test import Client

from datasets.ingestion.formats import CONVERTER_VERSION
from datasets.models import Document, Job, Tenant
from retrieval.index.rebuild import rebuild_hybrid_knowledge
from tests.conftest import wait_until
from tests.datasets.admin.test_scope import staff_of
from tests.datasets.builders import lookup, md_file, upload
from tests.datasets.ingestion.formats.markup import assert_text_and_safe_links
from tests.datasets.ingestion.office_files import pdf_pages, pptx_slides, xlsx_sheets

pytestmark = pytest.mark.django_db(transaction=True)

NOTES = (b"Zookeeper session expiry\n\nClients log SessionExpiredException and ephemeral nodes "
         b"vanish after long GC pauses. Check zkServer.sh status on every node.\n")


@pytest.fixture
def worker(request: pytest.FixtureRequest, store: Any) -> None:
    """The indexing worker of the runtime: a Celery worker process on the services; on the
    embedded defaults tasks run in-process when the upload commits."""
    if settings.MILVUS_URI.startswith("http"):
        request.getfixturevalue("celery_worker")


def finished(kb: Any, response: Any) -> dict[str, Any]:
    """The upload's job once it has ended."""
    assert response.status_code == 202, response.content
    url = f"/api/jobs/{response.json()['job']['id']}"
    wait_until(lambda: kb.admin.get(url).json()["status"] in ("succeeded", "failed"),
               what="the upload's job")
    job: dict[str, Any] = kb.admin.get(url).json()
    return job


def test_a_text_file_is_converted_by_the_worker_found_and_its_original_kept(
        kb: Any, worker: None, client: Client, admin_client: Client) -> None:
    response = upload(kb.admin, kb.dataset.pk, "zookeeper.txt", NOTES)

    assert response.json()["document"]["format"] == "txt"
    job = finished(kb, response)
    assert job["status"] == "succeeded", job
    assert "converting the txt file" in [line["message"] for line in job["log"]]
    document = Document.objects.get()
    assert document.status == Document.Status.READY and document.chunk_count >= 1
    assert (document.format, document.converter_version) == ("txt", CONVERTER_VERSION)
    assert "SessionExpiredException" in document.source_text
    assert default_storage.open(document.original).read() == NOTES
    answer = lookup(kb.tool, "zookeeper SessionExpiredException")
    assert answer["evidence"][0]["document_id"].startswith(f"{document.doc_id}#")
    assert answer["evidence"][0]["location"] is None  # a text file has no pages

    # The same bytes again change nothing.
    again = upload(kb.admin, kb.dataset.pk, "zookeeper.txt", NOTES)
    assert again.status_code == 200 and again.json()["job"] is None

    # The admin offers the original, as uploaded, to superusers and the tenant's staff...
    url = f"/admin/datasets/document/{document.pk}/original/"
    page = admin_client.get(f"/admin/datasets/document/{document.pk}/change/").content.decode()
    assert url in page and "SessionExpiredException" in page  # the converted text beside it
    download = admin_client.get(url)
    assert download.status_code == 200 and b"".join(download.streaming_content) == NOTES
    assert download["Content-Type"] == "application/octet-stream"
    assert "attachment" in download["Content-Disposition"]
    staff_of(client, kb.tenant)
    assert client.get(url).status_code == 200
    # ... and to no staff of another tenant.
    other = Client()
    staff_of(other, Tenant.objects.create(slug="globex"), name="other")
    assert other.get(url).status_code == 404
    assert Client().get(url).status_code == 302  # to the admin's login

    # Deleted: the original goes with the document.
    name = document.original
    assert kb.admin.delete(f"/api/documents/{document.doc_id}").status_code == 204
    assert not default_storage.exists(name)
    assert admin_client.get(url).status_code == 404


@pytest.mark.parametrize(("name", "make", "query", "location", "crumb"), [
    # Pages long enough to be chunks of their own (a short document is one chunk).
    ("incident.pdf", lambda: pdf_pages([
        "Redis memory full\n\n" + "The instance answers OOM command not allowed when used "
        "memory exceeds maxmemory; check the eviction policy and the biggest keys first. " * 12,
        "Kafka consumer lag\n\n" + "The consumer group falls behind: records-lag-max grows "
        "while the partitions rebalance over and over after each poll timeout. " * 12
        + "\n\nRaise max.poll.interval.ms above the longest batch processing time.",
        "磁盘空间不足\n\n" + "日志目录写满以后，服务无法写入新的数据，需要清理旧的日志文件。" * 6]),
     "raise max.poll.interval.ms above the longest batch processing time", {"page": 2},
     "p. 2"),
    ("review.pptx", lambda: pptx_slides([
        ("Quarterly review", "Availability was 99.95 % over the quarter."),
        ("Nginx 502 errors", "The upstream connection was refused while php-fpm restarted; "
                             "raise the pool size and add a health check.")]),
     "nginx 502 upstream connection refused php-fpm", {"slide": 2}, "slide 2"),
    ("inventory.xlsx", lambda: xlsx_sheets({
        "Servers": [["host", "role"], ["db-01", "MySQL primary"], ["db-02", "MySQL replica"]],
        "Certificates": [["domain", "expires", "owner"],
                         ["shop.example.com", "2027-03-01", "TLS certificate renewal team"]]}),
     "shop.example.com TLS certificate expires", {"sheet": "Certificates"},
     "sheet Certificates"),
])
def test_a_page_slide_or_sheet_is_in_the_evidence(kb: Any, worker: None, name: str,
                                                  make: Any, query: str,
                                                  location: dict[str, Any], crumb: str) -> None:
    job = finished(kb, upload(kb.admin, kb.dataset.pk, name, make()))

    assert job["status"] == "succeeded", job
    document = Document.objects.get()
    assert document.status == Document.Status.READY and document.chunk_count >= 1
    assert "<!-- kb:" not in "".join(document.chunks.values_list("content", flat=True))
    answer = lookup(kb.tool, query)
    first = answer["evidence"][0]
    assert first["document_id"].startswith(f"{document.doc_id}#"), answer
    assert first["location"] == location
    assert first["breadcrumb"].startswith(crumb)
    assert "<!-- kb:" not in first["excerpt"]
    assert first["lines"] is None  # a converted file's lines are not the original's
    change = f"/admin/datasets/document/{document.pk}/change/"
    if location.get("page"):  # a PDF's page, in the browser's PDF viewer
        original = f"/admin/datasets/document/{document.pk}/original/"
        assert first["url"] == f"{original}#page={location['page']}"
        admin = Client()
        admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
        shown = admin.get(original)
        assert (shown["Content-Type"], shown["X-Content-Type-Options"]) == (
            "application/pdf", "nosniff")
        assert "attachment" not in shown.get("Content-Disposition", "")
    else:
        assert first["url"] == change


def test_a_failed_conversion_fails_the_document_with_its_reason(kb: Any, worker: None) -> None:
    truncated = pdf_pages(["Redis memory full: the instance answers OOM."])[:400]

    response = upload(kb.admin, kb.dataset.pk, "broken.pdf", truncated)

    if response.status_code == 415:  # the sniff already saw it: refused at the door
        assert Document.objects.count() == 0
        return
    job = finished(kb, response)
    assert job["status"] == "failed" and job["error"], job
    document = Document.objects.get()
    assert document.status == Document.Status.FAILED and document.error == job["error"]
    assert document.chunk_count == 0 and not document.chunks.exists()
    assert lookup(kb.tool, "redis memory full OOM")["evidence"] == []


def test_a_pages_scripts_and_unsafe_links_reach_no_excerpt(kb: Any, worker: None) -> None:
    page = (b"<html><head><title>Gateway runbook</title></head><body><main>"
            b"<h1>Gateway runbook</h1><p>Restart the payment gateway when its error rate stays "
            b"above five percent. See <a href='JaVaScRiPt:alert(1)'>the dashboard</a>, "
            b"<a href='java&#x09;script:alert(2)'>the runbook</a> and "
            b"<a href='https://status.example.com/gateway'>the status page</a>.</p>"
            b"<p>Never paste &lt;script&gt;alert(3)&lt;/script&gt; into the gateway console."
            b"</p><script>alert(4)</script><noscript>alert(5)</noscript></main></body></html>")

    job = finished(kb, upload(kb.admin, kb.dataset.pk, "gateway.html", page))

    assert job["status"] == "succeeded", job
    contents = list(Document.objects.get().chunks.values_list("content", flat=True))
    excerpts = [item["excerpt"] for item in
                lookup(kb.tool, "payment gateway error rate restart")["evidence"]]
    assert excerpts and "the dashboard" in "".join(contents)
    for text in contents + excerpts:
        assert_text_and_safe_links(text)
        assert "javascript" not in text.lower() and "alert(4)" not in text
    assert "https://status.example.com/gateway" in "".join(contents)


def test_a_rebuild_converts_again_what_an_older_converter_made(kb: Any, worker: None) -> None:
    finished(kb, upload(kb.admin, kb.dataset.pk, "zookeeper.txt", NOTES))
    document = Document.objects.get()
    # As an older converter left it: other text, another version.
    Document.objects.filter(pk=document.pk).update(source_text="Kafka broker notes.\n",
                                                   converter_version="0-older")

    rebuild_hybrid_knowledge()

    document.refresh_from_db()
    assert document.converter_version == CONVERTER_VERSION
    assert "SessionExpiredException" in document.source_text
    assert document.status == Document.Status.READY
    answer = lookup(kb.tool, "zookeeper SessionExpiredException")
    assert answer["evidence"][0]["document_id"].startswith(f"{document.doc_id}#")


def test_the_admin_upload_takes_every_format(kb: Any, worker: None,
                                             admin_client: Client) -> None:
    response = admin_client.post("/admin/datasets/document/add/", {
        "dataset": kb.dataset.pk, "upload": md_file("zookeeper.txt", NOTES, "text/plain")},
        follow=True)

    assert response.status_code == 200
    wait_until(lambda: Job.objects.filter(status__in=("succeeded", "failed")).exists(),
               what="the upload's job")
    document = Document.objects.get()
    assert document.format == "txt" and document.status == Document.Status.READY
