"""A Confluence site on 127.0.0.1 that speaks the REST API the confluence source reads, as
Atlassian documents it (developer.atlassian.com, "Confluence REST API", Cloud and Data Center):
`GET <base>/rest/api/user/current`, `GET <base>/rest/api/space/{key}`, `GET
<base>/rest/api/content?spaceKey=…&type=page&status=current&limit=…&start=…&expand=…` (a page of
`results`, each with its first attachments (`children.attachment.version,extensions`: more under
`/child/attachment`), with `_links.next` relative to the base while more follow; a blog post too
when no `type` is asked), `GET <base>/rest/api/content/{id}?expand=…`, `GET
<base>/rest/api/content/{id}/child/attachment?start=…&limit=…` and `GET
<base>/download/attachments/{page id}/{name}` (or, `media`, a redirect to a media store that
takes its own token and no credential, as Cloud does), and, `space_permissions` given (a Cloud
site: the current user has an account id, a Data Center's a user key),
`GET <base>/api/v2/spaces/{id}/permissions?limit=…&cursor=…` (the space's permission
assignments, a few a page, `_links.next` below the site's origin):
only what `expand` names is expanded (a page's view restrictions too, unless `restrictions` is
off, as an older Data Center ignores them; a group with its id on Cloud, `group_ids`), the rest
is under `_expandable`. It asks for HTTP Basic or a Bearer token and answers 401
to another (or, `anonymous`, serves it as an anonymous caller, as a Cloud site open to them
does), 404 for a space or page it does not hold, the statuses queued in `faults` first (a 429
with `Retry-After: 0`), and lists no page of `unlisted` (a listing that moved under a change)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

CONTEXT = "/wiki"  # Cloud's: the site's base is https://<site>/wiki
RESTRICTIONS = {"restrictions.read.restrictions.user", "restrictions.read.restrictions.group"}
FILES_SHOWN = 3  # a page's attachments a listing expands, or one listing of them answers
PERMISSIONS_SHOWN = 3  # a space's permission assignments one answer holds
SPACE_ID = "98306"


@dataclass
class WikiFile:
    """A file attached to a page."""

    id: str  # "att<digits>"
    name: str
    raw: bytes
    version: int = 1


@dataclass
class WikiPage:
    title: str
    body: str  # storage format
    parent: str | None = None
    version: int = 1
    # Its own view restriction: users as Confluence gives them ({"accountId": …, "email": …}
    # on Cloud, {"username": …} on Data Center) and groups by name; none: unrestricted.
    users: list[dict[str, str]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    files: list[WikiFile] = field(default_factory=list)

    def restrictions(self, *, group_ids: bool) -> dict[str, Any]:
        def part(results: list[dict[str, str]]) -> dict[str, Any]:
            return {"results": results, "start": 0, "limit": 100, "size": len(results),
                    "_links": {}}

        return {"read": {"operation": "read", "restrictions": {
            "user": part([{"type": "known", **user} for user in self.users]),
            "group": part([{"type": "group", "name": name,
                            **({"id": f"{name}-id"} if group_ids else {})}
                           for name in self.groups])}}}


@dataclass
class Wiki:
    space: str
    credential: str  # "user:token" (Basic) or "token" (Bearer)
    pages: dict[str, WikiPage] = field(default_factory=dict)
    hits: list[tuple[str, int]] = field(default_factory=list)  # ("<path>?<query>", status)
    faults: dict[str, list[int]] = field(default_factory=dict)
    anonymous: bool = False
    unlisted: set[str] = field(default_factory=set)
    restrictions: bool = True  # expanded when asked (False: an older Data Center's listing)
    media: bool = False  # attachments downloaded from a media store a redirect names (Cloud)
    expanded: bool = True  # a page's first attachments in the listing, when asked
    # Cloud's space permission assignments: (principal type, id, operation key, target type);
    # None: a Data Center, which has no v2 API. Cloud gives a group's id with its name.
    space_permissions: list[tuple[str, str, str, str]] | None = None
    group_ids: bool = False
    url: str = ""  # the site's base (…/wiki)
    media_url: str = ""  # its media store's

    @property
    def space_url(self) -> str:
        return f"{self.url}/spaces/{self.space}"

    def bodies_read(self) -> list[str]:
        """The pages whose body was read, by id."""
        return [hit.split("?")[0].rsplit("/", 1)[1] for hit, status in self.hits
                if "expand=body.storage" in hit and status == 200]

    def downloads(self) -> list[str]:
        """The attachments whose bytes were served, by name."""
        return [hit.split("?")[0].rsplit("/", 1)[1] for hit, status in self.hits
                if hit.startswith(("/download/", "/media/")) and status == 200
                and not (self.media and hit.startswith("/download/"))]

    def attachment(self, page_id: str, file: WikiFile) -> dict[str, Any]:
        return {"id": file.id, "type": "attachment", "status": "current", "title": file.name,
                "version": {"number": file.version},
                "extensions": {"mediaType": "application/octet-stream",
                               "fileSize": len(file.raw)},
                "_links": {"download": f"/download/attachments/{page_id}/{quote(file.name)}"
                                       f"?version={file.version}&api=v2",
                           "webui": f"/pages/viewpageattachments.action?pageId={page_id}"
                                    f"&preview=/{page_id}/{file.id}/{quote(file.name)}"}}

    def ancestors(self, page_id: str) -> list[dict[str, str]]:
        chain: list[dict[str, str]] = []
        parent = self.pages[page_id].parent
        while parent is not None:
            chain.insert(0, {"id": parent, "type": "page", "title": self.pages[parent].title})
            parent = self.pages[parent].parent
        return chain


@contextmanager
def confluence_server(wiki: Wiki) -> Iterator[Wiki]:
    if ":" in wiki.credential:
        expected = "Basic " + base64.b64encode(wiki.credential.encode()).decode()
    else:
        expected = f"Bearer {wiki.credential}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Counted in `hits`."""

        def answer(self, status: int, document: Any, headers: dict[str, str] | None = None
                   ) -> None:
            wiki.hits.append((self.path.removeprefix(CONTEXT), status))
            raw = isinstance(document, bytes)
            body = document if raw else json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type",
                             "application/octet-stream" if raw else "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def file(self, file_id: str) -> WikiFile | None:
            return next((f for page in wiki.pages.values() for f in page.files
                         if f.id == file_id), None)

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            for marker, statuses in wiki.faults.items():
                if marker in self.path and statuses:
                    status = statuses.pop(0)
                    return self.answer(status, {"statusCode": status, "message": "Rate limited"},
                                       {"Retry-After": "0"})
            if parts.path.startswith("/media/"):  # the media store: its own token, no other
                file = self.file(parts.path.rsplit("/", 1)[1])
                if file is None or query.get("token") != f"t-{file.id}" or \
                        "Authorization" in self.headers:
                    return self.answer(403, {"message": "Forbidden"})
                return self.answer(200, file.raw)
            known = self.headers.get("Authorization") == expected
            if not known and not wiki.anonymous:
                return self.answer(401, {"statusCode": 401, "message": "Unauthorized"})
            path = parts.path.removeprefix(CONTEXT)
            expand = set(query.get("expand", "").split(","))
            if path == "/rest/api/user/current":
                who = {"accountId": "5b10a2844c20165700ede21g"} if \
                    wiki.space_permissions is not None else {"username": "bot", "userKey": "8a1"}
                return self.answer(200, {"type": "known" if known else "anonymous", **who})
            if path == f"/rest/api/space/{wiki.space}":
                return self.answer(200, {"id": int(SPACE_ID), "key": wiki.space,
                                         "name": wiki.space, "type": "global"})
            if path == f"/api/v2/spaces/{SPACE_ID}/permissions" and \
                    wiki.space_permissions is not None:
                return self.permissions(path, query)
            if path == "/rest/api/content" and query.get("spaceKey") == wiki.space:
                return self.listing(query)
            if path.startswith("/download/attachments/"):
                _, _, _, page_id, name = map(unquote, path.split("/", 4))
                page = wiki.pages.get(page_id)
                file = next((f for f in page.files if f.name == name), None) if page else None
                if file is None:
                    return self.answer(404, {"statusCode": 404, "message": "No attachment"})
                if wiki.media:
                    location = f"{wiki.media_url}/{file.id}?token=t-{file.id}"
                    return self.answer(302, {}, {"Location": location})
                return self.answer(200, file.raw)
            if path.startswith("/rest/api/content/") and path.endswith("/child/attachment"):
                page = wiki.pages.get(path.split("/")[4])
                if page is None:
                    return self.answer(404, {"statusCode": 404, "message": "No content"})
                start = int(query.get("start", "0"))
                limit = min(int(query.get("limit", "25")), FILES_SHOWN)
                links = {}
                if start + limit < len(page.files):
                    links["next"] = f"{path}?" + urlencode(
                        {**query, "start": str(start + limit), "limit": str(limit)})
                shown = page.files[start:start + limit]
                return self.answer(200, {"results": [wiki.attachment(path.split("/")[4], f)
                                                     for f in shown],
                                         "start": start, "limit": limit, "_links": links})
            if path.startswith("/rest/api/content/"):
                page_id = path.rsplit("/", 1)[1]
                page = wiki.pages.get(page_id)
                if page is None:
                    return self.answer(404, {"statusCode": 404, "message": "No content"})
                found: dict[str, Any] = {"id": page_id, "type": "page", "status": "current",
                                         "title": page.title, "_expandable": {}}
                if "body.storage" in expand:
                    found["body"] = {"storage": {"value": page.body,
                                                 "representation": "storage"}}
                else:
                    found["_expandable"]["body"] = ""
                if "space" in expand:
                    found["space"] = {"key": wiki.space}
                return self.answer(200, found)
            return self.answer(404, {"statusCode": 404, "message": "Not found"})

        def permissions(self, path: str, query: dict[str, str]) -> None:
            """A page of the space's permission assignments, by an opaque cursor."""
            assert wiki.space_permissions is not None
            start = int(base64.b64decode(query.get("cursor", "MA==")))
            shown = wiki.space_permissions[start:start + PERMISSIONS_SHOWN]
            links = {"base": wiki.url}
            if start + PERMISSIONS_SHOWN < len(wiki.space_permissions):
                cursor = base64.b64encode(str(start + PERMISSIONS_SHOWN).encode()).decode()
                links["next"] = f"{CONTEXT}{path}?" + urlencode(
                    {"limit": query.get("limit", "25"), "cursor": cursor})
            return self.answer(200, {"results": [
                {"id": f"{start + n}", "principal": {"type": kind, "id": key},
                 "operation": {"key": operation, "targetType": target}}
                for n, (kind, key, operation, target) in enumerate(shown)], "_links": links})

        def listing(self, query: dict[str, str]) -> None:
            start, limit = int(query.get("start", "0")), min(int(query.get("limit", "25")), 50)
            expand = set(query.get("expand", "").split(","))
            listed: list[dict[str, Any]] = []
            if query.get("type") in (None, "page"):
                listed += [{"id": page_id, "type": "page", "title": wiki.pages[page_id].title}
                           for page_id in sorted(wiki.pages, key=int)
                           if page_id not in wiki.unlisted]
            if query.get("type") in (None, "blogpost"):
                listed.append({"id": "9999999", "type": "blogpost", "title": "Team news"})
            results = []
            for entry in listed[start:start + limit]:
                result = {**entry, "status": "current", "_expandable": {},
                          "_links": {"webui": f"/spaces/{wiki.space}/pages/{entry['id']}"}}
                page = wiki.pages.get(entry["id"])
                for name, value in (("version", {"number": page.version if page else 1}),
                                    ("ancestors", wiki.ancestors(entry["id"]) if page else [])):
                    if name in expand:
                        result[name] = value
                    else:
                        result["_expandable"][name] = ""
                if page and wiki.expanded and \
                        {"children.attachment.version", "children.attachment.extensions"} <= expand:
                    shown = page.files[:FILES_SHOWN]
                    more = {"next": f"/rest/api/content/{entry['id']}/child/attachment?limit="
                                    f"{FILES_SHOWN}&start={FILES_SHOWN}"} \
                        if len(page.files) > FILES_SHOWN else {}
                    result["children"] = {"attachment": {
                        "results": [wiki.attachment(entry["id"], f) for f in shown], "start": 0,
                        "limit": FILES_SHOWN, "size": len(shown), "_links": more}}
                if wiki.restrictions and RESTRICTIONS <= expand:
                    result["restrictions"] = page.restrictions(
                        group_ids=wiki.group_ids) if page else {}
                else:
                    result["_expandable"]["restrictions"] = ""
                results.append(result)
            links = {"base": wiki.url, "context": CONTEXT}
            if start + limit < len(listed):
                links["next"] = "/rest/api/content?" + urlencode(
                    {**query, "start": str(start + limit), "limit": str(limit)})
            self.answer(200, {"results": results, "start": start, "limit": limit,
                              "size": len(results), "_links": links})

    # The site, and its media store at another origin (Cloud's is api.media.atlassian.com).
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    wiki.url = f"http://127.0.0.1:{servers[0].server_port}{CONTEXT}"
    wiki.media_url = f"http://127.0.0.1:{servers[1].server_port}/media"
    try:
        yield wiki
    finally:
        for server, thread in zip(servers, threads, strict=True):
            server.shutdown()
            thread.join(timeout=10)
