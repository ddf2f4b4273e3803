"""A Confluence space as a source, against a local server speaking Confluence's REST API
(tests/datasets/sources/confluence_server.py): the pages listed whole with their versions, page by
page; a body read only when its version moved; the title path as the document's path; the
storage format's code blocks kept; deletion only after a complete listing; a refused
credential, a space it may not see and Atlassian's rate limit each handled as documented."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.confluence import storage_html
from datasets.sources.http import ATTEMPTS
from datasets.sources.services import InvalidSource
from tests.datasets.ingestion.office_files import docx_of
from tests.datasets.sources.builders import live_paths, make_source, sync, sync_counts, timed_sync
from tests.datasets.sources.confluence_server import Wiki, WikiFile, WikiPage, confluence_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

EMAIL, TOKEN = "bot@example.org", "ATATT3xFfGF0-confluence-token-0123456789"
VARIABLE = "KB_SOURCE_SECRET_ACME_WIKI"  # the kb fixture's tenant is acme
CODE = ('<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash'
        '</ac:parameter><ac:plain-text-body><![CDATA[kubectl rollout restart deploy/<name> '
        '&& echo "done"]]></ac:plain-text-body></ac:structured-macro>')


def _body(n: int) -> str:
    return f"<h2>Steps</h2><p>What to do when service {n} pages.</p>"


def _space(sections: int) -> Wiki:
    """Sections of 9 pages each under the space's home (each page converted from HTML in a
    child process: about 0.4 s)."""
    site = Wiki(space="OPS", credential=f"{EMAIL}:{TOKEN}")
    site.pages["1"] = WikiPage("Operations", "<p>Home of the operations space.</p>")
    for section in range(sections):
        section_id = str(100 + section)
        site.pages[section_id] = WikiPage(f"Area {section}", f"<p>Area {section}.</p>", "1")
        for n in range(9 if section else 8):
            page_id = str(1000 + section * 10 + n)
            site.pages[page_id] = WikiPage(f"Service {section}-{n}", _body(section * 10 + n),
                                           section_id)
    assert len(site.pages) == sections * 10
    return site


@pytest.fixture
def wiki(request: pytest.FixtureRequest, settings: Any,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Wiki]:
    """200 pages in 20 sections, or the sections a test asks for (indirect parametrize)."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:{TOKEN}")
    with confluence_server(_space(getattr(request, "param", 20))) as running:
        yield running


def _source(kb: Any, wiki: Wiki, **fields: Any) -> Source:
    return make_source(kb.dataset, kind="confluence", location=wiki.space_url,
                       **{"secret_env": VARIABLE, **fields})




def test_a_space_syncs_its_pages_and_then_only_the_versions_that_moved(
        kb: Any, store: Any, wiki: Wiki) -> None:
    source = _source(kb, wiki)
    seconds = []
    job = timed_sync(source, seconds)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (200, 0, 0, 0, 0)
    listings = [hit for hit, _ in wiki.hits if hit.startswith("/rest/api/content?")]
    assert len(listings) == 4  # the server answers 50 a page, whatever is asked
    page = Document.objects.get(source=source,
                                source_path="src/Operations/Area 3/Service 3-4.html")
    assert page.title == "Service 3-4"
    assert page.url == f"{wiki.url}/spaces/OPS/pages/1034"
    assert "src/Operations.html" in live_paths(source)

    wiki.hits.clear()
    job = timed_sync(source, seconds)
    assert sync_counts(job) == (0, 0, 200, 0, 0) and wiki.bodies_read() == []

    # One edited (its version moves), one deleted, one added with a code block.
    wiki.pages["1034"] = WikiPage("Service 3-4", "<p>Now: drain the node first.</p>", "103", 2)
    del wiki.pages["1035"]
    wiki.pages["5000"] = WikiPage("Restart a deployment", f"<p>Roll it.</p>{CODE}", "1")
    wiki.hits.clear()
    job = timed_sync(source, seconds)
    print("confluence source, 200 pages (docs/benchmarks.md): first sync, nothing changed, "
          "one added + one changed + one deleted:", " / ".join(f"{s:.2f} s" for s in seconds))
    assert sync_counts(job) == (1, 1, 198, 1, 0)
    assert sorted(wiki.bodies_read()) == ["1034", "5000"]
    added = Document.objects.get(source=source,
                                 source_path="src/Operations/Restart a deployment.html")
    chunks = " ".join(added.chunks.values_list("content", flat=True))
    assert 'kubectl rollout restart deploy/<name> && echo "done"' in chunks
    assert "bash" not in chunks  # the macro's language parameter is no text of the page
    found = kb.tool.post("/api/tools/lookup_knowledge",
                         {"query": "kubectl rollout restart deployment"}, format="json").json()
    assert found["evidence"][0]["url"] == f"{wiki.url}/spaces/OPS/pages/5000"


@pytest.mark.parametrize("wiki", [6], ids=["60 pages"], indirect=True)  # 2 listing pages
def test_failures_delete_nothing_and_a_rate_limit_is_waited_out(
        kb: Any, store: Any, wiki: Wiki, monkeypatch: pytest.MonkeyPatch, capfd: Any,
        caplog: Any) -> None:
    source = _source(kb, wiki)
    assert sync(source).status == Job.Status.SUCCEEDED
    del wiki.pages["1010"]
    # A listing page failing every try: failed, nothing deleted.
    wiki.faults["start=50"] = [500] * ATTEMPTS
    job = sync(source)
    assert job.error == "Confluence answered 500 to the space's listing"
    assert len(live_paths(source)) == 60
    # A space the credential may not see: its listing would be empty, so it fails instead.
    wiki.space = "GONE"
    job = sync(source)
    assert job.error == (f"no space OPS at {wiki.url} that is visible to the credential in "
                         f"{VARIABLE}") and len(live_paths(source)) == 60
    wiki.space = "OPS"
    # A listing that skipped a page still current (it moved under a change): nothing deleted.
    wiki.unlisted = {"1020"}
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and len(live_paths(source)) == 60
    assert "page 1020 is current but was not listed" in str(job.log)
    wiki.unlisted = set()
    # Refused: said so, the token nowhere.
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:wrong-token")
    job = sync(source)
    assert job.error == f"Confluence refused the credential in {VARIABLE}"
    # A site open to anonymous callers serves a token it does not take as one of them.
    wiki.anonymous = True
    job = sync(source)
    assert job.error == (f"Confluence reads the credential in {VARIABLE} as an anonymous "
                         "caller: check it") and len(live_paths(source)) == 60
    wiki.anonymous = False
    source.refresh_from_db()
    kept = [job.error, str(job.log), source.last_error, capfd.readouterr().err, caplog.text]
    assert not any("wrong-token" in text or TOKEN in text for text in kept)
    # Rate limited twice (429, Retry-After): waited out, the sync completes.
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:{TOKEN}")
    wiki.faults["/rest/api/content?"] = [429, 429]
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (0, 0, 59, 1, 0)


def test_view_restrictions_are_readers_within_those_of_the_pages_above(
        kb: Any, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, "personal-access-token")
    alice = {"accountId": "557058:a11ce", "email": "Alice@Example.org"}
    site = Wiki(space="OPS", credential="personal-access-token", pages={
        "1": WikiPage("Home", "<p>Home.</p>"),
        "2": WikiPage("SRE", "<p>SRE only.</p>", "1", groups=["sre", "dba"]),
        "3": WikiPage("Failover", "<p>Fail over.</p>", "2"),
        "4": WikiPage("Vault", "<p>Secrets.</p>", "2", users=[alice], groups=["sre"]),
        "5": WikiPage("Payroll", "<p>Pay.</p>", "2", users=[alice]),
        "6": WikiPage("Board", "<p>Minutes.</p>", "1", users=[{"username": "jdoe"}])})
    with confluence_server(site) as running:
        source = make_source(kb.dataset, kind="confluence", location=running.space_url,
                             secret_env=VARIABLE)
        assert sync(source).status == Job.Status.SUCCEEDED

        def readers() -> dict[str, list[str]]:
            return {d.title: d.readers for d in Document.objects.filter(source=source,
                                                                        deleted=False)}

        assert readers() == {
            "Home": [], "SRE": ["group:dba", "group:sre"], "Failover": ["group:dba", "group:sre"],
            "Vault": ["group:sre"],  # within its parent's: alice is no name the parent gives
            "Payroll": ["none:"],  # its own and its parent's share no name: no agent reads it
            "Board": ["user:jdoe"]}
        listed = kb.admin.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"]
        assert {d["title"]: d["readers_at_source"] for d in listed}["Board"] == ["user:jdoe"]
        # A restriction lifted at the source, the body unchanged: one sync applies it.
        site.pages["2"].groups = []
        job = sync(source)
        assert sync_counts(job) == (0, 4, 2, 0, 0), job.log
        assert "changed: Home/SRE.html: who may read it changed at the source" in str(job.log)
        assert readers()["Payroll"] == ["user:557058:a11ce", "user:alice@example.org"]
        assert readers()["Failover"] == []
        # The source's own readers hold too: its documents' are within them.
        kb.admin.patch(f"/api/sources/{source.pk}", {"readers": ["group:sre"]}, format="json")
        assert readers() == {"Home": ["group:sre"], "SRE": ["group:sre"],
                             "Failover": ["group:sre"], "Vault": ["group:sre"],
                             "Payroll": ["none:"], "Board": ["none:"]}
        assert sync_counts(sync(source)) == (0, 0, 6, 0, 0)
        kb.admin.patch(f"/api/sources/{source.pk}", {"readers": []}, format="json")
        # Restricted at the source while its version moved with the same body, or while its
        # body fails to read: its readers follow all the same.
        site.pages["3"].version, site.pages["3"].groups = 2, ["dba"]
        site.pages["6"].version, site.pages["6"].users = 2, []
        site.faults["/rest/api/content/6?"] = [500] * ATTEMPTS
        job = sync(source)
        assert sync_counts(job) == (0, 1, 4, 0, 1), job.log
        assert "changed: Home/SRE/Failover.html: who may read it changed" in str(job.log)
        assert readers()["Failover"] == ["group:dba"] and readers()["Board"] == []
        # A page below one the listing does not hold: no agent reads it (nothing is deleted).
        site.unlisted = {"2"}
        job = sync(source)
        assert "page 2 is current but was not listed" in str(job.log)
        assert readers()["Failover"] == ["none:"] and readers()["SRE"] == []
        site.unlisted = set()
        # A listing that says nothing of restrictions (an older Data Center), or of one kind of
        # them, fails the sync.
        site.restrictions = False
        job = sync(source)
        assert job.status == Job.Status.FAILED and "read restrictions" in job.error
        site.restrictions = True
        real = WikiPage.restrictions
        monkeypatch.setattr(WikiPage, "restrictions", lambda page, **ids: {"read": {
            "restrictions": {"user": real(page, **ids)["read"]["restrictions"]["user"]}}})
        job = sync(source)
        assert job.status == Job.Status.FAILED and "read restrictions" in job.error
    assert len(readers()) == 6


def test_who_may_view_a_cloud_space_is_a_level_of_every_page(
        kb: Any, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:{TOKEN}")
    bob = {"accountId": "557058:b0b", "email": "bob@example.org"}
    viewers = [("group", "sre-id", "read", "space"), ("user", "557058:b0b", "read", "space"),
               ("role", "ANONYMOUS", "read", "space"),  # a role names no one
               ("group", "ops-id", "create", "page"), ("group", "ops-id", "read", "comment"),
               ("group", "audit-id", "read", "space")]  # three answers of three
    site = Wiki(space="OPS", credential=f"{EMAIL}:{TOKEN}", space_permissions=viewers,
                group_ids=True, pages={
                    "1": WikiPage("Home", "<p>Home.</p>"),
                    "2": WikiPage("SRE", "<p>SRE only.</p>", "1", groups=["sre"]),
                    "3": WikiPage("Bob", "<p>Bob's.</p>", "1", users=[bob])})
    with confluence_server(site) as running:
        source = _source(kb, running)
        assert sync(source).status == Job.Status.SUCCEEDED

        def readers() -> dict[str, list[str]]:
            return {d.title: d.readers for d in Document.objects.filter(source=source,
                                                                        deleted=False)}

        # Within the space's viewers: a group by its id (as a page's restriction gives it too),
        # a user by account id.
        assert readers() == {"Home": ["group:audit-id", "group:sre-id", "user:557058:b0b"],
                             "SRE": ["group:sre-id"], "Bob": ["user:557058:b0b"]}
        assert sum("/api/v2/spaces/98306/permissions" in hit for hit, _ in running.hits) == 2
        # Bob no longer views the space: one sync, and no page of it is his.
        running.space_permissions = [v for v in viewers if v[1] != "557058:b0b"]
        job = sync(source)
        assert sync_counts(job) == (0, 2, 1, 0, 0), job.log
        assert readers() == {"Home": ["group:audit-id", "group:sre-id"],
                             "SRE": ["group:sre-id"], "Bob": ["none:"]}
        # Viewed through a role alone (anonymous access), it names no one: no agent reads it.
        running.space_permissions = [("role", "ANONYMOUS", "read", "space")]
        sync(source)
        assert set(map(tuple, readers().values())) == {("none:",)}
        # Its permissions unreadable (refused, not found on a Cloud site) or not saying whom
        # they name: the sync fails and changes no one's readers.
        running.space_permissions = viewers
        for status in (403, 404):
            running.faults["/api/v2/spaces/"] = [status]
            job = sync(source)
            assert job.error == f"Confluence answered {status} to the space's permissions"
        running.space_permissions = [*viewers, ("user", "", "read", "space")]
        assert "gives one no operation or principal" in sync(source).error
        assert set(map(tuple, readers().values())) == {("none:",)}
    # A Data Center (its user has no account id) shows them to a space's admins alone: none
    # asked for.
    assert not any("/api/v2/" in hit for hit, _ in _synced_on_data_center(kb, settings))


def _synced_on_data_center(kb: Any, settings: Any) -> list[tuple[str, int]]:
    site = Wiki(space="DC", credential=f"{EMAIL}:{TOKEN}",  # a Data Center takes Basic too
                pages={"1": WikiPage("Home", "<p>Home.</p>")})
    with confluence_server(site) as running:
        source = make_source(kb.dataset, kind="confluence", location=running.space_url,
                             secret_env=VARIABLE, name="dc")
        assert sync(source).status == Job.Status.SUCCEEDED
        return running.hits


@pytest.mark.parametrize("media", [False, True], ids=["older-data-center", "cloud"])
def test_attachments_are_documents_read_again_when_their_version_moves(
        kb: Any, store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, media: bool) -> None:
    """Cloud: a page's first attachments come with the listing, the rest listed apart, each
    downloaded through a redirect to a media store; an older Data Center expands none: all
    are listed apart (pages of 3), and downloaded from the site."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, "personal-access-token")
    page = WikiPage("Replica lag", "<p>See the attached runbooks.</p>", groups=["dba"], files=[
        WikiFile("att11", "failover.docx",
                 docx_of("# Failover\n\nPromote the replica with the smallest lag.")),
        WikiFile("att12", "lag.md", b"# Lag\n\nCheck the relay log position first.\n"),
        WikiFile("att13", "diagram.png", b"\x89PNG\r\n\x1a\n"),  # no format read: left out
        WikiFile("att14", "checklist.txt", b"Stop writes.\nPromote.\nRepoint the app.\n"),
        WikiFile("att15", "Replica lag.html", b"<p>Same name as a child page.</p>")])
    child = WikiPage("Replica lag", "<p>A child.</p>", "1")
    site = Wiki(space="OPS", credential="personal-access-token", media=media, expanded=media,
                pages={"1": page, "2": child})
    with confluence_server(site) as running:
        source = make_source(kb.dataset, kind="confluence", location=running.space_url,
                             secret_env=VARIABLE)
        job = sync(source)
        assert sync_counts(job) == (6, 0, 0, 0, 0), job.log
        assert live_paths(source) == {
            "src/Replica lag.html", "src/Replica lag/Replica lag.html",
            "src/Replica lag/failover.docx", "src/Replica lag/lag.md",
            "src/Replica lag/checklist.txt", "src/Replica lag/Replica lag (att15).html"}
        files = Document.objects.filter(source=source, deleted=False)
        docx = files.get(file_name="failover.docx")
        assert "smallest lag" in " ".join(docx.chunks.values_list("content", flat=True))
        assert docx.url == f"{running.url}/pages/viewpageattachments.action?pageId=1" \
                           "&preview=/1/att11/failover.docx"
        assert {tuple(d.readers) for d in files} == {("group:dba",)}  # their page's
        assert sorted(running.downloads()) == sorted(
            ["att11", "att12", "att14", "att15"] if media else
            ["failover.docx", "lag.md", "checklist.txt", "Replica%20lag.html"])
        # One attachment changed (its version moves), one removed: read or deleted alone.
        page.files[1] = WikiFile("att12", "lag.md", b"# Lag\n\nNow: check the IO thread.\n", 2)
        del page.files[3]
        running.hits.clear()
        job = sync(source)
        assert sync_counts(job) == (0, 1, 4, 1, 0), job.log
        assert running.downloads() == (["att12"] if media else ["lag.md"])
        if media:  # a redirect back to the site itself (its login page) is no file
            running.media_url = running.url.removesuffix("/wiki") + "/media"
            page.files[0].version = 2
            job = sync(source)
            assert sync_counts(job) == (0, 0, 4, 0, 1) and "Confluence redirected the " \
                "download where the sync does not follow" in str(job.log)


def test_a_data_center_token_is_sent_as_bearer(kb: Any, store: Any, settings: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, "personal-access-token")
    site = Wiki(space="~jdoe", credential="personal-access-token",
                pages={"7": WikiPage("Notes", "<p>On-call notes.</p>")})
    with confluence_server(site) as running:
        job = sync(make_source(kb.dataset, kind="confluence",
                               location=f"{running.url}/display/~jdoe", secret_env=VARIABLE))
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (1, 0, 0, 0, 0)


def test_titles_that_read_the_same_are_told_apart_by_id(kb: Any, store: Any, settings: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, "personal-access-token")
    site = Wiki(space="OPS", credential="personal-access-token", pages={
        "1": WikiPage("Home", "<p>Home.</p>"),
        "2": WikiPage("Café", "<p>Coffee machine runbook.</p>", "1"),
        "3": WikiPage("cafe", "<p>The other one.</p>", "1"),
        "4": WikiPage(". . .hidden\u202e/odd", "<p>Odd title.</p>", "1")})
    with confluence_server(site) as running:
        source = make_source(kb.dataset, kind="confluence", location=running.space_url,
                             secret_env=VARIABLE, include=["Home/**"])
        job = sync(source)
        assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (3, 0, 0, 0, 0)
        assert live_paths(source) == {"src/Home/Café (2).html", "src/Home/cafe (3).html",
                                      "src/Home/hidden-odd.html"}
        # Renamed: listed under its new path, so its old one is not missing but gone.
        running.pages["4"].title = "Renamed"
        job = sync(source)
        assert sync_counts(job) == (1, 0, 2, 1, 0) and "in part" not in str(job.log)


def test_a_space_url_is_checked_when_saved(kb: Any) -> None:
    for location in ("https://acme.atlassian.net/wiki", "https://acme.atlassian.net/wiki/"
                     "spaces/OPS/pages/12", "https://acme.atlassian.net/wiki/spaces/OPS?x=1"):
        with pytest.raises(InvalidSource, match="the space's URL"):
            make_source(kb.dataset, kind="confluence", location=location)
    with pytest.raises(InvalidSource, match="takes the whole space"):
        make_source(kb.dataset, kind="confluence", subfolder="Operations",
                    location="https://acme.atlassian.net/wiki/spaces/OPS")
    make_source(kb.dataset, kind="confluence",
                location="https://acme.atlassian.net/wiki/spaces/OPS/overview")


def test_the_storage_format_reads_as_html() -> None:
    html = storage_html("A <title>", f"<p>x</p>{CODE}<ac:link><ri:page ri:content-title="
                                      f'"B"/><ac:plain-text-link-body><![CDATA[see B & C]]>'
                                      "</ac:plain-text-link-body></ac:link>").decode()
    assert "<title>A &lt;title&gt;</title>" in html
    assert "<pre>kubectl rollout restart deploy/&lt;name&gt; &amp;&amp; echo &quot;done&quot;" \
           "</pre>" in html
    assert "see B &amp; C" in html and "CDATA" not in html and "language" not in html
