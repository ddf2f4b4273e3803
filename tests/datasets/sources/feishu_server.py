"""A Feishu open platform on 127.0.0.1 that speaks the API the feishu source reads, as Feishu
documents it (open.feishu.cn/document, server API): `POST /open-apis/auth/v3/
tenant_access_token/internal` (an app's id and secret for a tenant access token that expires),
`GET /open-apis/wiki/v2/spaces/{space_id}` (the space, for an app among its members, public or
private), `…/spaces/{space_id}/members?page_token=…` (its members, 20 a page), `…/spaces/
{space_id}/nodes?parent_node_token=…&page_size=…&page_token=…` (a node's children, at most 50 a
page), `/open-apis/drive/v1/files?folder_token=…` (a folder's files with their owners, at most 200 a
page), `/open-apis/drive/v2/permissions/{token}/public?type=docx` (a Drive document's link
settings), `/open-apis/drive/v1/permissions/{token}/members?type=docx` (its collaborators, one
answer) and `/open-apis/docx/v1/documents/{document_id}/blocks` (a document's blocks, at most
500 a page). Errors are answered as Feishu does, an HTTP status and a JSON `code`: 99991663 for
a token it did not issue or that expired, 131006 for a space the app is not a member of,
1770032 for a document the app may not read, 99991672 for a missing scope; the statuses queued
in `faults` first (a 429 with x-ogw-ratelimit-reset), and the refusals `refused` names (of
one kind of request: a missing scope, sharing the app may not see)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

REFUSALS = {1063002: "Permission denied",
            99991672: "Access denied. One of the following scopes is required: [scope]"}
BLOCK_TYPES = {"p": (2, "text"), "bullet": (12, "bullet"), "ordered": (13, "ordered"),
               "code": (14, "code"), "quote": (15, "quote"), "todo": (17, "todo"),
               **{f"h{n}": (2 + n, f"heading{n}") for n in range(1, 10)}}


@dataclass
class FeishuDoc:
    title: str
    # (kind, text): "h1".."h9", "p", "bullet", "ordered", "code", "quote", "todo", "divider",
    # and "table" with its rows as "a|b;c|d".
    blocks: list[tuple[str, str]] = field(default_factory=list)
    parent: str | None = None  # the parent node's token (a wiki) or folder's (Drive)
    edited: str = "1764576000"
    kind: str = "docx"  # or "sheet", "bitable", "folder" (Drive), …
    shortcut: bool = False
    forbidden: bool = False  # the app may not read its blocks
    # A Drive document's owner (open_id), link setting and collaborators as Feishu lists them:
    # {"member_type": "openid", "member_id": …, "perm": "view", "type": "user"}.
    owner: str = "ou_owner"
    link: str = "tenant_readable"
    collaborators: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Platform:
    app_id: str
    app_secret: str
    space_id: str = "7300000000000000001"
    folder: str = "fldcnRunbooks"
    nodes: dict[str, FeishuDoc] = field(default_factory=dict)  # node token → its document
    files: dict[str, FeishuDoc] = field(default_factory=dict)  # Drive token → file or folder
    member: bool = True  # the app is among the space's members
    visibility: str = "public"  # of the space: "public" (the tenant's) or "private"
    # A private space's members as Feishu lists them: {"member_type": "userid", "member_id":
    # …, "member_role": "member", "type": "user"}; the app reading it is one too.
    members: list[dict[str, str]] = field(default_factory=list)
    scopes: bool = True  # the app has the scopes it needs
    # A marker of the requests Feishu refuses → (HTTP status, its code): "/members?" with
    # (403, 1063002), sharing the app may not see; (400, 99991672), a scope it lacks.
    refused: dict[str, tuple[int, int]] = field(default_factory=dict)
    expire: int = 7200  # seconds a tenant access token lasts
    issued: dict[str, float] = field(default_factory=dict)  # token → when it expires
    hits: list[tuple[str, int]] = field(default_factory=list)
    faults: dict[str, list[int]] = field(default_factory=dict)
    url: str = ""

    @property
    def space_url(self) -> str:
        return f"{self.url}/wiki/space/{self.space_id}"

    @property
    def folder_url(self) -> str:
        return f"{self.url}/drive/folder/{self.folder}"

    def bodies_read(self) -> list[str]:
        return [hit.split("/documents/")[1].split("/")[0] for hit, status in self.hits
                if "/blocks" in hit and status == 200 and "page_token" not in hit]


def blocks_of(token: str, doc: FeishuDoc) -> list[dict[str, Any]]:
    """The document's blocks as docx v1 answers them: the page block first, its children
    in order."""
    page: dict[str, Any] = {"block_id": token, "block_type": 1, "parent_id": "", "children": [],
                            "page": {"elements": [{"text_run": {"content": doc.title}}],
                                     "style": {}}}
    blocks = [page]
    for n, (kind, text) in enumerate(doc.blocks):
        block_id = f"{token}-b{n}"
        page["children"].append(block_id)
        if kind == "divider":
            blocks.append({"block_id": block_id, "block_type": 22, "parent_id": token,
                           "divider": {}})
        elif kind == "table":
            rows = [row.split("|") for row in text.split(";")]
            cells = [f"{block_id}-c{r}-{c}" for r, row in enumerate(rows) for c in range(len(row))]
            blocks.append({"block_id": block_id, "block_type": 31, "parent_id": token,
                           "children": cells, "table": {"cells": cells, "property": {
                               "row_size": len(rows), "column_size": len(rows[0])}}})
            for cell, cell_text in zip(cells, [t for row in rows for t in row], strict=True):
                blocks += [{"block_id": cell, "block_type": 32, "parent_id": block_id,
                            "children": [f"{cell}-t"], "table_cell": {}},
                           {"block_id": f"{cell}-t", "block_type": 2, "parent_id": cell,
                            "text": {"elements": [{"text_run": {"content": cell_text}}]}}]
        else:
            block_type, key = BLOCK_TYPES[kind]
            blocks.append({"block_id": block_id, "block_type": block_type, "parent_id": token,
                           key: {"elements": [{"text_run": {
                               "content": text, "text_element_style": {}}}],
                                 "style": {"done": True} if kind == "todo" else {}}})
    return blocks


@contextmanager
def feishu_server(platform: Platform) -> Iterator[Platform]:
    wiki = f"/open-apis/wiki/v2/spaces/{platform.space_id}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            """Counted in `hits`."""

        def answer(self, status: int, document: Any, **headers: str) -> None:
            platform.hits.append((self.path, status))
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def fault(self) -> bool:
            for marker, statuses in platform.faults.items():
                if marker in self.path and statuses:
                    status = statuses.pop(0)
                    self.answer(status, {"code": 99991400 if status == 429 else 1,
                                         "msg": "request trigger frequency limit"},
                                x_ogw_ratelimit_reset="0")
                    return True
            return False

        def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if self.fault():
                return
            if self.path != "/open-apis/auth/v3/tenant_access_token/internal":
                return self.answer(404, {"code": 1, "msg": "not found"})
            if (body.get("app_id"), body.get("app_secret")) != (platform.app_id,
                                                                 platform.app_secret):
                return self.answer(400, {"code": 10014, "msg": "app secret invalid"})
            token = f"t-{len(platform.issued)}-{platform.app_id}"
            platform.issued[token] = time.monotonic() + platform.expire
            return self.answer(200, {"code": 0, "msg": "ok", "tenant_access_token": token,
                                     "expire": platform.expire})

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            if self.fault():
                return
            for marker, (status, code) in platform.refused.items():
                if marker in self.path:
                    return self.answer(status, {"code": code, "msg": REFUSALS[code]})
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if platform.issued.get(token, 0) < time.monotonic():
                return self.answer(400, {"code": 99991663, "msg": "Invalid access token"})
            if not platform.scopes:
                return self.answer(400, {"code": 99991672, "msg": "Access denied. One of the "
                                         "following scopes is required: [wiki:wiki:readonly]"})
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if parts.path.startswith("/open-apis/wiki/") and not platform.member:
                return self.answer(400, {"code": 131006, "msg": "permission denied"})
            if parts.path == wiki:
                return self.answer(200, {"code": 0, "data": {"space": {
                    "space_id": platform.space_id, "name": "Runbooks",
                    "visibility": platform.visibility}}})
            if parts.path == f"{wiki}/members":
                app = {"member_type": "appid", "member_id": platform.app_id,
                       "member_role": "member", "type": "app"}
                return self.paged([app, *platform.members], query, 20, "members", "page_token")
            if parts.path == f"{wiki}/nodes":
                parent = query.get("parent_node_token") or None
                children = [t for t in platform.nodes if platform.nodes[t].parent == parent]
                items = [{"space_id": platform.space_id, "node_token": t,
                          "obj_token": f"dox{t}", "obj_type": platform.nodes[t].kind,
                          "parent_node_token": parent or "",
                          "node_type": "shortcut" if platform.nodes[t].shortcut else "origin",
                          "has_child": any(d.parent == t for d in platform.nodes.values()),
                          "title": platform.nodes[t].title,
                          "obj_edit_time": platform.nodes[t].edited} for t in children]
                return self.paged(items, query, 50, "items", "page_token")
            if parts.path == "/open-apis/drive/v1/files":
                folder = query.get("folder_token")
                items = [{"token": t, "name": f.title, "type": f.kind, "parent_token": folder,
                          "url": f"{platform.url}/docx/{t}", "modified_time": f.edited,
                          "owner_id": f.owner}
                         for t, f in platform.files.items()
                         if (f.parent or platform.folder) == folder]
                return self.paged(items, query, 200, "files", "next_page_token")
            if parts.path.startswith(("/open-apis/drive/v2/permissions/",
                                      "/open-apis/drive/v1/permissions/")):
                return self.sharing(parts.path, query)
            if parts.path.startswith("/open-apis/docx/v1/documents/"):
                token = parts.path.split("/")[5]
                doc = platform.files.get(token) or platform.nodes.get(token.removeprefix("dox"))
                if doc is None or doc.kind != "docx":
                    return self.answer(404, {"code": 1770002, "msg": "not found"})
                if doc.forbidden:
                    return self.answer(403, {"code": 1770032, "msg": "forBidden"})
                return self.paged(blocks_of(token, doc), query, 500, "items", "page_token")
            return self.answer(404, {"code": 1, "msg": "not found"})

        def sharing(self, path: str, query: dict[str, str]) -> None:
            """A Drive document's link settings or collaborators."""
            token, what = path.split("/")[5], path.split("/")[6]
            doc = platform.files.get(token)
            if doc is None or query.get("type") != doc.kind:
                return self.answer(404, {"code": 1063005, "msg": "resource deleted"})
            if what == "public":
                return self.answer(200, {"code": 0, "msg": "success", "data": {
                    "permission_public": {
                        "external_access_entity": "closed", "security_entity": "anyone_can_view",
                        "comment_entity": "anyone_can_view", "share_entity": "anyone",
                        "manage_collaborator_entity": "collaborator_can_view",
                        "link_share_entity": doc.link, "copy_entity": "anyone_can_view"}}})
            return self.answer(200, {"code": 0, "msg": "success",
                                     "data": {"items": doc.collaborators}})

        def paged(self, items: list[dict[str, Any]], query: dict[str, str], most: int,
                  key: str, next_key: str) -> None:
            size = int(query.get("page_size", str(most)))
            if size > most:
                return self.answer(400, {"code": 99992402, "msg": "field validation failed"})
            offset = int(query.get("page_token", "0"))
            more = offset + size < len(items)
            return self.answer(200, {"code": 0, "msg": "success", "data": {
                key: items[offset:offset + size], "has_more": more,
                next_key: str(offset + size) if more else ""}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    platform.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield platform
    finally:
        server.shutdown()
        thread.join(timeout=10)
