"""A Yuque site on 127.0.0.1 that speaks the OpenAPI the yuque source reads, as Yuque documents
it (www.yuque.com/yuque/developer, API v2): `GET /api/v2/repos/{namespace}` (the book),
`/repos/{namespace}/toc` (its table of contents: TITLE and DOC entries with `uuid` and
`parent_uuid`), `/repos/{namespace}/docs?offset=…&limit=…` (`data`, at most 100 a request, no
body) and `/repos/{namespace}/docs/{slug or id}` (`data` with `body` — markdown — and
`body_html`), and `/groups/{login}/users?offset=…` (the owning team's members, 100 an answer,
each with its `user`). The book and each document say whom they are open to (`public`: 0
private, 1 the internet, 2 the space) and the book its owner (`user`). It asks for
`X-Auth-Token` and answers 401 to another, 404 for what it does not hold, the statuses queued in
`faults` first (a 429), and lists no document of `unlisted`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class YuqueDoc:
    title: str
    body: str  # markdown, or the lake document's rendered HTML
    parent: str | None = None  # the uuid of the TITLE entry it sits under
    updated: str = "2026-11-01T08:00:00.000Z"
    format: str = "markdown"
    status: int = 1  # 0: a draft never published
    public: Any = 1  # None: the listing does not say


@dataclass
class Book:
    namespace: str
    token: str
    docs: dict[int, YuqueDoc] = field(default_factory=dict)
    # The table of contents' TITLE entries: uuid → (title, the parent's uuid).
    titles: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    hits: list[tuple[str, int]] = field(default_factory=list)
    faults: dict[str, list[int]] = field(default_factory=dict)
    unlisted: set[int] = field(default_factory=set)
    url: str = ""  # the site
    public: Any = 1
    owner_type: str = "Group"  # the namespace's first part is a team ("Group") or a person (7)
    members: list[int | None] = field(default_factory=list)  # the team's members' ids
    pages_members: bool = True  # False: the members' listing ignores its offset

    @property
    def book_url(self) -> str:
        return f"{self.url}/{self.namespace}"

    def bodies_read(self) -> list[str]:
        return [hit.rsplit("/", 1)[1] for hit, status in self.hits
                if "/docs/" in hit and status == 200]


@contextmanager
def yuque_server(book: Book) -> Iterator[Book]:
    api = f"/api/v2/repos/{book.namespace}"
    owner = book.namespace.split("/")[0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Counted in `hits`."""

        def answer(self, status: int, document: Any) -> None:
            book.hits.append((self.path, status))
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            parts = urlsplit(self.path)
            for marker, statuses in book.faults.items():
                if marker in self.path and statuses:
                    status = statuses.pop(0)
                    return self.answer(status, {"message": "too many requests"})
            if self.headers.get("X-Auth-Token") != book.token:
                return self.answer(401, {"message": "Unauthorized"})
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if parts.path == api:
                return self.answer(200, {"data": {
                    "id": 1, "namespace": book.namespace, "type": "Book", "name": "Runbooks",
                    "public": book.public, "user_id": 7,
                    "user": {"id": 7, "type": book.owner_type, "login": owner}}})
            if parts.path == f"/api/v2/groups/{owner}/users" and book.owner_type == "Group":
                offset = int(query.get("offset", "0")) if book.pages_members else 0
                return self.answer(200, {"data": [
                    {"id": 900 + n, "group_id": 7, "role": 1, "user": {
                        "type": "User", "login": f"u{n}", **({"id": user} if user else {})}}
                    for n, user in enumerate(book.members)][offset:offset + 100]})
            if parts.path == f"{api}/toc":
                toc = [{"type": "TITLE", "title": title, "uuid": uuid, "parent_uuid": parent or "",
                        "doc_id": None} for uuid, (title, parent) in book.titles.items()]
                toc += [{"type": "DOC", "title": d.title, "uuid": f"doc-{i}", "doc_id": i,
                         "parent_uuid": d.parent or "", "url": f"doc-{i}"}
                        for i, d in book.docs.items()]
                return self.answer(200, {"data": toc})
            if parts.path == f"{api}/docs":
                offset, limit = int(query.get("offset", "0")), min(int(query.get("limit",
                                                                                 "100")), 100)
                listed = [i for i in sorted(book.docs) if i not in book.unlisted]
                data = [{"id": i, "slug": f"doc-{i}", "title": d.title, "format": d.format,
                         "status": d.status, "updated_at": d.updated,
                         "content_updated_at": d.updated,
                         **({"public": d.public} if d.public is not None else {})}
                        for i, d in ((i, book.docs[i]) for i in listed[offset:offset + limit])]
                return self.answer(200, {"data": data, "meta": {"total": len(listed)}})
            if parts.path.startswith(f"{api}/docs/"):
                key = parts.path.rsplit("/", 1)[1].removeprefix("doc-")
                doc = book.docs.get(int(key)) if key.isdigit() else None
                if doc is None:
                    return self.answer(404, {"message": "Not Found"})
                return self.answer(200, {"data": {
                    "id": int(key), "slug": f"doc-{key}", "title": doc.title,
                    "format": doc.format, "status": doc.status,
                    "body": doc.body if doc.format == "markdown" else "",
                    "body_html": doc.body if doc.format != "markdown" else f"<p>{doc.body}</p>",
                    "content_updated_at": doc.updated}})
            return self.answer(404, {"message": "Not Found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    book.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield book
    finally:
        server.shutdown()
        thread.join(timeout=10)
