"""A Yuque book as a source, against a local server speaking Yuque's OpenAPI
(tests/datasets/sources/yuque_server.py): the documents listed whole, a body read only when
the document changed, its place in the table of contents as its path, markdown read as markdown
and lake documents as their HTML, drafts left out, deletion only after a complete listing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.http import ATTEMPTS
from datasets.sources.services import InvalidSource
from tests.datasets.sources.builders import live_paths, make_source, sync, sync_counts, timed_sync
from tests.datasets.sources.yuque_server import Book, YuqueDoc, yuque_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

TOKEN = "yuque-token-0123456789abcdefghij"
VARIABLE = "KB_SOURCE_SECRET_ACME_YUQUE"  # the kb fixture's tenant is acme


@pytest.fixture
def book(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Book]:
    """200 documents: 10 sections of the table of contents, 20 documents each (the last one a
    lake document), and a draft."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, TOKEN)
    site = Book(namespace="sre/runbooks", token=TOKEN)
    for section in range(10):
        site.titles[f"t-{section}"] = (f"领域 {section}", None)
        for n in range(20):
            lake = n == 19
            site.docs[section * 100 + n + 1] = YuqueDoc(
                f"服务 {section}-{n}", f"<h2>步骤</h2><p>服务 {section}-{n} 告警时先看日志。</p>"
                if lake else f"## 步骤\n\n服务 {section}-{n} 告警时先看日志。",
                f"t-{section}", format="lake" if lake else "markdown")
    site.docs[5000] = YuqueDoc("草稿", "未发布", status=0)
    with yuque_server(site) as running:
        yield running


def _source(kb: Any, book: Book, **fields: Any) -> Source:
    return make_source(kb.dataset, kind="yuque", location=book.book_url,
                       **{"secret_env": VARIABLE, **fields})




def test_a_book_syncs_its_documents_and_then_only_those_that_changed(
        kb: Any, store: Any, book: Book) -> None:
    source = _source(kb, book)
    seconds = []
    job = timed_sync(source, seconds)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (200, 0, 0, 0, 0)  # the draft left out
    assert sum("/docs?offset=" in hit for hit, _ in book.hits) == 3
    markdown = Document.objects.get(source=source, source_path="src/领域 3/服务 3-4.md")
    assert markdown.title == "服务 3-4" and markdown.url == f"{book.book_url}/doc-305"
    assert "src/领域 3/服务 3-19.html" in live_paths(source)

    book.hits.clear()
    job = timed_sync(source, seconds)
    assert sync_counts(job) == (0, 0, 200, 0, 0) and book.bodies_read() == []

    book.docs[305] = YuqueDoc("服务 3-4", "## 步骤\n\n先摘除节点。", "t-3",
                              updated="2026-12-01T08:00:00.000Z")
    del book.docs[306]
    book.docs[6000] = YuqueDoc("重启部署", "## 步骤\n\n执行 kubectl rollout restart。")
    book.hits.clear()
    job = timed_sync(source, seconds)
    print("yuque source, 200 documents (docs/benchmarks.md): first sync, nothing changed, "
          "one added + one changed + one deleted:", " / ".join(f"{s:.2f} s" for s in seconds))
    assert sync_counts(job) == (1, 1, 198, 1, 0)
    assert sorted(book.bodies_read()) == ["doc-305", "doc-6000"]
    found = kb.tool.post("/api/tools/lookup_knowledge",
                         {"query": "kubectl rollout restart 重启部署"}, format="json").json()
    assert found["evidence"][0]["url"] == f"{book.book_url}/doc-6000"


def test_failures_delete_nothing(kb: Any, store: Any, book: Book,
                                 monkeypatch: pytest.MonkeyPatch, capfd: Any,
                                 caplog: Any) -> None:
    source = _source(kb, book)
    assert sync(source).status == Job.Status.SUCCEEDED
    del book.docs[101]
    book.faults["offset=100"] = [500] * ATTEMPTS
    job = sync(source)
    assert job.error == "Yuque answered 500 to the book's listing"
    assert len(live_paths(source)) == 200
    book.unlisted = {102}
    job = sync(source)
    assert "document 102 is current but was not listed" in str(job.log)
    assert len(live_paths(source)) == 200
    book.unlisted = set()
    monkeypatch.setenv(VARIABLE, "wrong-token")
    job = sync(source)
    assert job.error == f"Yuque refused the token in {VARIABLE}"
    source.refresh_from_db()
    kept = [job.error, str(job.log), source.last_error, capfd.readouterr().err, caplog.text]
    assert not any("wrong-token" in text or TOKEN in text for text in kept)
    monkeypatch.setenv(VARIABLE, TOKEN)
    book.faults["/docs?offset=0"] = [429, 429]
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (0, 0, 199, 1, 0)


def test_who_reads_a_private_book_is_its_team_and_follows_it(kb: Any, store: Any,
                                                               settings: Any,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, TOKEN)
    team = [f"member-{n}" for n in range(150)]
    site = Book(namespace="sre/runbooks", token=TOKEN, public=0, members=["Alice", "bob"],
                docs={1: YuqueDoc("重启", "## 步骤\n\n重启服务。"),
                      2: YuqueDoc("值班", "## 步骤\n\n值班表。", public=0)})
    with yuque_server(site) as running:
        source = _source(kb, running)

        def readers() -> dict[str, list[str]]:
            return {d.title: d.readers for d in Document.objects.filter(source=source,
                                                                        deleted=False)}

        assert sync(source).status == Job.Status.SUCCEEDED
        # A private book: its team's members, asked once a sync (one answer of 2).
        assert readers() == {"重启": ["user:alice", "user:bob"], "值班": ["user:alice", "user:bob"]}
        assert sum("/api/v2/groups/sre/users" in hit for hit, _ in running.hits) == 1
        # Bob leaves the team: one sync, and neither document is his.
        running.members = ["alice"]
        job = sync(source)
        assert sync_counts(job) == (0, 2, 0, 0, 0), job.log
        assert set(map(tuple, readers().values())) == {("user:alice",)}
        # Open to the space: the book restricts no one, but for its private document; the
        # members are asked for it alone.
        running.public = 2
        sync(source)
        assert readers() == {"重启": [], "值班": ["user:alice"]}
        # More members than a document names (over two answers), or one Yuque gives no login:
        # no agent reads what is private.
        for members in (team, ["alice", ""]):
            running.members = members
            sync(source)
            assert readers() == {"重启": [], "值班": ["none:"]}
        # The members unreadable, or the book not saying whom it is open to: the sync fails and
        # no one's readers change.
        running.public, running.members = 0, ["alice"]
        running.faults["/api/v2/groups/"] = [403]
        job = sync(source)
        assert job.error.startswith("Yuque answered 403 when asked for the members of the team "
                                    "sre") and readers()["重启"] == []
        running.public = 3
        assert "does not say who owns the book" in sync(source).error
        # A person's private book: the person alone.
        running.public, running.owner_type = 0, "User"
        sync(source)
        assert set(map(tuple, readers().values())) == {("user:sre",)}


def test_a_book_url_is_checked_when_saved(kb: Any) -> None:
    for location in ("https://www.yuque.com/sre", "https://www.yuque.com/sre/runbooks/doc-1",
                     "https://www.yuque.com/api/v2"):
        with pytest.raises(InvalidSource, match="the book's URL"):
            make_source(kb.dataset, kind="yuque", location=location)
    with pytest.raises(InvalidSource, match="takes the whole space or book"):
        make_source(kb.dataset, kind="yuque", location="https://www.yuque.com/sre/runbooks",
                    subfolder="x")
    make_source(kb.dataset, kind="yuque", location="https://acme.yuque.com/sre/runbooks")
