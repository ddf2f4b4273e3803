"""The landing page at `/`: where the admin's "View site" leads, with the ways in."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from tests.conftest import BOTH_RUNTIMES


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_the_landing_page_leads_to_the_admin_the_api_docs_and_the_schema(
        runtime: str, client: Client, store: object) -> None:  # health asks Milvus
    response = client.get("/")
    assert response.status_code == 200
    urls = links(response.content.decode())
    assert {"/admin/", "/api/docs", "/api/schema", "/api/health"} <= set(urls)
    for url in urls:
        if url.startswith("/static/"):
            assert finders.find(url.removeprefix("/static/")), url
        else:  # the admin answers with its login page
            assert client.get(url, follow=True).status_code == 200, url


@BOTH_RUNTIMES
@pytest.mark.django_db
def test_view_site_in_the_admin_leads_to_the_landing_page(runtime: str,
                                                          admin_client: Client) -> None:
    for page in ["/admin/", "/admin/datasets/document/"]:
        html = admin_client.get(page).content.decode()
        [view_site] = re.findall(r'<a href="([^"]*)">View site</a>', html)
        assert view_site == reverse("landing") == "/"
        assert admin_client.get(view_site).status_code == 200


# How the landing page names each format the platform ingests.
FORMAT_NAMES = {"md": "markdown", "txt": "text", "html": "HTML", "pdf": "PDF", "docx": "Word",
                "pptx": "PowerPoint", "xlsx": "Excel", "csv": "CSV"}


def test_the_landing_page_names_every_format_a_document_may_have() -> None:
    """It said documents were "(markdown)" long after the platform took PDFs and Word files."""
    from datasets.ingestion.formats import Format

    assert set(FORMAT_NAMES) == {f.value for f in Format}  # a new format: name it here too
    text = " ".join(Client().get("/").content.decode().split())
    [named] = re.findall(r"documentation \(([^)]*)\)", text)
    *first, last = FORMAT_NAMES.values()
    assert named == f"{', '.join(first)} and {last}"
