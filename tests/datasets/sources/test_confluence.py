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
from tests.datasets.sources.builders import live_paths, make_source, sync, sync_counts, timed_sync
from tests.datasets.sources.confluence_server import Wiki, WikiPage, confluence_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

EMAIL, TOKEN = "bot@example.org", "ATATT3xFfGF0-confluence-token-0123456789"
VARIABLE = "KB_SOURCE_SECRET_ACME_WIKI"  # the kb fixture's tenant is acme
CODE = ('<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash'
        '</ac:parameter><ac:plain-text-body><![CDATA[kubectl rollout restart deploy/<name> '
        '&& echo "done"]]></ac:plain-text-body></ac:structured-macro>')


def _body(n: int) -> str:
    return f"<h2>Steps</h2><p>What to do when service {n} pages.</p>"


@pytest.fixture
def wiki(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Wiki]:
    """200 pages: 20 sections of 9 pages each, the sections under the space's home."""
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:{TOKEN}")
    site = Wiki(space="OPS", credential=f"{EMAIL}:{TOKEN}")
    site.pages["1"] = WikiPage("Operations", "<p>Home of the operations space.</p>")
    for section in range(20):
        section_id = str(100 + section)
        site.pages[section_id] = WikiPage(f"Area {section}", f"<p>Area {section}.</p>", "1")
        for n in range(9 if section else 8):
            page_id = str(1000 + section * 10 + n)
            site.pages[page_id] = WikiPage(f"Service {section}-{n}", _body(section * 10 + n),
                                           section_id)
    assert len(site.pages) == 200
    with confluence_server(site) as running:
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


def test_failures_delete_nothing_and_a_rate_limit_is_waited_out(
        kb: Any, store: Any, wiki: Wiki, monkeypatch: pytest.MonkeyPatch, capfd: Any,
        caplog: Any) -> None:
    source = _source(kb, wiki)
    assert sync(source).status == Job.Status.SUCCEEDED
    del wiki.pages["1010"]
    # A listing page failing every try: failed, nothing deleted.
    wiki.faults["start=100"] = [500] * ATTEMPTS
    job = sync(source)
    assert job.error == "Confluence answered 500 to the space's listing"
    assert len(live_paths(source)) == 200
    # A space the credential may not see: its listing would be empty, so it fails instead.
    wiki.space = "GONE"
    job = sync(source)
    assert job.error == (f"no space OPS at {wiki.url} that is visible to the credential in "
                         f"{VARIABLE}") and len(live_paths(source)) == 200
    wiki.space = "OPS"
    # A listing that skipped a page still current (it moved under a change): nothing deleted.
    wiki.unlisted = {"1020"}
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED and len(live_paths(source)) == 200
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
                         "caller: check it") and len(live_paths(source)) == 200
    wiki.anonymous = False
    source.refresh_from_db()
    kept = [job.error, str(job.log), source.last_error, capfd.readouterr().err, caplog.text]
    assert not any("wrong-token" in text or TOKEN in text for text in kept)
    # Rate limited twice (429, Retry-After): waited out, the sync completes.
    monkeypatch.setenv(VARIABLE, f"{EMAIL}:{TOKEN}")
    wiki.faults["/rest/api/content?"] = [429, 429]
    job = sync(source)
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert sync_counts(job) == (0, 0, 199, 1, 0)


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
    assert job.status == Job.Status.SUCCEEDED and sync_counts(job) == (3, 0, 0, 0, 0), job.log
    assert live_paths(source) == {"src/Home/Café (2).html", "src/Home/cafe (3).html",
                             "src/Home/hidden-odd.html"}


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
