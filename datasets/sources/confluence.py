"""A Confluence space as a source (Cloud and Data Center, their REST API at
`<base>/rest/api/`): the space's current pages, listed whole with their version numbers (no
body) before any is read, so a listing that fails deletes nothing; a page's body (its storage
format, as HTML the converter reads) is read again only when its version moved.

Every request goes through kbplatform/outbound.py. A source names its credential by variable:
`user:token` (Cloud: the account's email and an API token) is sent as HTTP Basic, a bare
`token` (Data Center: a personal access token) as a Bearer token; none reads an anonymous
space. Atlassian's "too many requests" (429, with Retry-After) and server errors are asked
again (datasets/sources/http.py)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from html import escape
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from django.conf import settings

from datasets.models import Source
from datasets.sources.base import (
    Deadline,
    Globs,
    Item,
    ItemFailed,
    SyncFailed,
    distinct_paths,
    listed_item,
    max_path,
    path_name,
    too_many,
)
from datasets.sources.http import AGENT, Answer, api_json, api_request, header_secret
from kbplatform import outbound

PAGE_LIMIT = 100  # pages a listing request asks for (Confluence may answer fewer)
MAX_LISTING_BYTES = 4 << 20
MAX_NEXT_CHARS = 2000  # a listing's `next` link: Confluence's are a few hundred characters
# A page's JSON carries its storage format escaped: read up to twice the bytes it may hold.
BODY_OVERHEAD = 2
# Pages missing from a listing that the sync asks for one by one before their documents are
# deleted (a page that is still current means the listing skipped it: nothing is deleted).
MAX_CONFIRMED = 50
# The space's URL as its pages show it: <base>/spaces/<KEY> (Cloud, and Data Center 8+) or
# <base>/display/<KEY> (Data Center); <base> is the site (Cloud: https://<site>/wiki).
SPACE_URL = re.compile(r"^(?P<base>https?://[^/?#]+(?:/[^?#]*?)?)/(?:spaces|display)/"
                       r"(?P<key>~?[A-Za-z0-9@][A-Za-z0-9_.@-]{0,254})(?:/overview)?/?$",
                       re.IGNORECASE)
# The storage format's code and no-format macros keep their text in CDATA, which an HTML
# parser drops: each CDATA becomes its escaped text (a <pre> inside a macro's plain-text
# body), in one pass, before anything else reads the markup, so no text of a page can form a
# tag below; a macro's parameters (a code block's language) are no text of the page.
CDATA = re.compile(r"(<ac:plain-text-body>\s*)?<!\[CDATA\[(.*?)\]\]>(\s*</ac:plain-text-body>)?",
                   re.S)
PARAMETER = re.compile(r"<ac:parameter\b[^<>]*>[^<]*</ac:parameter>")


@dataclass(frozen=True)
class Page:
    id: str
    path: str  # its ancestors' titles and its own: "Databases/MySQL/Replica lag.html"
    title: str
    version: str  # "<id>:v<number>": another page at its path is another version
    url: str


def space_of(location: str) -> tuple[str, str] | None:
    """(the site's base URL, the space key) of a space's URL, None when it is not one."""
    found = SPACE_URL.match(location)
    if found is None or urlsplit(location).query or found.group("key").strip(".~") == "":
        return None
    return found.group("base"), found.group("key")


def space_refusal(location: str) -> str | None:
    if space_of(location) is None:
        return ("the space's URL as Confluence shows it: https://<site>/wiki/spaces/<KEY> "
                "(Cloud) or https://<host>/display/<KEY> (Data Center)")
    return None


def storage_html(title: str, storage: str) -> bytes:
    """A page's storage format as an HTML page the converter reads, titled as the page."""

    def text(found: re.Match[str]) -> str:
        inside = escape(found.group(2))
        return f"<pre>{inside}</pre>" if found.group(1) and found.group(3) else inside

    body = PARAMETER.sub("", CDATA.sub(text, storage))
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"</head><body>{body}</body></html>").encode("utf-8", "replace")


class ConfluenceReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.base, self.space = space_of(source.location) or ("", "")
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.longest = max_path(source)
        self.headers = {"User-Agent": AGENT, "Accept": "application/json"}
        self.http = outbound.client(
            max_response_bytes=max(self.max_bytes * BODY_OVERHEAD, MAX_LISTING_BYTES))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        if not self.space:
            raise SyncFailed(space_refusal(self.source.location) or "")
        if self.source.secret_env:
            self.headers["Authorization"] = _authorization(self.source)
            self._known_user()
        self._space_readable()
        listed = self._listing()
        # Pages the globs leave are listed too: their documents go, not as missing pages.
        self._confirm_missing(known, {page.path for page in listed})
        pages = [page for page in listed if self.globs(page.path)]
        self.expected = len(pages)
        for page in pages:
            yield listed_item(page.path, page.version, 0, known=known, longest=self.longest,
                              max_bytes=self.max_bytes, read=partial(self._body, page),
                              url=page.url)

    def _known_user(self) -> None:
        """Cloud serves a credential it does not take as an anonymous caller on a site open
        to them: a space's listing would then lose every restricted page."""
        answer = self._get(f"{self.base}/rest/api/user/current", MAX_LISTING_BYTES)
        if answer.status == 401:
            raise SyncFailed(f"Confluence refused the credential in {self.source.secret_env}")
        user = api_json(answer, "Confluence") if answer.status == 200 else {}
        if not isinstance(user, dict) or user.get("type") == "anonymous":
            raise SyncFailed(f"Confluence reads the credential in {self.source.secret_env} as "
                             "an anonymous caller: check it")

    def _space_readable(self) -> None:
        """The space is there and the credential may read it: a listing of a space it may
        not see answers no page, which must not read as an emptied space."""
        answer = self._get(f"{self.base}/rest/api/space/{quote(self.space)}", MAX_LISTING_BYTES)
        if answer.status == 200:
            space = api_json(answer, "Confluence")
            if isinstance(space, dict) and isinstance(space.get("key"), str):
                self.space = space["key"]  # as Confluence writes it
            return
        named = f"the credential in {self.source.secret_env}" if self.source.secret_env else ""
        if answer.status == 401:
            raise SyncFailed(f"Confluence refused {named}" if named else
                             "Confluence asks for a credential: name its variable (secret_env)")
        if answer.status in (403, 404):
            reader = f" to {named}" if named else " to anonymous readers"
            raise SyncFailed(f"no space {self.space} at {self.base} that is visible{reader}")
        raise SyncFailed(f"Confluence answered {answer.status}")

    def _listing(self) -> list[Page]:
        """Every current page of the space with its version: the whole listing or
        SyncFailed. A page listed twice (the listing moved under a change) counts once."""
        query = {"spaceKey": self.space, "type": "page", "status": "current",
                 "limit": str(PAGE_LIMIT), "start": "0", "expand": "version,ancestors"}
        url = f"{self.base}/rest/api/content?{urlencode(query)}"
        found: dict[str, tuple[list[str], str, int, str]] = {}
        asked: set[str] = set()
        while True:
            self.deadline.check()
            asked.add(url)
            answer = self._get(url, MAX_LISTING_BYTES)
            if answer.status != 200:
                raise SyncFailed(f"Confluence answered {answer.status} to the space's listing")
            listing = api_json(answer, "Confluence")
            results = listing.get("results") if isinstance(listing, dict) else None
            if not isinstance(results, list):
                raise SyncFailed("Confluence's answer is not a listing of pages")
            new = 0
            for result in results:
                page_id, ancestors, title, version, webui = _listed(result)
                new += page_id not in found
                found[page_id] = (ancestors, title, version, webui)
                if len(found) > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
            links = listing.get("_links")
            following = links.get("next") if isinstance(links, dict) else None
            if not following:
                return self._pages(found)
            url = f"{self.base}{following}" if isinstance(following, str) else ""
            if not self._continues(following) or url in asked or not new:
                raise SyncFailed("Confluence's listing goes on without a new page of results")

    def _continues(self, following: Any) -> bool:
        """A `next` link of this listing: the same resource and space, bounded."""
        if not isinstance(following, str) or len(following) > MAX_NEXT_CHARS or \
                not following.startswith("/rest/api/content?") or \
                any(ord(c) < 33 or ord(c) == 127 for c in following):
            return False
        query = parse_qs(urlsplit(following).query)
        return (query.get("spaceKey"), query.get("type"), query.get("status")) == (
            [self.space], ["page"], ["current"])

    def _pages(self, found: Mapping[str, tuple[list[str], str, int, str]]) -> list[Page]:
        """The pages named by their title paths; pages whose paths read the same (to a
        database: case and accents aside) each get their id after the title."""
        paths = distinct_paths({page_id: "/".join(path_name(t) for t in [*ancestors, title])
                                for page_id, (ancestors, title, _, _) in found.items()})
        pages = []
        for page_id, (_, title, version, webui) in found.items():
            path = paths[page_id]
            pages.append(Page(id=page_id, path=f"{path}.html", title=title,
                              version=f"{page_id}:v{version}",
                              url=f"{self.base}{webui}" if webui.startswith("/") else ""))
        return pages

    def _confirm_missing(self, known: Mapping[str, str], listed: set[str]) -> None:
        """Before the documents of pages missing from the listing are deleted, ask for those
        pages: one still current in the space was skipped by a listing that moved under a
        change (Confluence's is by offset), so nothing is deleted this time."""
        missing = [version.partition(":")[0] for path, version in known.items()
                   if path not in listed and ":v" in version]
        for page_id in missing[:MAX_CONFIRMED]:
            answer = self._get(f"{self.base}/rest/api/content/{quote(page_id)}?expand=space",
                               MAX_LISTING_BYTES)
            page = api_json(answer, "Confluence") if answer.status == 200 else None
            if isinstance(page, dict) and page.get("status") == "current" and \
                    page.get("type") == "page" and \
                    (page.get("space") or {}).get("key") == self.space:
                self.partial = (f"page {page_id} is current but was not listed: the listing "
                                "moved under a change")
                return
        if len(missing) > MAX_CONFIRMED:
            self.partial = (f"{len(missing)} pages are gone from the listing, more than the "
                            f"{MAX_CONFIRMED} a sync confirms; the next sync deletes them")

    def _body(self, page: Page) -> bytes:
        answer = self._get(f"{self.base}/rest/api/content/{quote(page.id)}?expand=body.storage",
                           self.max_bytes * BODY_OVERHEAD, page=True)
        if answer.status == 404:
            raise ItemFailed("gone since the listing")
        if answer.status != 200:
            raise ItemFailed(f"Confluence answered {answer.status}")
        try:
            storage = api_json(answer, "Confluence")["body"]["storage"]["value"]
        except (SyncFailed, KeyError, TypeError):
            raise ItemFailed("Confluence's answer holds no storage format") from None
        if not isinstance(storage, str):
            raise ItemFailed("Confluence's answer holds no storage format")
        raw = storage_html(page.title, storage)
        if len(raw) > self.max_bytes:
            raise ItemFailed(f"{len(raw)} bytes, over KB_MAX_UPLOAD_BYTES ({self.max_bytes})")
        return raw

    def _get(self, url: str, max_bytes: int, *, page: bool = False) -> Answer:
        return api_request(self.http, url, self.headers, deadline=self.deadline,
                           max_bytes=max_bytes, site="Confluence", item=page)


def _listed(result: Any) -> tuple[str, list[str], str, int, str]:
    """(id, ancestors' titles, title, version number, web link) of a listed page."""
    try:
        ancestors = [str(a["title"]) for a in result.get("ancestors") or []]
        links = result.get("_links") or {}
        return (str(result["id"]), ancestors, str(result["title"]),
                int(result["version"]["number"]), str(links.get("webui") or ""))
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        raise SyncFailed("Confluence's listing gives a page no id, title or version") from None



def _authorization(source: Source) -> str:
    """`user:token` as HTTP Basic (Cloud), a bare token as a Bearer token (Data Center)."""
    secret = header_secret(source)
    if ":" in secret:
        return "Basic " + base64.b64encode(secret.encode()).decode()
    return f"Bearer {secret}"
