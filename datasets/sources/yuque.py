"""A Yuque (语雀) book as a source (yuque.com and a team's own space, their OpenAPI at
`<site>/api/v2/`): the book's documents, listed whole with their update times (no body) before
any is read, so a listing that fails deletes nothing; a document's body is read again only when
it changed. Markdown documents are read as markdown, the others (Yuque's own "lake" format,
sheets, boards) as the HTML Yuque renders of them.

Who may read them, as far as Yuque's OpenAPI tells: a book (or a document) open to the
internet or to the whole space restricts nothing beyond the source's readers; a private one is
read by the members of the team that owns the book (`/api/v2/groups/<login>/users`, asked at
every sync that lists something private: someone who leaves the team reads it no more from the
next one), or by the person who owns it. The API lists no book's own members or
collaborators, so a book kept to some of its team is read by the whole team here: the source's
readers narrow it (docs/operations.md).

Every request goes through kbplatform/outbound.py, with the token the source's variable holds
in `X-Auth-Token` (none: a public book). Yuque's rate limit (429) and server errors are asked
again (datasets/sources/http.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from html import escape
from typing import Any
from urllib.parse import quote

from django.conf import settings

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
    too_many,
)
from datasets.sources.http import AGENT, Answer, api_json, api_request, header_secret
from datasets.tenancy.permissions import NOBODY, USER, readers_named
from kbplatform import outbound

PAGE_LIMIT = 100  # Yuque's most documents a listing request answers
MEMBERS_PAGE = 100  # a team's members come 100 an answer, by offset (Yuque's fixed page)
PRIVATE = 0  # a book's or document's `public`: 0 private, 1 the internet, 2 the whole space
OPEN = (1, 2)
MAX_LISTING_BYTES = 4 << 20
BODY_OVERHEAD = 2  # a document's JSON carries its body escaped
# The book's URL as Yuque shows it: https://<site>/<group or user>/<book>.
BOOK_URL = re.compile(r"^(?P<site>https?://[^/?#]+)/(?P<namespace>[A-Za-z0-9][\w.-]{0,99}/"
                      r"[A-Za-z0-9][\w.-]{0,99})/?$")


@dataclass(frozen=True)
class YuqueDoc:
    slug: str
    path: str
    title: str
    markdown: bool
    version: str  # "<id>:<content_updated_at>"
    url: str
    private: bool  # the document itself is not open (_open), whatever its book is


def _open(public: Any) -> bool:
    """Whether a book's or document's `public` opens it to more than its owners."""
    return type(public) is int and public in OPEN


def _user_name(user: Any) -> str:
    """A Yuque user as a reader: `user:<id>`, NOBODY when Yuque gives no id."""
    found = user.get("id") if isinstance(user, dict) else None
    return f"{USER}{found}" if type(found) is int else NOBODY


def book_of(location: str) -> tuple[str, str] | None:
    """(the site, the book's namespace `group/book`) of a book's URL, None when not one."""
    found = BOOK_URL.match(location)
    if found is None or found.group("namespace").startswith(("api/", "docs/")):
        return None
    return found.group("site"), found.group("namespace")


def book_refusal(location: str) -> str | None:
    if book_of(location) is None:
        return "the book's URL as Yuque shows it: https://www.yuque.com/<group>/<book>"
    return None


class YuqueReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.site, self.namespace = book_of(source.location) or ("", "")
        self.api = f"{self.site}/api/v2/repos/{self.namespace}"
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.longest = max_path(source)
        self.headers = {"User-Agent": AGENT, "Accept": "application/json"}
        self.http = outbound.client(
            max_response_bytes=max(self.max_bytes * BODY_OVERHEAD, MAX_LISTING_BYTES))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        if not self.namespace:
            raise SyncFailed(book_refusal(self.source.location) or "")
        if self.source.secret_env:
            self.headers["X-Auth-Token"] = header_secret(self.source, "token")
        book = self._book()
        listed = self._listing()
        # As a Confluence space's: a document gone from the offset listing but still in the
        # book means the listing moved under a change.
        self.partial = listing_moved(
            known, ((doc.path, doc.version.partition(":")[0]) for doc in listed),
            self._current, "document")
        docs = [doc for doc in listed if self.globs(doc.path)]
        self.expected = len(docs)
        closed = not _open(book["public"])
        # Worked out before any document is synced: a sync that cannot tell changes nothing.
        owners = self._owners(book) if closed or any(doc.private for doc in docs) else []
        for doc in docs:
            yield listed_item(doc.path, doc.version, 0, known=known, longest=self.longest,
                              max_bytes=self.max_bytes, read=partial(self._body, doc),
                              url=doc.url, readers=owners if closed or doc.private else [])

    def _book(self) -> dict[str, Any]:
        """The book as Yuque gives it, saying whom it is open to (`public`): it is there and
        the token may read it (a book it may no longer see must not read as an emptied
        one)."""
        answer = self._get(self.api, MAX_LISTING_BYTES)
        if answer.status == 200:
            reply = api_json(answer, "Yuque")
            book = reply.get("data") if isinstance(reply, dict) else None
            public = book.get("public") if isinstance(book, dict) else None
            if not isinstance(book, dict) or type(public) is not int or \
                    public not in (PRIVATE, *OPEN):
                raise SyncFailed("Yuque's answer does not say whom the book is open to")
            return book
        named = f"the token in {self.source.secret_env}" if self.source.secret_env else ""
        if answer.status == 401:
            raise SyncFailed(f"Yuque refused {named}" if named else
                             "Yuque asks for a token: name its variable (secret_env)")
        if answer.status in (403, 404):
            reader = f" to {named}" if named else " without a token"
            raise SyncFailed(f"no book {self.namespace} at {self.site} that is "
                             f"visible{reader}")
        raise SyncFailed(f"Yuque answered {answer.status}")

    def _owners(self, book: Mapping[str, Any]) -> list[str]:
        """Who reads what is private in `book`: the owning team's members, or the owning
        person (`user:<id>`: a login can be changed and taken again, an id cannot); over
        MAX_READERS, or one Yuque gives no id: NOBODY. SyncFailed when Yuque does not say who
        owns the book or the team's members cannot be read."""
        owner = book.get("user")
        kind, login = (owner.get("type"), owner.get("login")) if isinstance(owner, dict) else \
            (None, None)
        if kind not in ("Group", "User") or not isinstance(login, str) or not login:
            raise SyncFailed("Yuque's answer does not say who owns the book")
        members = self._members(login) if kind == "Group" else [owner]
        return readers_named(map(_user_name, members), restricts=True)

    def _members(self, team: str) -> Iterator[Any]:
        """The team's members as Yuque lists them, one answer at a time (readers_named reads
        no further than the one that decides)."""
        seen: set[str] = set()
        offset = 0
        while True:
            _, data = self._data(
                f"{self.site}/api/v2/groups/{quote(team)}/users?offset={offset}",
                f"when asked for the members of the team {team}, who read its private "
                "documents: the token must be one that may list them",
                "a list of a team's members")
            users = [m.get("user") if isinstance(m, dict) else None for m in data]
            names = [_user_name(user) for user in users]
            if data and seen.issuperset(names):
                raise SyncFailed("Yuque's list of a team's members goes on without new members")
            seen.update(names)
            yield from users
            offset += len(data)
            if len(data) < MEMBERS_PAGE:  # Yuque's page is fixed: a shorter one is the last
                return

    def _listing(self) -> list[YuqueDoc]:
        """Every published document of the book, named by its place in the book's table of
        contents: the whole listing or SyncFailed."""
        parents = self._toc()
        found: dict[str, dict[str, Any]] = {}
        offset = 0
        while True:
            listing, data = self._data(f"{self.api}/docs?offset={offset}&limit={PAGE_LIMIT}",
                                       "to the book's listing", "a listing of documents")
            new = 0
            for doc in data:
                if not isinstance(doc, dict) or "id" not in doc or "slug" not in doc:
                    raise SyncFailed("Yuque's listing gives a document no id or slug")
                new += str(doc["id"]) not in found
                found[str(doc["id"])] = doc
                if len(found) > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
            # Done at the total the answer gives (a page may hold fewer than asked), else at
            # an empty page.
            meta = listing.get("meta")
            total = meta.get("total") if isinstance(meta, dict) else None
            offset += len(data)
            if not data or (isinstance(total, int) and offset >= total):
                return self._docs(found, parents)
            if not new:
                raise SyncFailed("Yuque's listing goes on without new documents")

    def _toc(self) -> dict[str, list[str]]:
        """Each document's id → the titles of the table of contents' entries above it."""
        _, nodes = self._data(f"{self.api}/toc", "to the book's table of contents",
                              "a table of contents")
        by_uuid = {str(n.get("uuid")): n for n in nodes if isinstance(n, dict)}
        above: dict[str, list[str]] = {}
        for node in by_uuid.values():
            if node.get("type") != "DOC" or node.get("doc_id") is None:
                continue
            titles: list[str] = []
            seen: set[str] = set()
            parent = str(node.get("parent_uuid") or "")
            while parent in by_uuid and parent not in seen and len(titles) < 20:
                seen.add(parent)
                titles.insert(0, str(by_uuid[parent].get("title") or ""))
                parent = str(by_uuid[parent].get("parent_uuid") or "")
            above[str(node["doc_id"])] = titles
        return above

    def _docs(self, found: Mapping[str, dict[str, Any]],
              parents: Mapping[str, list[str]]) -> list[YuqueDoc]:
        paths = {}
        for doc_id, doc in found.items():
            if doc.get("status", 1) != 1:
                continue  # a draft never published
            paths[doc_id] = "/".join(path_name(str(t)) for t in
                                     [*parents.get(doc_id, []), str(doc.get("title") or "")])
        docs = []
        for doc_id, path in distinct_paths(paths).items():
            doc = found[doc_id]
            markdown = doc.get("format", "markdown") == "markdown"
            changed = doc.get("content_updated_at") or doc.get("updated_at") or ""
            slug = str(doc["slug"])
            docs.append(YuqueDoc(slug=slug, path=f"{path}{'.md' if markdown else '.html'}",
                                 title=str(doc.get("title") or ""), markdown=markdown,
                                 version=f"{doc_id}:{changed}",
                                 url=f"{self.site}/{self.namespace}/{quote(slug)}",
                                 private=not _open(doc.get("public"))))
        return docs

    def _data(self, url: str, asked: str, what: str) -> tuple[dict[str, Any], list[Any]]:
        """The answer to `url` and its `data` list; SyncFailed saying what was `asked` for when
        Yuque refuses it, and `what` it should be when it is no list."""
        self.deadline.check()
        answer = self._get(url, MAX_LISTING_BYTES)
        if answer.status != 200:
            raise SyncFailed(f"Yuque answered {answer.status} {asked}")
        reply = api_json(answer, "Yuque")
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list):
            raise SyncFailed(f"Yuque's answer is not {what}")
        return reply, data

    def _current(self, doc_id: str) -> bool:
        answer = self._get(f"{self.api}/docs/{quote(doc_id)}", MAX_LISTING_BYTES)
        doc = api_json(answer, "Yuque") if answer.status == 200 else None
        data = doc.get("data") if isinstance(doc, dict) else None
        return isinstance(data, dict) and data.get("status", 1) == 1

    def _body(self, doc: YuqueDoc) -> bytes:
        answer = self._get(f"{self.api}/docs/{quote(doc.slug)}",
                           self.max_bytes * BODY_OVERHEAD, item=True)
        if answer.status == 404:
            raise ItemFailed("gone since the listing")
        if answer.status != 200:
            raise ItemFailed(f"Yuque answered {answer.status}")
        try:
            data = api_json(answer, "Yuque")["data"]
            text = data["body"] if doc.markdown else data["body_html"]
        except (SyncFailed, KeyError, TypeError):
            raise ItemFailed("Yuque's answer holds no body") from None
        if not isinstance(text, str):
            raise ItemFailed("Yuque's answer holds no body")
        if doc.markdown:
            raw = (text if text.lstrip().startswith("# ") else f"# {doc.title}\n\n{text}")
        else:
            raw = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>'
                   f"{escape(doc.title)}</title></head><body>{text}</body></html>")
        return bounded(raw.encode("utf-8", "replace"), self.max_bytes)

    def _get(self, url: str, max_bytes: int, *, item: bool = False) -> Answer:
        return api_request(self.http, url, self.headers, deadline=self.deadline,
                           max_bytes=max_bytes, site="Yuque", item=item)
