"""Evidence links and line ranges: where a person reads a piece of evidence (the web page,
the git file at its commit and lines, a PDF's page, the admin page), and the lines of a
markdown file a chunk spans, checked against the file itself."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.documents.links import DocumentLink, git_file_url
from datasets.ingestion.locations import Location
from datasets.ingestion.parse import parse_markdown
from datasets.ingestion.pipeline import Chunking, build_chunks
from tests.conftest import Kb

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.pure
@pytest.mark.parametrize(("location", "expected"), [
    ("https://github.com/acme/runbooks.git", f"https://github.com/acme/runbooks/blob/{COMMIT}/"),
    ("https://x-token:s3cret@gitlab.example.com/ops/kb",
     f"https://gitlab.example.com/ops/kb/-/blob/{COMMIT}/"),
    ("http://gitea.local:3000/ops/kb.git", f"http://gitea.local:3000/ops/kb/src/commit/{COMMIT}/"),
    ("/srv/git/runbooks", ""),  # a local clone has no page
])
def test_a_git_files_page_is_its_hosts_kind_and_never_carries_a_token(
        location: str, expected: str) -> None:
    url = git_file_url(location, COMMIT, "ops/redis memory.md")
    assert url == (expected + "ops/redis%20memory.md" if expected else "")
    assert "s3cret" not in url and "x-token" not in url


@pytest.mark.pure
def test_a_link_names_the_lines_the_page_or_the_admin_page(settings: Any) -> None:
    github = DocumentLink(7, "md", f"https://github.com/a/b/blob/{COMMIT}/x.md")
    assert github.evidence_url(location=None, lines=(3, 9)).endswith("/x.md#L3-L9")
    gitlab = DocumentLink(7, "md", f"https://gitlab.com/a/b/-/blob/{COMMIT}/x.md")
    assert gitlab.evidence_url(location=None, lines=(3, 9)).endswith("/x.md#L3-9")
    page = DocumentLink(7, "html", "https://docs.example.com/guide/setup")
    assert page.evidence_url(location=None, lines=None) == "https://docs.example.com/guide/setup"

    settings.KB_PUBLIC_URL = "https://kb.example.com"
    pdf = DocumentLink(7, "pdf", "")
    assert pdf.evidence_url(location=Location("page", 4), lines=None) == \
        "https://kb.example.com/admin/datasets/document/7/original/#page=4"
    upload = DocumentLink(7, "md", "")
    assert upload.evidence_url(location=None, lines=(1, 5)) == \
        "https://kb.example.com/admin/datasets/document/7/change/"
    settings.KB_PUBLIC_URL = ""
    assert upload.evidence_url(location=None, lines=None) == "/admin/datasets/document/7/change/"


FILE = ("---\ntitle: Redis memory\nkeywords: [redis]\n---\n\n\n# Redis memory\n\nWhen used_memory "
        "nears maxmemory, evictions start.\n\n\n\n## Find the big keys\n\n"
        + "\n".join(f"Run redis-cli --bigkeys on replica {n} and note the largest keys."
                    for n in range(1, 30))
        + "\n\n## Free memory\n\n```bash\nredis-cli MEMORY PURGE\n\n\n\nredis-cli INFO memory\n"
          "```\n\nThen watch the graph.\n")


@pytest.mark.pure
def test_each_chunk_names_the_lines_of_the_file_it_spans() -> None:
    parsed = parse_markdown(FILE.encode(), file_name="redis.md", max_bytes=10**6)
    drafts = build_chunks(parsed, chunking=Chunking(size=500, overlap=60), redact=True,
                          numbered=True)
    assert len(drafts) >= 4
    file_lines = FILE.split("\n")
    for draft in drafts:
        assert draft.lines is not None
        first, last = draft.lines
        text = draft.content.split("\n")
        # The chunk's first and last lines are the file's at those numbers (blank runs the
        # normalisation collapsed, the frontmatter above, all counted).
        assert file_lines[first - 1] == text[0] and file_lines[last - 1] == text[-1], draft
    assert drafts[0].lines[0] == 7  # "# Redis memory", below the frontmatter and blank lines
    converted = build_chunks(parsed, chunking=Chunking(size=500, overlap=60), redact=True)
    assert {draft.lines for draft in converted} == {None}  # not the file's lines: none


@pytest.mark.django_db
def test_evidence_of_an_upload_links_to_its_admin_page_with_its_lines(
        kb: Kb, ingest: Any) -> None:
    document = ingest(kb.dataset, "redis/memory.md", FILE.encode())
    body = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis-cli bigkeys replica"},
                        format="json").json()
    assert body["evidence_status"] == "READY", body
    evidence = body["evidence"][0]
    assert evidence["url"] == f"/admin/datasets/document/{document.pk}/change/"
    start, end = evidence["lines"]["start"], evidence["lines"]["end"]
    lines = FILE.split("\n")[start - 1:end]
    assert lines[0] in evidence["excerpt"] and lines[-1] in evidence["excerpt"]

    fetched = kb.tool.post("/api/tools/fetch_evidence", {"document_id": evidence["document_id"]},
                           format="json").json()
    assert fetched["url"] == evidence["url"]
    assert fetched["lines"]["start"] <= start and fetched["lines"]["end"] >= end
