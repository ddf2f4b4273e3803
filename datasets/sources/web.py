"""A web site as a source: from a start page or a sitemap, same-site links only, bounded in
depth, pages and bytes, robots.txt honoured, every request through kbplatform/outbound.py;
a page is fetched with its ETag / Last-Modified and a 304 keeps its document as it is."""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Iterator, Mapping
from html.parser import HTMLParser
from posixpath import basename, splitext
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.etree import ElementTree

import httpx2
from django.conf import settings
from protego import Protego

from datasets.models import Source
from datasets.sources.base import Deadline, Item, SyncFailed
from datasets.sources.http import AGENT, Answer, bounded_request
from kbplatform import outbound

logger = logging.getLogger(__name__)

REDIRECTS = (301, 302, 303, 307, 308)
GONE = (404, 410)
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.found += [value for name, value in attrs if name == "href" and value]


def page_path(url: str) -> str:
    """The page's path in the source: host[:port] and URL path; a name without a suffix (a
    folder, `/guide/setup`) is an HTML page's: `index.html`, `setup.html`."""
    parts = urlsplit(url)
    path = parts.path or "/"
    if path.endswith("/"):
        path += "index.html"
    elif not splitext(basename(path))[1]:
        path += ".html"
    return f"{parts.netloc.lower()}{path}"


def _link(url: str) -> str:
    """The page's address as evidence links to it; none for one with a query (a start page
    given as `…?token=…` would hand its token to every reader of the dataset)."""
    return "" if urlsplit(url).query else url


def links_of(body: bytes, content_type: str, base: str) -> list[str]:
    """The URLs a page links to: an HTML page's <a href>, a markdown page's [..](..), a
    sitemap's <loc>s."""
    text = body.decode("utf-8", "replace")
    if "xml" in content_type or text.lstrip().startswith("<?xml"):
        return _sitemap(text)
    if "html" in content_type:
        parser = _Links()
        parser.feed(text)
        found = parser.found
    else:
        found = MARKDOWN_LINK.findall(text)
    return [urldefrag(urljoin(base, link))[0] for link in found]


def _sitemap(text: str) -> list[str]:
    try:
        root = ElementTree.fromstring(text)  # noqa: S314 - bounded body; no entities expanded
    except ElementTree.ParseError:
        return []
    return [el.text.strip() for el in root.iter() if el.tag.endswith("loc") and el.text]


class WebReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        start = urlsplit(source.location)
        self.site = (start.scheme.lower(), start.netloc.lower())
        # A page is read to the smaller bound only, whatever the source says: more could not
        # be stored (the service refuses a larger max_page_bytes; a row may predate that).
        self.max_bytes, self.bound = (
            (source.max_page_bytes, "max_page_bytes")
            if source.max_page_bytes <= settings.KB_MAX_UPLOAD_BYTES
            else (settings.KB_MAX_UPLOAD_BYTES, "KB_MAX_UPLOAD_BYTES"))
        self.http = outbound.client(max_response_bytes=settings.KB_MAX_UPLOAD_BYTES)
        self.links_before: dict[str, list[str]] = dict(source.state.get("links", {}))
        self.links: dict[str, list[str]] = {}  # what the source's state keeps after the sync
        # The links kept, in all: a page past it is fetched whole next time (no 304 without
        # its links, or the pages below it would look gone).
        self.link_budget = settings.KB_SOURCE_MAX_FILES

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        robots = self._robots()
        delay = _delay(robots)
        start = urldefrag(self.source.location)[0]
        if not robots.can_fetch(start, AGENT):
            # Not "every page is gone": a robots.txt changed by mistake would empty the dataset.
            raise SyncFailed("robots.txt disallows the start page")
        queue, queued = deque([(start, 0)]), {start}
        fetched, next_at = 0, 0.0
        while queue:
            self.deadline.check()
            url, depth = queue.popleft()
            if fetched >= self.source.max_pages:
                # pages past the bound may exist: none is deleted
                self.partial = f"max_pages {self.source.max_pages}"
                break
            if not robots.can_fetch(url, AGENT):
                continue  # not the source's any more: its document goes
            wait = next_at - time.monotonic()
            if wait > 0 and not self.deadline.allows(wait):
                # The site's pace does not fit the sync's time: read in part, none deleted.
                self.partial = (f"robots.txt asks {delay:g} s between requests: the next "
                                "would pass KB_SOURCE_SYNC_TIMEOUT_SECONDS")
                break
            time.sleep(max(wait, 0))
            fetched += 1
            path = page_path(url)
            item, links = self._page(url, path, known.get(path, ""), first=url == start)
            next_at = time.monotonic() + delay
            for link in links if depth < self.source.max_depth else []:
                if link not in queued:
                    queued.add(link)
                    queue.append((link, depth + 1))
            self.expected = min(len(queued), self.source.max_pages)
            if item is not None:
                yield item

    def _page(self, url: str, path: str, version: str, *, first: bool
              ) -> tuple[Item | None, list[str]]:
        """The page as an item (None: not a document: gone, a sitemap, a redirect) and the
        links it leads to."""
        try:
            response = self._get(url, version if url in self.links_before else "")
        except httpx2.HTTPError as exc:
            if first:
                raise SyncFailed(f"the start page could not be read: {self._failure(exc)}"
                                 ) from None
            # Kept: a page that did not answer this time may answer the next.
            return (Item(path, version, failure=self._failure(exc)),
                    self.links_before.get(url, []))
        status = response.status
        if status == 304 and url in self.links_before:
            return Item(path, version, url=_link(url)), self._keep(url, self.links_before[url])
        if status in REDIRECTS:
            target = urldefrag(urljoin(url, response.headers.get("location", "")))[0]
            return None, [target] if self._same_site(target) else []  # followed as a link
        if status in GONE:
            if first:
                raise SyncFailed(f"the start page answered HTTP {status}")
            return None, []
        if status != 200:
            if first:
                raise SyncFailed(f"the start page answered HTTP {status}")
            return Item(path, version, failure=f"HTTP {status}"), self.links_before.get(url, [])
        content_type = response.headers.get("content-type", "").lower()
        links = self._keep(url, list(dict.fromkeys(
            link for link in links_of(response.body, content_type, url)
            if self._same_site(link)))[:self.source.max_pages])
        if "xml" in content_type:
            return None, links  # a sitemap leads to pages, it is none
        return Item(path, _version(response), raw=response.body, url=_link(url)), links

    def _keep(self, url: str, links: list[str]) -> list[str]:
        """`links` of the page at `url`, kept for the next sync while the budget lasts."""
        if len(links) <= self.link_budget:
            self.links[url] = links
            self.link_budget -= len(links)
        return links

    def _get(self, url: str, version: str) -> Answer:
        headers = {"User-Agent": AGENT}
        kind, _, value = version.partition(":")
        if kind == "etag":
            headers["If-None-Match"] = value
        elif kind == "lm":
            headers["If-Modified-Since"] = value
        return self._request(url, headers)

    def _request(self, url: str, headers: dict[str, str]) -> Answer:
        """One GET, its body read to `max_bytes` at most (datasets/sources/http.py)."""
        return bounded_request(self.http, url, headers, deadline=self.deadline,
                               max_bytes=self.max_bytes)

    def _failure(self, exc: httpx2.HTTPError) -> str:
        """Why a page could not be read, as its owner may read it: the one message of every
        connection failure (kbplatform/outbound.py), a timeout, or the size bound."""
        if isinstance(exc, outbound.AnswerTooLarge):
            return f"over {exc.limit} bytes ({self.bound})"
        if isinstance(exc, httpx2.TimeoutException):
            return "timed out"
        return "could not connect"

    def _robots(self) -> Protego:
        """The site's robots.txt (none, a 4xx: everything allowed), read as crawlers read it
        (wildcards, the most specific rule wins, Crawl-delay); an unreachable site or a
        failing robots.txt fails the sync."""
        scheme, netloc = self.site
        try:
            response = self._request(f"{scheme}://{netloc}/robots.txt", {"User-Agent": AGENT})
        except outbound.AnswerTooLarge as exc:
            raise SyncFailed(f"robots.txt is over {exc.limit} bytes ({self.bound})") from None
        except httpx2.TimeoutException:
            raise SyncFailed("robots.txt timed out (KB_SOURCE_HTTP_TIMEOUT_SECONDS)") from None
        except httpx2.HTTPError:
            raise SyncFailed("could not connect to the site") from None
        if response.status == 200:
            return Protego.parse(response.body.decode("utf-8", "replace"))
        if 400 <= response.status < 500:
            return Protego.parse("")
        raise SyncFailed(f"robots.txt answered HTTP {response.status}")

    def _same_site(self, url: str) -> bool:
        parts = urlsplit(url)
        return ((parts.scheme.lower(), parts.netloc.lower()) == self.site and not parts.query
                and len(url) <= 900)


def _delay(robots: Protego) -> float:
    """The seconds robots.txt asks between two requests of ours (Crawl-delay, Request-rate)."""
    delay = robots.crawl_delay(AGENT) or 0.0
    rate = robots.request_rate(AGENT)
    if rate is not None and rate.requests > 0:
        delay = max(delay, rate.seconds / rate.requests)
    return max(float(delay), 0.0)


def _version(response: Answer) -> str:
    etag = response.headers.get("etag", "")
    if etag:
        return f"etag:{etag}"[:300]
    modified = response.headers.get("last-modified", "")
    return f"lm:{modified}"[:300] if modified else ""
