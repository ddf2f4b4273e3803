"""What the admin shows of documents and chunks: previews, a document's chunks, filters."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils.html import escape

from datasets.admin.display import CHUNKS_SHOWN, PREVIEW_CHARS
from datasets.models import Chunk, Dataset, Document, Tenant
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.admin.test_pages import DOCUMENTS, assert_flat, document

pytestmark = pytest.mark.django_db

CHUNKS = "/admin/datasets/chunk/"
LONG_LINE = "x" * 3000  # one line longer than any screen


def with_chunks(dataset: Dataset, path: str, n: int, title: str = "") -> Document:
    doc = Document.objects.create(dataset=dataset, source_path=path, file_name=path,
                                  title=title or path, source_text=f"# {path}\n\n{LONG_LINE}\n",
                                  content_hash=path, chunk_count=n)
    Chunk.objects.bulk_create(
        Chunk(document=doc, chunk_index=i, breadcrumb=f"{path} > part {i}",
              content=f"Part {i} of {path}. " + "word " * 100) for i in range(n))
    return doc


def shown_chunks(client: Client, query: str = "") -> list[str]:
    response = client.get(f"{CHUNKS}{query}")
    assert response.status_code == 200
    return [str(chunk) for chunk in response.context["cl"].result_list]


@pytest.fixture
def two_tenants() -> tuple[Document, Document, Document]:
    acme = Tenant.objects.create(slug="acme")
    ops, dev = (Dataset.objects.create(tenant=acme, name=n) for n in ("ops", "dev"))
    other = Dataset.objects.create(tenant=Tenant.objects.create(slug="other"), name="ops")
    return (with_chunks(ops, "redis.md", 2, title="Redis runbook"),
            with_chunks(dev, "kafka.md", 1), with_chunks(other, "mysql.md", 1))


@BOTH_RUNTIMES
def test_chunk_list_previews_and_filters_by_dataset_tenant_and_document(
        runtime: str, admin_client: Client,
        two_tenants: tuple[Document, Document, Document]) -> None:
    redis, kafka, mysql = two_tenants
    page = admin_client.get(CHUNKS).content.decode()
    assert "Part 0 of redis.md. word word" in page  # the preview column
    assert f'<td class="field-chars">{len(redis.chunks.get(chunk_index=0).content)}</td>' in page
    assert re.search(r'<td class="field-document_of">.*?title="acme/ops"', page)  # its dataset

    def keys(*docs: Document) -> set[str]:
        return {str(c) for d in docs for c in d.chunks.all()}

    assert set(shown_chunks(admin_client, f"?document__dataset__id__exact={redis.dataset_id}")
               ) == keys(redis)
    tenant = redis.dataset.tenant_id
    assert set(shown_chunks(admin_client, f"?document__dataset__tenant__id__exact={tenant}")
               ) == keys(redis, kafka)
    assert set(shown_chunks(admin_client, "?q=kafka.md")) == keys(kafka)
    assert set(shown_chunks(admin_client, "?q=Redis+runbook")) == keys(redis)
    assert set(shown_chunks(admin_client, f"?q={mysql.doc_id}")) == keys(mysql)

    # One document's chunks: the filter names it, and lists no other document.
    response = admin_client.get(f"{CHUNKS}?document__id__exact={kafka.pk}")
    assert {str(c) for c in response.context["cl"].result_list} == keys(kafka)
    sidebar = response.content.decode().split('id="changelist-filter"')[1]
    assert "kafka.md" in sidebar and "redis.md" not in sidebar
    assert "kafka.md" not in admin_client.get(CHUNKS).content.decode().split(
        'id="changelist-filter"')[1]  # no document choice list when it does not apply
    assert shown_chunks(admin_client, "?document__id__exact=nope") == []
    assert shown_chunks(admin_client, f"?document__id__exact={mysql.pk + 100}") == []


def test_a_chunk_preview_is_short_and_shows_no_secret(admin_client: Client) -> None:
    doc = document(1)
    Chunk.objects.create(document=doc, chunk_index=0,
                         content="Use password: hunter2-very-secret\n\nthen " + "more " * 200)
    page = admin_client.get(CHUNKS).content.decode()
    [cell] = re.findall(r'<td class="field-text_preview">(.*?)</td>', page, re.S)
    [shown] = re.findall(r'<span class="kb-cut" title="([^"]*)"[^>]*>\1</span>', cell)
    assert "hunter2" not in cell and shown.startswith("Use password: [REDACTED] then more")
    assert len(shown) <= PREVIEW_CHARS


@BOTH_RUNTIMES
def test_a_document_page_shows_its_source_in_a_box_and_its_chunks(
        runtime: str, admin_client: Client,
        two_tenants: tuple[Document, Document, Document]) -> None:
    redis = two_tenants[0]
    page = admin_client.get(f"{DOCUMENTS}{redis.pk}/change/").content.decode()
    box = re.search(r'<pre class="kb-source" style="([^"]*)">', page)
    assert box and all(rule in box.group(1)
                       for rule in ["max-height:", "overflow: auto", "white-space: pre-wrap"])
    assert LONG_LINE in page
    assert "<h1>View document</h1>" in page  # nothing on it is edited

    table = page.split('id="document-chunks"')[1].split("</table>")[0]
    for chunk in redis.chunks.all():
        assert f'/admin/datasets/chunk/{chunk.pk}/change/">{chunk.chunk_index}</a>' in table
        assert f"<td>{escape(chunk.breadcrumb)}</td>" in table
        assert f"Part {chunk.chunk_index} of redis.md. word" in table
        assert f">{len(chunk.content)}</td>" in table
    assert "2 chunks." in page
    link = f'{CHUNKS}?document__id__exact={redis.pk}'
    assert f'href="{link}"' in page
    assert len(shown_chunks(admin_client, link.removeprefix(CHUNKS))) == 2


@BOTH_RUNTIMES
def test_a_document_page_lists_a_bounded_number_of_chunks(runtime: str,
                                                         admin_client: Client) -> None:
    dataset = Dataset.objects.create(tenant=Tenant.objects.create(slug="acme"), name="ops")
    doc = with_chunks(dataset, "big.md", CHUNKS_SHOWN + 5)
    page = admin_client.get(f"{DOCUMENTS}{doc.pk}/change/").content.decode()
    table = page.split('id="document-chunks"')[1].split("</table>")[0]
    assert table.count("<tr>") == CHUNKS_SHOWN + 1  # the header row, then the chunks
    assert f"The first {CHUNKS_SHOWN} of {CHUNKS_SHOWN + 5} chunks." in page
    response = admin_client.get(f"{CHUNKS}?document__id__exact={doc.pk}")
    assert response.context["cl"].result_count == CHUNKS_SHOWN + 5


def test_a_document_page_does_not_query_per_chunk(admin_client: Client) -> None:
    doc = document(1)
    assert_flat(admin_client, f"{DOCUMENTS}{doc.pk}/change/",
                lambda n: Chunk.objects.create(document=doc, chunk_index=n, content="Text."))


def test_a_filtered_chunk_list_does_not_query_per_row(admin_client: Client) -> None:
    doc = document(1)
    assert_flat(admin_client, f"{CHUNKS}?document__id__exact={doc.pk}",
                lambda n: Chunk.objects.create(document=doc, chunk_index=n, content="Text."))
