"""A Confluence space as a source (Cloud and Data Center, their REST API at
`<base>/rest/api/`): the space's current pages, listed whole with their version numbers (no
body) before any is read, so a listing that fails deletes nothing; a page's body (its storage
format, as HTML the converter reads) is read again only when its version moved; so is a file
attached to it, of a format the platform reads, downloaded again only when its version moved.
Who may read a page: who may view its space (Cloud's space permissions, one listing a sync),
and, with the listing, its view restrictions and those of the pages above it (which Confluence
applies to it too), each a level its readers must be within (readers_within); its attachments
are read by the same.

Every request goes through kbplatform/outbound.py. A source names its credential by variable:
`user:token` (Cloud: the account's email and an API token) is sent as HTTP Basic, a bare
`token` (Data Center: a personal access token) as a Bearer token; none reads an anonymous
space. Atlassian's "too many requests" (429, with Retry-After) and server errors are asked
again (datasets/sources/http.py)."""

from __future__ import annotations

import base64
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from html import escape
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from datasets.ingestion.formats import SUFFIXES
from datasets.models import Source
from datasets.sources.base import (
    Deadline,
    Globs,
    Item,
    ItemFailed,
    SyncFailed,
    bounded,
    distinct_paths,
    listed_item,
    listing_moved,
    max_path,
    path_name,
    same_path,
    too_many,
)
from datasets.sources.http import AGENT, Answer, api_json, api_request, header_secret
from datasets.tenancy.permissions import (
    NOBODY,
    principal,
    readers_named,
    readers_within,
)
from kbplatform import outbound

PAGE_LIMIT = 100  # pages a listing request asks for (Confluence may answer fewer)
# What a listed page carries: its version, the pages above it, who may read it and the files
# attached to it (the first of them: more are listed apart).
EXPAND = ("version,ancestors,restrictions.read.restrictions.user,"
          "restrictions.read.restrictions.group,children.attachment.version,"
          "children.attachment.extensions")
REDIRECTS = (301, 302, 303, 307, 308)
PAGE_ID = re.compile(r"^[0-9]{1,20}$")
ATTACHMENT_ID = re.compile(r"^att[0-9]{1,20}$")
# A download link: the file's name percent-encoded (a long Chinese name takes 9 characters a
# character).
MAX_DOWNLOAD_CHARS = 8000
# How a restriction names each kind of principal: a user by email (when Cloud shows it) and
# account id (Cloud) or user name (Data Center), a group by name and id (Cloud).
PRINCIPAL_KEYS = (("user", ("email", "accountId", "username")), ("group", ("name", "id")))
PERMISSION_LIMIT = 250  # a space's permission assignments a request asks for (Cloud's most)
MAX_LISTING_BYTES = 4 << 20
MAX_NEXT_CHARS = 2000  # a listing's `next` link: Confluence's are a few hundred characters
# A page's JSON carries its storage format escaped: read up to twice the bytes it may hold.
BODY_OVERHEAD = 2
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
class Attachment:
    """A file attached to a page, of a format the platform reads, as a listing gives it."""

    id: str  # att<digits>
    stem: str  # its file name without its suffix
    suffix: str  # ".pdf", in lower case
    version: int
    size: int  # bytes, as Confluence says (0: not said)
    download: str  # below the site's base: /download/attachments/<page id>/<name>?…
    webui: str  # its preview below the site's base ("": none)


@dataclass(frozen=True)
class Listed:
    """A page as the space's listing gives it."""

    id: str
    ancestors: list[tuple[str, str]]  # (id, title) of each page above it, the top first
    title: str
    version: int
    webui: str  # its web link below the site's base
    restricted: list[str]  # who its own view restriction names ([]: none)
    attachments: list[Attachment]
    more: bool  # more files are attached to it than the listing holds


@dataclass(frozen=True)
class Content:
    """A page, or a file attached to one (`download`), as the sync reads it."""

    id: str
    path: str  # its ancestors' titles and its own: "Databases/MySQL/Replica lag.html"
    title: str
    version: str  # "<id>:v<number>": another page at its path is another version
    url: str
    readers: list[str]  # within the space's viewers, its page's and ancestors' restrictions
    size: int = 0
    download: str = ""


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
        self.cloud = False  # the credential is a Cloud account's (an account id)
        self.space_id = ""  # its number, as Confluence gives it
        self.space_readers: list[str] = []  # who may view the space ([]: no level)
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.longest = max_path(source)
        self.headers = {"User-Agent": AGENT}
        self.http = outbound.client(
            max_response_bytes=max(self.max_bytes * BODY_OVERHEAD, MAX_LISTING_BYTES))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        if not self.space:
            raise SyncFailed(space_refusal(self.source.location) or "")
        if self.source.secret_env:
            self.headers["Authorization"] = _authorization(self.source)
            self._known_user()
        self._space_readable()
        self.space_readers = self._space_readers()
        listed = self._listing()
        # Pages the globs leave are listed too: their documents go, not as missing pages.
        # Confluence's listing is by offset: before the documents of pages gone from it are
        # deleted, those pages are asked for. An attachment is never asked for (its page's
        # listing of them is whole).
        self.partial = listing_moved(known, ((c.path, c.id) for c in listed), self._current,
                                     "page", asked=str.isdigit)
        contents = [content for content in listed if self.globs(content.path)]
        self.expected = len(contents)
        for content in contents:
            read = self._download if content.download else self._body
            yield listed_item(content.path, content.version, content.size, known=known,
                              longest=self.longest, max_bytes=self.max_bytes,
                              read=partial(read, content), url=content.url,
                              readers=content.readers)

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
        self.cloud = isinstance(user.get("accountId"), str)  # Data Center's have user keys

    def _space_readable(self) -> None:
        """The space is there and the credential may read it: a listing of a space it may
        not see answers no page, which must not read as an emptied space."""
        answer = self._get(f"{self.base}/rest/api/space/{quote(self.space)}", MAX_LISTING_BYTES)
        if answer.status == 200:
            space = api_json(answer, "Confluence")
            if isinstance(space, dict) and isinstance(space.get("key"), str):
                self.space = space["key"]  # as Confluence writes it
            if isinstance(space, dict) and PAGE_ID.match(str(space.get("id"))):
                self.space_id = str(space["id"])
            return
        named = f"the credential in {self.source.secret_env}" if self.source.secret_env else ""
        if answer.status == 401:
            raise SyncFailed(f"Confluence refused {named}" if named else
                             "Confluence asks for a credential: name its variable (secret_env)")
        if answer.status in (403, 404):
            reader = f" to {named}" if named else " to anonymous readers"
            raise SyncFailed(f"no space {self.space} at {self.base} that is visible{reader}")
        raise SyncFailed(f"Confluence answered {answer.status}")

    def _space_readers(self) -> list[str]:
        """Who may view the space (Cloud's permission assignments that `read` it: users by
        account id, groups by id), a level every page's readers are within; [] (no level) on a
        Data Center (it shows them to a space's admins alone) or without a credential (the
        space is open to anonymous readers). A role (anonymous access among them) names no one
        and is left out; no one left, or more than readers may name: NOBODY. On Cloud, an
        answer that does not say fails the sync."""
        if not self.cloud:
            return []
        if not self.space_id:
            raise SyncFailed("Confluence's answer for the space gives it no id")
        return readers_named(self._viewers(), restricts=True)

    def _viewers(self) -> Iterator[str]:
        """The principals the space's permission assignments let `read` it, page after page
        as they are read."""
        context = urlsplit(self.base).path  # "/wiki"
        resource = f"/api/v2/spaces/{self.space_id}/permissions"
        for result in self._paged(
                f"{self.base}{resource}?limit={PERMISSION_LIMIT}", "the space's permissions",
                lambda following: _bounded_link(following, f"{context}{resource}?"),
                root=self.base.removesuffix(context)):
            try:
                operation, who = result["operation"], result["principal"]
                if (operation["key"], operation["targetType"]) != ("read", "space") or \
                        who["type"] not in ("user", "group"):
                    continue
                if not isinstance(who["id"], str):
                    raise TypeError(who["id"])
                viewer = principal(f"{who['type']}:{who['id']}")
            except (KeyError, TypeError, ValidationError):
                raise SyncFailed("Confluence's answer to the space's permissions gives one no "
                                 "operation or principal") from None
            yield viewer

    def _listing(self) -> list[Content]:
        """Every current page of the space with its version and the files attached to it:
        the whole listing or SyncFailed. A page listed twice (the listing moved under a
        change) counts once."""
        query = {"spaceKey": self.space, "type": "page", "status": "current",
                 "limit": str(PAGE_LIMIT), "start": "0", "expand": EXPAND}
        found: dict[str, Listed] = {}
        attached = 0  # the attachments of the pages in `found`
        for result in self._paged(f"{self.base}/rest/api/content?{urlencode(query)}",
                                  "the space's listing", self._continues):
            listed = _listed(result)
            if listed.more:  # the listing holds the first of them only
                listed = replace(listed, attachments=self._attachments(listed.id), more=False)
            before = found.get(listed.id)
            attached += len(listed.attachments) - (len(before.attachments) if before else 0)
            found[listed.id] = listed
            if len(found) + attached > settings.KB_SOURCE_MAX_FILES:
                raise too_many()
        return self._contents(found)

    def _attachments(self, page_id: str) -> list[Attachment]:
        """Every file attached to the page that the platform reads, or SyncFailed."""
        resource = f"/rest/api/content/{quote(page_id)}/child/attachment"
        query = {"limit": str(PAGE_LIMIT), "start": "0", "expand": "version,extensions"}
        found: dict[str, Attachment] = {}
        for result in self._paged(f"{self.base}{resource}?{urlencode(query)}",
                                  f"page {page_id}'s attachments",
                                  lambda following: _bounded_link(following, f"{resource}?")):
            attachment = _attachment(result)
            if attachment is not None:
                found[attachment.id] = attachment
            if len(found) > settings.KB_SOURCE_MAX_FILES:
                raise too_many()
        return list(found.values())

    def _paged(self, url: str, what: str, continues: Callable[[str], bool], *,
               root: str = "") -> Iterator[Any]:
        """The results of a listing, page after page while its `_links.next` continues it
        (`root`, the site's base by default, is put before the link: the v2 API's are below the
        site's origin); SyncFailed on a failed answer, one that is no listing, or a next page
        asked already or after a page without a new result."""
        asked: set[str] = set()
        seen: set[str] = set()
        while True:
            self.deadline.check()
            asked.add(url)
            answer = self._get(url, MAX_LISTING_BYTES)
            if answer.status != 200:
                raise SyncFailed(f"Confluence answered {answer.status} to {what}")
            listing = api_json(answer, "Confluence")
            results = listing.get("results") if isinstance(listing, dict) else None
            if not isinstance(results, list):
                raise SyncFailed(f"Confluence's answer to {what} is not a listing")
            new = 0
            for result in results:
                key = str(result.get("id")) if isinstance(result, dict) else ""
                new += key not in seen
                seen.add(key)
                yield result
            links = listing.get("_links")
            following = links.get("next") if isinstance(links, dict) else None
            if not following:
                return
            url = f"{root or self.base}{following}" if isinstance(following, str) else ""
            if not isinstance(following, str) or not continues(following) or url in asked \
                    or not new:
                raise SyncFailed(f"Confluence's {what} goes on without a new page of results")

    def _continues(self, following: str) -> bool:
        """A `next` link of the space's listing: the same resource and space, bounded."""
        if not _bounded_link(following, "/rest/api/content?"):
            return False
        query = parse_qs(urlsplit(following).query)
        return (query.get("spaceKey"), query.get("type"), query.get("status")) == (
            [self.space], ["page"], ["current"])

    def _contents(self, found: Mapping[str, Listed]) -> list[Content]:
        """The pages named by their title paths, each followed by its attachments named in
        its folder (`Operations/Replica lag.html`, `Operations/Replica lag/diagram.pdf`).
        Pages whose paths read the same (to a database: case and accents aside) each get
        their id after the title; an attachment whose path reads as another's gets its id
        before its suffix. A page's readers are within who may view the space, its own
        restrictions and those of each page above it; its attachments', its own."""
        paths = distinct_paths({
            page.id: "/".join(path_name(t) for t in [*(a for _, a in page.ancestors), page.title])
            for page in found.values()})
        files = {file.id: f"{paths[page.id]}/{path_name(file.stem)}"
                 for page in found.values() for file in page.attachments}
        taken = Counter(same_path(f"{path}.html") for path in paths.values())
        taken.update(same_path(f"{files[file.id]}{file.suffix}")
                     for page in found.values() for file in page.attachments)
        contents = []
        for page in found.values():
            # Above it, something the listing does not hold (a Cloud folder, a parent moved
            # meanwhile) restricts it in a way the sync cannot know: no agent reads it.
            above = [found[a].restricted if a in found else [NOBODY] for a, _ in page.ancestors]
            readers = readers_within(self.space_readers, page.restricted, *above)
            url = f"{self.base}{page.webui}" if page.webui.startswith("/") else ""
            contents.append(Content(id=page.id, path=f"{paths[page.id]}.html", title=page.title,
                                    version=f"{page.id}:v{page.version}", url=url,
                                    readers=readers))
            for file in page.attachments:
                path = files[file.id]
                if taken[same_path(f"{path}{file.suffix}")] > 1:
                    path = f"{path} ({file.id})"
                contents.append(Content(
                    id=file.id, path=f"{path}{file.suffix}", title=file.stem,
                    version=f"{file.id}:v{file.version}",
                    url=f"{self.base}{file.webui}" if file.webui.startswith("/") else url,
                    readers=readers, size=file.size, download=file.download))
        return contents

    def _current(self, page_id: str) -> bool:
        answer = self._get(f"{self.base}/rest/api/content/{quote(page_id)}?expand=space",
                           MAX_LISTING_BYTES)
        page = api_json(answer, "Confluence") if answer.status == 200 else None
        return isinstance(page, dict) and page.get("status") == "current" and \
            page.get("type") == "page" and (page.get("space") or {}).get("key") == self.space

    def _body(self, page: Content) -> bytes:
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
        return bounded(storage_html(page.title, storage), self.max_bytes)

    def _download(self, file: Content) -> bytes:
        """An attachment's bytes. Cloud answers with a redirect to its media store, whose
        address carries its own token: asked once, without the source's credential."""
        answer = self._get(f"{self.base}{file.download}", self.max_bytes, page=True,
                           accept="*/*")
        if answer.status in REDIRECTS:
            answer = self._media(answer.headers.get("location", ""))
        if answer.status == 404:
            raise ItemFailed("gone since the listing")
        if answer.status != 200:
            raise ItemFailed(f"Confluence answered {answer.status}")
        return answer.body

    def _media(self, location: str) -> Answer:
        """The answer of the media store a download's redirect names: another site (a login
        page of the site itself is no file), one the outbound policy admits; a failure is the
        file's line."""
        try:
            elsewhere = urlsplit(location).netloc.lower() != urlsplit(self.base).netloc.lower()
        except ValueError:
            elsewhere = False
        if not elsewhere or outbound.url_refusal(location):
            raise ItemFailed("Confluence redirected the download where the sync does not follow")
        try:
            return api_request(self.http, location, {"User-Agent": AGENT, "Accept": "*/*"},
                               item=True, deadline=self.deadline, max_bytes=self.max_bytes,
                               site="Confluence's media store")
        except SyncFailed as exc:  # the store alone is unreachable: this file's line
            raise ItemFailed(str(exc)) from None

    def _get(self, url: str, max_bytes: int, *, page: bool = False,
             accept: str = "application/json") -> Answer:
        return api_request(self.http, url, {**self.headers, "Accept": accept},
                           deadline=self.deadline, max_bytes=max_bytes, site="Confluence",
                           item=page)


def _listed(result: Any) -> Listed:
    """A listed page, or SyncFailed when it has no id, title or version."""
    try:
        ancestors = [(str(a["id"]), str(a["title"])) for a in result.get("ancestors") or []]
        links = result.get("_links") or {}
        # Its attachments as the listing expands them; not expanded (an older server): all
        # are listed apart, so none is taken for deleted.
        files = (result.get("children") or {}).get("attachment")
        attachments = [a for a in map(_attachment, files["results"] if files is not None else [])
                       if a is not None]
        more = files is None or _goes_on(files)
        if not PAGE_ID.match(str(result["id"])):
            raise ValueError(result["id"])
        return Listed(id=str(result["id"]), ancestors=ancestors, title=str(result["title"]),
                      version=int(result["version"]["number"]),
                      webui=str(links.get("webui") or ""), restricted=_restricted(result),
                      attachments=attachments, more=more)
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        raise SyncFailed("Confluence's listing gives a page no id, title or version") from None


def _attachment(result: Any) -> Attachment | None:
    """A listed attachment; None when the platform does not read its format (an image, an
    archive); SyncFailed when it has no id, name, version or download link."""
    try:
        title, links = result["title"], result.get("_links") or {}
        stem, dot, suffix = title.rpartition(".")
        if not (dot and stem.strip() and f".{suffix.lower()}" in SUFFIXES):
            return None
        extensions = result.get("extensions") or {}
        size, download, key = extensions.get("fileSize"), links.get("download"), result["id"]
        if not isinstance(download, str) or not ATTACHMENT_ID.match(str(key)) or \
                not _bounded_link(download, "/download/attachments/", MAX_DOWNLOAD_CHARS):
            raise TypeError(title)
        return Attachment(id=str(key), stem=stem, suffix=f".{suffix.lower()}",
                          version=int(result["version"]["number"]),
                          size=size if type(size) is int and size >= 0 else 0,
                          download=download, webui=str(links.get("webui") or ""))
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        raise SyncFailed("Confluence's listing gives an attachment no id, name, version or "
                         "download link") from None


def _goes_on(part: Mapping[str, Any]) -> bool:
    """Whether an expanded list says more follow than it holds: a next link, or as many as
    its limit."""
    size, limit = part.get("size"), part.get("limit")
    return bool((part.get("_links") or {}).get("next")) or (
        type(size) is int and type(limit) is int and size >= limit > 0)


def _bounded_link(link: str, resource: str, longest: int = MAX_NEXT_CHARS) -> bool:
    """A link of Confluence's below the site's base: to `resource`, bounded, no control
    character or space."""
    return len(link) <= longest and link.startswith(resource) and \
        not any(ord(c) < 33 or ord(c) == 127 for c in link)


def _restricted(result: Mapping[str, Any]) -> list[str]:
    """Who a listed page's own view restriction names ([]: it has none): its users (by email
    where Confluence shows it, and by account id or user name) and groups. A list that says
    more follow, or someone it does not name, is more than readers may say (NOBODY); a listing
    that does not give both lists fails the sync, as a page read without them could leak."""
    names: list[str] = []
    try:
        named = result["restrictions"]["read"]["restrictions"]
        for kind, keys in PRINCIPAL_KEYS:
            part = named[kind]
            if not isinstance(part["results"], list):
                raise TypeError(kind)
            if _goes_on(part):
                return [NOBODY]
            for entry in part["results"]:
                ids = [f"{kind}:{entry[key]}" for key in keys
                       if isinstance(entry.get(key), str) and entry[key]]
                if not ids:
                    return [NOBODY]
                names += ids
    except (AttributeError, KeyError, TypeError):
        raise SyncFailed("Confluence's listing does not say who may read its pages (their "
                         "read restrictions): nothing is synced without them") from None
    return readers_named(names)


def _authorization(source: Source) -> str:
    """`user:token` as HTTP Basic (Cloud), a bare token as a Bearer token (Data Center)."""
    secret = header_secret(source)
    if ":" in secret:
        return "Basic " + base64.b64encode(secret.encode()).decode()
    return f"Bearer {secret}"
