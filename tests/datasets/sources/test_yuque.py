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
    site = Book(namespace="sre/runbooks", token=TOKEN, public=0, members=[101, 102],
                docs={1: YuqueDoc("重启", "## 步骤\n\n重启服务。"),
                      2: YuqueDoc("值班", "## 步骤\n\n值班表。", public=0),
                      3: YuqueDoc("交接", "## 步骤\n\n交接清单。", public=None)})
    with yuque_server(site) as running:
        source = _source(kb, running)

        def readers() -> dict[str, list[str]]:
            return {d.title: d.readers for d in Document.objects.filter(source=source,
                                                                        deleted=False)}

        def members_asked() -> int:
            asked = sum("/api/v2/groups/sre/users" in hit for hit, _ in running.hits)
            running.hits.clear()
            return asked

        assert sync(source).status == Job.Status.SUCCEEDED
        # A private book: its team's members by id, asked once a sync (one answer of 2).
        both = ["user:101", "user:102"]
        assert readers() == {"重启": both, "值班": both, "交接": both}
        assert members_asked() == 1
        # 102 leaves the team: one sync, and no document is theirs.
        running.members = [101]
        job = sync(source)
        assert sync_counts(job) == (0, 3, 0, 0, 0), job.log
        assert set(map(tuple, readers().values())) == {("user:101",)}
        # Open to the space: the book restricts no one, but for its documents that are not
        # open themselves (private, or not saying).
        running.public = 2
        sync(source)
        assert readers() == {"重启": [], "值班": ["user:101"], "交接": ["user:101"]}
        # More members than a document names (the 101st on the second answer: two asked of
        # three), or one Yuque gives no id: no agent reads what is private.
        members_asked()
        for members, asked in ((list(range(1000, 1250)), 2), ([101, None], 1)):
            running.members = members
            sync(source)
            assert readers() == {"重启": [], "值班": ["none:"], "交接": ["none:"]}
            assert members_asked() == asked
        # The members unreadable (the first answer, a later one), their listing not moving
        # on, the book not saying whom it is open to (or who owns it, when something is
        # private): the sync fails before any document, and no one's readers change.
        running.public, running.members = 1, list(range(1000, 1150))
        running.docs[1].updated = "2026-12-02T08:00:00.000Z"  # not read while it fails
        for fault in ("users?offset=0", "users?offset=100"):
            running.faults[fault] = [403]
            job = sync(source)
            assert job.error.startswith("Yuque answered 403 when asked for the members of the "
                                        "team sre"), job.error
            assert readers() == {"重启": [], "值班": ["none:"], "交接": ["none:"]}
            assert Document.objects.get(source=source, title="重启").source_version == \
                "1:2026-11-01T08:00:00.000Z"
        running.pages_members = False
        assert "goes on without new members" in sync(source).error
        for public in (3, True, None):
            running.public = public
            assert sync(source).error == "Yuque's answer does not say whom the book is open to"
        assert readers() == {"重启": [], "值班": ["none:"], "交接": ["none:"]}
        # A person's private book: the person alone, by id.
        running.public, running.owner_type = 0, "User"
        sync(source)
        assert set(map(tuple, readers().values())) == {("user:7",)}


def test_a_book_url_is_checked_when_saved(kb: Any) -> None:
    for location in ("https://www.yuque.com/sre", "https://www.yuque.com/sre/runbooks/doc-1",
                     "https://www.yuque.com/api/v2"):
        with pytest.raises(InvalidSource, match="the book's URL"):
            make_source(kb.dataset, kind="yuque", location=location)
    with pytest.raises(InvalidSource, match="takes the whole space or book"):
        make_source(kb.dataset, kind="yuque", location="https://www.yuque.com/sre/runbooks",
                    subfolder="x")
    make_source(kb.dataset, kind="yuque", location="https://acme.yuque.com/sre/runbooks")
