"""A Confluence site on 127.0.0.1 that speaks the REST API the confluence source reads, as
Atlassian documents it (developer.atlassian.com, "Confluence REST API", Cloud and Data
Center): `GET <base>/rest/api/user/current`, `GET <base>/rest/api/space/{key}`, `GET
<base>/rest/api/content?spaceKey=…&type=page&status=current&limit=…&start=…&expand=…` (a page of
`results` with `_links.next` relative to the base while more follow; a blog post too when no
`type` is asked) and `GET <base>/rest/api/content/{id}?expand=…`: only what `expand` names is
expanded, the rest is under `_expandable`. It asks for HTTP Basic or a Bearer token and answers
401 to another (or, `anonymous`, serves it as an anonymous caller, as a Cloud site open to them
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
from urllib.parse import parse_qs, urlencode, urlsplit

CONTEXT = "/wiki"  # Cloud's: the site's base is https://<site>/wiki


@dataclass
class WikiPage:
    title: str
    body: str  # storage format
    parent: str | None = None
    version: int = 1


@dataclass
class Wiki:
    space: str
    credential: str  # "user:token" (Basic) or "token" (Bearer)
    pages: dict[str, WikiPage] = field(default_factory=dict)
    hits: list[tuple[str, int]] = field(default_factory=list)  # ("<path>?<query>", status)
    faults: dict[str, list[int]] = field(default_factory=dict)
    anonymous: bool = False
    unlisted: set[str] = field(default_factory=set)
    url: str = ""  # the site's base (…/wiki)

    @property
    def space_url(self) -> str:
        return f"{self.url}/spaces/{self.space}"

    def bodies_read(self) -> list[str]:
        """The pages whose body was read, by id."""
        return [hit.split("?")[0].rsplit("/", 1)[1] for hit, status in self.hits
                if "expand=body.storage" in hit and status == 200]

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
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            for marker, statuses in wiki.faults.items():
                if marker in self.path and statuses:
                    status = statuses.pop(0)
                    return self.answer(status, {"statusCode": status, "message": "Rate limited"},
                                       {"Retry-After": "0"})
            known = self.headers.get("Authorization") == expected
            if not known and not wiki.anonymous:
                return self.answer(401, {"statusCode": 401, "message": "Unauthorized"})
            path = parts.path.removeprefix(CONTEXT)
            expand = set(query.get("expand", "").split(","))
            if path == "/rest/api/user/current":
                return self.answer(200, {"type": "known" if known else "anonymous",
                                         "accountId": "5b10a2844c20165700ede21g"})
            if path == f"/rest/api/space/{wiki.space}":
                return self.answer(200, {"key": wiki.space, "name": wiki.space, "type": "global"})
            if path == "/rest/api/content" and query.get("spaceKey") == wiki.space:
                return self.listing(query)
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
                results.append(result)
            links = {"base": wiki.url, "context": CONTEXT}
            if start + limit < len(listed):
                links["next"] = "/rest/api/content?" + urlencode(
                    {**query, "start": str(start + limit), "limit": str(limit)})
            self.answer(200, {"results": results, "start": start, "limit": limit,
                              "size": len(results), "_links": links})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    wiki.url = f"http://127.0.0.1:{server.server_port}{CONTEXT}"
    try:
        yield wiki
    finally:
        server.shutdown()
        thread.join(timeout=10)
