"""Web sources: a real HTTP server in a thread, with robots.txt, ETags and a sitemap; every
request through kbplatform/outbound.py, so 127.0.0.1 is fetched only when allowed."""

from __future__ import annotations

import threading
import time

import pytest

from datasets.models import Document, Job, Source
from datasets.sources.services import InvalidSource
from datasets.sources.sync import source_sync
from tests.datasets.sources.builders import Site, doc, make_source, sync, web_site

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

MD = "text/markdown; charset=utf-8"
HTML = "text/html; charset=utf-8"


@pytest.fixture
def allowed(settings):
    settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]


def _site() -> Site:
    return Site(robots="User-agent: *\nDisallow: /private/\n", pages={
        "/": (HTML, b'<a href="/guide/start.md">start</a> <a href="/private/x.md">x</a> '
                    b'<a href="http://example.org/far.md">away</a> <a href="/about">about</a>'),
        "/guide/start.md": (MD, doc("Start", "Read [setup](setup.md) then [deep](deep/one.md).")),
        "/guide/setup.md": (MD, doc("Setup", "Install it.")),
        "/guide/deep/one.md": (MD, doc("Deep one", "See [two](two.md).")),
        "/guide/deep/two.md": (MD, doc("Deep two")),
        "/private/x.md": (MD, doc("Private")),
    })


def _paths(source: Source) -> list[str]:
    return sorted(Document.objects.filter(source=source, deleted=False)
                  .values_list("source_path", flat=True))


def test_crawl_follows_same_site_links_to_max_depth_and_honours_robots(
        kb, store, allowed) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=2)
        job = sync(source)

    host = site.url.removeprefix("http://")
    # depth 0: "/", 1: start.md, 2: setup.md and deep/one.md; two.md is depth 3
    assert _paths(source) == [f"src/{host}/guide/deep/one.md", f"src/{host}/guide/setup.md",
                              f"src/{host}/guide/start.md", f"src/{host}/index.html"]
    fetched = [path for path, _ in site.hits]
    assert "/private/x.md" not in fetched and "/guide/deep/two.md" not in fetched
    assert job.status == Job.Status.SUCCEEDED
    # "/" is HTML, converted like an upload; "/about" answers 404: not a document
    assert job.detail["added"] == 4 and job.detail.get("failed", 0) == 0
    # Each page's document links to the page as fetched.
    assert Document.objects.get(source=source, source_path=f"src/{host}/guide/setup.md").url \
        == f"{site.url}/guide/setup.md"


def test_second_sync_asks_with_etags_and_reads_only_the_changed_page(
        kb, store, allowed) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
        site.pages["/guide/setup.md"] = (MD, doc("Setup", "Install it, then configure it."))
        del site.pages["/guide/deep/two.md"]
        site.hits.clear()
        job = sync(source)

    statuses = dict(site.hits)
    assert statuses["/guide/start.md"] == 304 and statuses["/guide/deep/one.md"] == 304
    assert statuses["/guide/setup.md"] == 200 and statuses["/guide/deep/two.md"] == 404
    assert (job.detail["changed"], job.detail["unchanged"], job.detail["deleted"]) == (1, 3, 1)
    assert not any(p.endswith("two.md") for p in _paths(source))


def test_a_page_whose_links_were_not_kept_is_fetched_whole(kb, store, allowed,
                                                         settings) -> None:
    settings.KB_SOURCE_MAX_FILES = 2  # the links kept in all: not the 3 of "/"
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
        before = _paths(source)
        site.hits.clear()
        job = sync(source)

    statuses = dict(site.hits)
    assert statuses["/"] == 200 and statuses["/guide/setup.md"] == 304
    assert _paths(source) == before and job.detail.get("deleted", 0) == 0


def test_a_sitemap_lists_the_pages(kb, store, allowed) -> None:
    site = _site()
    with web_site(site):
        site.pages["/sitemap.xml"] = ("application/xml", (
            '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f'<url><loc>{site.url}/guide/setup.md</loc></url>'
            f'<url><loc>{site.url}/guide/deep/two.md</loc></url>'
            '<url><loc>http://example.org/elsewhere.md</loc></url></urlset>').encode())
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/sitemap.xml",
                             max_depth=1)
        job = sync(source)

    assert [p.rsplit("/", 2)[-2:] for p in _paths(source)] == [["deep", "two.md"],
                                                               ["guide", "setup.md"]]
    assert job.detail["added"] == 2


def test_max_pages_bounds_the_crawl_and_then_nothing_is_deleted(kb, store, allowed) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
        before = _paths(source)
        Source.objects.filter(pk=source.pk).update(max_pages=2)
        source.refresh_from_db()
        site.hits.clear()
        job = sync(source)

    assert len([h for h in site.hits if h[0] != "/robots.txt"]) == 2
    assert _paths(source) == before
    assert any("read in part" in line["message"] for line in job.log)


def test_a_page_over_its_size_bound_is_a_failed_line(kb, store, allowed) -> None:
    site = _site()
    site.pages["/guide/setup.md"] = (MD, doc("Setup", "x" * 5000))
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=2,
                             max_page_bytes=2048)
        job = sync(source)

    assert any(line["message"].startswith("failed: ") and "setup.md" in line["message"]
               and "over 2048 bytes" in line["message"] for line in job.log)


def test_an_unreachable_site_deletes_nothing(kb, store, allowed) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
    before = _paths(source)  # the server is stopped now

    job = sync(source)

    assert job.status == Job.Status.FAILED and job.error == "could not connect to the site"
    assert _paths(source) == before and len(before) == 5  # four markdown pages and "/"


def test_a_private_address_is_refused_without_the_allow_list(kb, store, settings) -> None:
    with web_site(_site()) as site:
        with pytest.raises(InvalidSource, match="loopback"):
            make_source(kb.dataset, kind="web", location=f"{site.url}/")
        # Allowed when it was made, not any more when it syncs: the outbound policy refuses
        # the connection itself.
        settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/")
        settings.KB_OUTBOUND_ALLOWED_HOSTS = []
        job = sync(source)

    assert job.status == Job.Status.FAILED and site.hits == []
    with pytest.raises(InvalidSource, match="naming it in KB_OUTBOUND_ALLOWED_HOSTS"):
        make_source(kb.dataset, kind="web", location=f"{site.url}/", name="again")
    for location in ("http://169.254.169.254/latest/", "http://10.0.0.1/", "http://[::1]/",
                     "http://0x7f000001/", "file:///etc/passwd", "http://user:pw@example.org/"):
        with pytest.raises(InvalidSource):
            make_source(kb.dataset, kind="web", location=location, name="other")


def test_two_syncs_at_once_one_runs_the_other_is_skipped(kb, store, allowed) -> None:
    site = _site()
    site.gate = threading.Event()  # pages are held until the second sync has tried
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=1)
        results: list[object] = []
        first = threading.Thread(target=lambda: results.append(
            source_sync(source=Source.objects.get(pk=source.pk), job=None)))
        first.start()
        for _ in range(200):  # the first holds the claim once it has asked for robots.txt
            if site.hits:
                break
            threading.Event().wait(0.05)
        second = source_sync(source=Source.objects.get(pk=source.pk), job=None)
        site.gate.set()
        first.join(60)

    assert second is None  # skipped
    # depth 1: "/" (HTML) and start.md
    assert results and results[0] is not None and results[0]["added"] == 2  # type: ignore[index]


def test_robots_refusing_the_start_page_fails_the_sync_and_deletes_nothing(
        kb, store, allowed) -> None:
    site = _site()
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
        before = _paths(source)
        site.robots = "User-agent: *\nDisallow: /\n"
        job = sync(source)

    assert job.status == Job.Status.FAILED and "robots.txt" in job.error
    assert _paths(source) == before and before


def test_html_pages_become_documents(kb, store, allowed) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=1)
        job = sync(source)

    host = site.url.removeprefix("http://")
    assert f"src/{host}/index.html" in _paths(source)
    assert job.detail.get("failed", 0) == 0


def test_a_page_trickled_a_byte_at_a_time_is_cut_at_its_total_bound(kb, store, allowed,
                                                                      settings) -> None:
    # Each byte comes well within the 1 s timeout of a read: only a total bound stops it
    # (the page held a sync 135 s against a 5 s timeout).
    settings.KB_SOURCE_HTTP_TIMEOUT_SECONDS = 1
    site = _site()
    site.trickle["/guide/setup.md"] = 0.2  # its whole answer takes about 25 s
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=2)
        started = time.monotonic()
        job = sync(source)
        took = time.monotonic() - started

    assert took < 8, took
    assert job.status == Job.Status.SUCCEEDED
    assert any(line["message"].startswith("failed: ") and "setup.md: timed out"
               in line["message"] for line in job.log), job.log
    assert job.detail["added"] == 3  # "/", start.md and deep/one.md


def test_trickled_headers_of_robots_txt_end_the_sync_at_the_bound(kb, store, allowed,
                                                                   settings) -> None:
    settings.KB_SOURCE_HTTP_TIMEOUT_SECONDS = 1
    site = _site()
    site.trickle["/robots.txt"] = 0.2
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/")
        started = time.monotonic()
        job = sync(source)
        took = time.monotonic() - started

    assert took < 5, took
    assert (job.status, job.error) == (Job.Status.FAILED, "robots.txt timed out "
                                                          "(KB_SOURCE_HTTP_TIMEOUT_SECONDS)")


def test_max_page_bytes_is_at_most_the_upload_limit_when_saved(kb, settings) -> None:
    settings.KB_MAX_UPLOAD_BYTES = 100_000
    body = {"dataset_id": kb.dataset.pk, "name": "s", "kind": "web",
            "location": "https://example.org/", "max_page_bytes": 2**31 - 1}

    answer = kb.admin.post("/api/sources", body, format="json")

    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_source")
    assert answer.json()["extra"]["fields"]["max_page_bytes"] == (
        "at most KB_MAX_UPLOAD_BYTES (100000): a larger page could not be stored")
    created = kb.admin.post("/api/sources", {k: v for k, v in body.items()
                                             if k != "max_page_bytes"}, format="json")
    assert created.status_code == 201 and created.json()["max_page_bytes"] == 100_000
    changed = kb.admin.patch(f"/api/sources/{created.json()['id']}",
                             {"max_page_bytes": 100_001}, format="json")
    assert changed.status_code == 400 and "max_page_bytes" in changed.json()["extra"]["fields"]


def test_a_page_is_read_no_further_than_the_upload_limit_whatever_the_row_says(
        kb, store, allowed, settings) -> None:
    site = _site()
    site.pages["/guide/setup.md"] = (MD, doc("Setup", "x" * 50_000))
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=2)
        Source.objects.filter(pk=source.pk).update(max_page_bytes=2**31 - 1)  # saved before
        settings.KB_MAX_UPLOAD_BYTES = 4096
        job = sync(Source.objects.get(pk=source.pk))

    assert any(line["message"].startswith("failed: ") and "setup.md: over 4096 bytes "
               "(KB_MAX_UPLOAD_BYTES)" in line["message"] for line in job.log), job.log


def test_a_start_page_over_its_bound_says_so(kb, store, allowed) -> None:
    site = _site()
    site.pages["/"] = (HTML, b"<p>" + b"x" * 5000 + b"</p>")
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/",
                             max_page_bytes=2048)
        job = sync(source)

    assert (job.status, job.error) == (
        Job.Status.FAILED, "the start page could not be read: over 2048 bytes (max_page_bytes)")


def test_robots_txt_is_read_as_crawlers_read_it(kb, store, allowed) -> None:
    # The most specific rule wins (the standard library took the first that matched) and
    # wildcards match (the standard library ignored them).
    site = _site()
    site.robots = ("User-agent: *\nDisallow: /private/\nAllow: /private/public.md\n"
                   "Disallow: /*/deep/*.md$\n")
    site.pages["/"] = (HTML, b'<a href="/private/public.md">p</a> <a href="/private/x.md">x</a>'
                             b' <a href="/guide/start.md">s</a>')
    site.pages["/private/public.md"] = (MD, doc("Public"))
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        job = sync(source)

    fetched = {path for path, _ in site.hits}
    assert "/private/public.md" in fetched and "/private/x.md" not in fetched
    assert "/guide/setup.md" in fetched and "/guide/deep/one.md" not in fetched
    assert job.status == Job.Status.SUCCEEDED


def test_crawl_delay_paces_the_requests(kb, store, allowed) -> None:
    site = _site()
    site.robots = "User-agent: *\nCrawl-delay: 0.4\n"
    stamps: list[float] = []
    with web_site(site):
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=1)
        site.on_hit = lambda: stamps.append(time.monotonic())
        job = sync(source)

    pages = stamps[1:]  # robots.txt first, then "/" and the three same-site pages it links to
    assert job.status == Job.Status.SUCCEEDED and len(pages) == 4
    assert min(b - a for a, b in zip(pages, pages[1:], strict=False)) >= 0.4


def test_a_crawl_delay_past_the_deadline_stops_the_crawl_and_deletes_nothing(
        kb, store, allowed, settings) -> None:
    with web_site(_site()) as site:
        source = make_source(kb.dataset, kind="web", location=f"{site.url}/", max_depth=3)
        sync(source)
        before = _paths(source)
        site.robots = "User-agent: *\nCrawl-delay: 3600\n"  # the sync has 60 s
        settings.KB_SOURCE_SYNC_TIMEOUT_SECONDS = 60
        site.hits.clear()
        started = time.monotonic()
        job = sync(source)

    assert time.monotonic() - started < 10
    assert [path for path, _ in site.hits] == ["/robots.txt", "/"]
    assert job.status == Job.Status.SUCCEEDED and _paths(source) == before
    assert any("read in part (robots.txt asks 3600 s between requests" in line["message"]
               for line in job.log), job.log
