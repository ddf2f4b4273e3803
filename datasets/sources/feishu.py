"""A Feishu (飞书) or Lark wiki space, or a Drive folder, as a source (their open platform API,
`https://open.feishu.cn/open-apis/` and `https://open.larksuite.com/open-apis/`): the space's
nodes (a folder's files, its sub-folders' too) listed whole with their edit times, no body,
before any is read, so a listing that fails deletes nothing; a document's body (its blocks,
written out as markdown with its headings, lists, code and tables) is read again only when its
edit time moved. Documents (docx) are read; sheets, bases, mind maps, slides, uploaded files
and old-format docs are left out, as are shortcuts (their origin is read where it lives). Who
may read them: everyone of the tenant's for a public space; a private space's members (users
as `user:<their id>`, chats, departments and user groups as `group:<their id>`) for a private
one. A Drive document: everyone of the tenant's when its link lets the tenant (or anyone) read
it; else its owner and the collaborators it lists, asked of each document at each sync.

The source reads as an app: its variable holds `<app id>:<app secret>`, exchanged for a tenant
access token (renewed before it expires) sent as a Bearer token. Every request goes through
kbplatform/outbound.py; the open platform's rate limit (429, with x-ogw-ratelimit-reset) and
server errors are asked again (datasets/sources/http.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

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
    max_path,
    path_name,
    too_many,
)
from datasets.sources.http import AGENT, RETRIED, Answer, api_json, api_request
from datasets.sources.secrets import source_secret
from datasets.tenancy.permissions import GROUP, NOBODY, USER, readers_named
from kbplatform import outbound

# The open platform's API host of each cloud; another site (a private deployment) serves it
# at its own origin.
OPEN_API = {"feishu.cn": "https://open.feishu.cn", "larksuite.com": "https://open.larksuite.com",
            "larkoffice.com": "https://open.larkoffice.com"}
WIKI_PAGE = 50  # the most nodes a wiki listing answers
FOLDER_PAGE = 200  # the most files a folder listing answers
BLOCK_PAGE = 500  # the most blocks a document's listing answers
MAX_LISTING_BYTES = 4 << 20
BODY_OVERHEAD = 4  # a document's blocks carry its text in JSON with their styles
MAX_NESTING = 50  # of a space's nodes, a folder's folders, a document's blocks
TOKEN_MARGIN_SECONDS = 300  # a tenant access token is renewed this long before it expires
# The space's URL as Feishu shows it (its home or its settings), or a Drive folder's.
WIKI_URL = re.compile(r"^(?P<site>https?://[^/?#]+)/wiki/(?:space|settings)/"
                      r"(?P<key>[0-9]{1,30})/?$")
FOLDER_URL = re.compile(r"^(?P<site>https?://[^/?#]+)/drive/folder/(?P<key>[A-Za-z0-9]{1,100})/?$")
TOKEN = re.compile(r"^[\x21-\x7e]{1,1000}$")  # an access or page token a request can carry
OBJECT_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,100}$")  # a node's, document's, file's
TOKEN_SECONDS = 7200  # a tenant access token's life when the answer does not say
# Error codes of the open platform's answers the owner can act on.
NO_SCOPE = (99991672, 99991679)  # the app lacks a scope the call needs
SPACE_HIDDEN = (131005, 131006)  # no such space; the app is not a member
DOC_GONE, DOC_FORBIDDEN = 1770002, 1770032
SHARING_HIDDEN = 1063002  # Feishu lists a document's collaborators to those who may share it
MAX_MESSAGE_CHARS = 300  # of Feishu's own words in a failure
SCOPES = ("wiki:wiki:readonly (a folder: drive:drive:readonly and "
          "docs:permission.member:retrieve) and docx:document:readonly")
# A space member's or a collaborator's kind as a reader: a person by the id its member_type
# names, a chat, a department or a user group as a group.
MEMBER_KINDS = {"openid": USER, "unionid": USER, "userid": USER, "email": USER,
                "openchat": GROUP, "opendepartmentid": GROUP, "groupid": GROUP}
APP_KINDS = ("appid", "open_app_id")
# A Drive document's link settings that let everyone of the tenant (or more) read it.
OPEN_LINKS = frozenset({"tenant_readable", "tenant_editable", "partner_tenant_readable",
                        "partner_tenant_editable", "anyone_readable", "anyone_editable"})

PAGE, TEXT, BULLET, ORDERED, CODE, QUOTE, TODO, DIVIDER, TABLE, QUOTE_CONTAINER = (
    1, 2, 12, 13, 14, 15, 17, 22, 31, 34)
HEADINGS = range(3, 12)  # heading1 … heading9
# Where each block that holds text keeps it.
TEXT_KEYS = {TEXT: "text", BULLET: "bullet", ORDERED: "ordered", CODE: "code", QUOTE: "quote",
             TODO: "todo", **{kind: f"heading{kind - 2}" for kind in HEADINGS}}


@dataclass(frozen=True)
class Place:
    site: str  # where people read it: https://<tenant>.feishu.cn
    api: str  # the open platform's origin
    wiki: bool  # a wiki space, else a Drive folder
    key: str  # the space's id, the folder's token


@dataclass(frozen=True)
class Listed:
    """A document as its space's or folder's listing gives it."""

    titles: list[str]  # the titles above it and its own
    token: str  # the document's (obj_token)
    edited: str  # its edit time ("": none given)
    page: str  # where people read it, below the site: "wiki/<node token>", "docx/<token>"
    owner: str = ""  # a Drive document's owner (their open_id)


@dataclass(frozen=True)
class FeishuDoc:
    token: str  # the document's (obj_token)
    path: str  # the titles above it and its own: "Databases/MySQL/Replica lag.md"
    version: str  # "<token>:<edit time>" ("": no edit time given)
    url: str
    title: str
    owner: str = ""


def place_of(location: str) -> Place | None:
    found = WIKI_URL.match(location) or FOLDER_URL.match(location)
    if found is None:
        return None
    site = found.group("site")
    host = (urlsplit(site).hostname or "").lower()
    api = next((origin for domain, origin in OPEN_API.items()
                if host == domain or host.endswith("." + domain)), site)
    return Place(site=site, api=api, wiki=found.re is WIKI_URL, key=found.group("key"))


def place_refusal(location: str) -> str | None:
    if place_of(location) is None:
        return ("the wiki space's URL as Feishu shows it, https://<tenant>.feishu.cn/wiki/space/"
                "<space id>, or a Drive folder's, https://<tenant>.feishu.cn/drive/folder/<token>")
    return None


class FeishuReader:
    def __init__(self, source: Source, deadline: Deadline) -> None:
        self.source, self.deadline = source, deadline
        self.commit = ""
        self.partial = ""
        self.expected = 0
        self.place = place_of(source.location) or Place(site="", api="", wiki=True, key="")
        self.globs = Globs(source.include)
        self.max_bytes = settings.KB_MAX_UPLOAD_BYTES
        self.longest = max_path(source)
        self.headers = {"User-Agent": AGENT, "Accept": "application/json"}
        self.renew_at = 0.0
        self.readers: list[str] = []  # of every document (a private space's members)
        self.http = outbound.client(
            max_response_bytes=max(self.max_bytes * BODY_OVERHEAD, MAX_LISTING_BYTES))

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        if not self.place.key:
            raise SyncFailed(place_refusal(self.source.location) or "")
        if not self.source.secret_env:
            raise SyncFailed("Feishu reads as an app: name the variable holding "
                             "`<app id>:<app secret>` (secret_env)")
        if self.place.wiki:
            self._space_readable()
        listed = self._docs(self._nodes() if self.place.wiki else self._files())
        docs = [doc for doc in listed if self.globs(doc.path)]
        self.expected = len(docs)
        for doc in docs:
            try:
                readers = self.readers if self.place.wiki else self._shared_with(doc)
            except ItemFailed as exc:  # who may read it is not known: no agent reads it
                yield Item(doc.path, doc.version, failure=f"who may read it: {exc}",
                           url=doc.url, readers=(NOBODY,))
                continue
            if not doc.version:
                yield Item(doc.path, "", failure="Feishu gives no edit time for it", url=doc.url,
                           readers=tuple(readers))
                continue
            yield listed_item(doc.path, doc.version, 0, known=known, longest=self.longest,
                              max_bytes=self.max_bytes, read=partial(self._body, doc),
                              url=doc.url, readers=readers)

    def _sign_in(self) -> None:
        """A tenant access token for the app the source's variable names."""
        variable = self.source.secret_env
        app_id, _, secret = source_secret(self.source).partition(":")
        if not app_id or not secret:
            raise SyncFailed(f"the credential in {variable} is `<app id>:<app secret>`")
        answer = api_request(
            self.http, f"{self.place.api}/open-apis/auth/v3/tenant_access_token/internal",
            {**self.headers, "Content-Type": "application/json; charset=utf-8"},
            deadline=self.deadline, max_bytes=MAX_LISTING_BYTES, site="Feishu",
            posted={"app_id": app_id, "app_secret": secret})
        if answer.status >= 500:
            raise SyncFailed(f"Feishu answered {answer.status}")
        signed = _mapping(api_json(answer, "Feishu"))
        token = signed.get("tenant_access_token")
        if signed.get("code") != 0 or not isinstance(token, str) or not TOKEN.match(token):
            raise SyncFailed(f"Feishu refused the app credential in {variable}")
        expire = signed.get("expire")
        lasts = min(expire, TOKEN_SECONDS) if type(expire) is int and expire > 0 else TOKEN_SECONDS
        # Renewed well before it ends (a short-lived token at half its life).
        self.renew_at = time.monotonic() + (lasts - TOKEN_MARGIN_SECONDS
                                            if lasts > 2 * TOKEN_MARGIN_SECONDS else lasts / 2)
        self.headers["Authorization"] = f"Bearer {token}"

    def _space_readable(self) -> None:
        """The space is there and the app may read it: a space it may no longer see must not
        read as an emptied one."""
        answer, reply = self._get(f"/open-apis/wiki/v2/spaces/{self.place.key}")
        if answer.status == 200 and reply.get("code") == 0:
            space = _mapping(_mapping(reply.get("data")).get("space"))
            if space.get("visibility") != "public":
                self.readers = self._members()
            return
        if reply.get("code") in SPACE_HIDDEN or answer.status in (403, 404):
            raise SyncFailed(f"no wiki space {self.place.key} visible to the app in "
                             f"{self.source.secret_env}: add the app to the space's members")
        raise SyncFailed(self._refusal(answer, reply))

    def _members(self) -> list[str]:
        """A private space's members as readers (_named)."""
        return _named(self._listing(f"/open-apis/wiki/v2/spaces/{self.place.key}/members", {},
                                    "members", "page_token"))

    def _shared_with(self, doc: FeishuDoc) -> list[str]:
        """A Drive document's readers: none beyond the source's when its link lets everyone of
        the tenant (or anyone) read it; else its owner and collaborators (_named). ItemFailed
        when Feishu says it will not tell (the app may not share it, the document is gone);
        SyncFailed when it may tell later (a rate limit, a server error, no answer in time)
        or the app lacks the scope to ask: its last readers stand."""
        self.deadline.check()
        answer, reply = self._get(f"/open-apis/drive/v2/permissions/{doc.token}/public"
                                  "?type=docx")
        if answer.status != 200 or reply.get("code") != 0:
            raise self._failure(answer, reply, item=True, settled=True)
        public = _mapping(_mapping(reply.get("data")).get("permission_public"))
        if not public:
            raise SyncFailed("Feishu's answer holds no link settings")
        if public.get("link_share_entity") in OPEN_LINKS:
            return []
        owner = [{"member_type": "openid", "member_id": doc.owner}] if doc.owner else []
        collaborators = self._listing(f"/open-apis/drive/v1/permissions/{doc.token}/members",
                                      {"type": "docx"}, "items", "page_token", item=True,
                                      settled=True)
        return _named([*owner, *collaborators])

    def _nodes(self) -> list[Listed]:
        """Every docx node of the space, the whole tree (one listing for the root and one for
        each node with children) or SyncFailed."""
        found: list[Listed] = []
        below: list[tuple[str, list[str]]] = [("", [])]
        listed = 0
        while below:
            parent, titles = below.pop()
            query = {"page_size": WIKI_PAGE, **({"parent_node_token": parent} if parent else {})}
            for node in self._listing(f"/open-apis/wiki/v2/spaces/{self.place.key}/nodes",
                                      query, "items", "page_token"):
                listed += 1
                if listed > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
                node_token = _token(node, "node_token")
                if node.get("node_type") == "shortcut":
                    continue  # its origin is read where it lives
                path = [*titles, str(node.get("title") or "")]
                if node.get("obj_type") == "docx":
                    found.append(Listed(path, _token(node, "obj_token"),
                                        str(node.get("obj_edit_time") or ""),
                                        f"wiki/{node_token}"))
                if node.get("has_child"):
                    if len(path) >= MAX_NESTING:
                        raise SyncFailed(f"the space nests deeper than {MAX_NESTING} pages")
                    below.append((node_token, path))
        return found

    def _files(self) -> list[Listed]:
        """Every docx of the folder and its sub-folders (one listing each) or SyncFailed."""
        found: list[Listed] = []
        below: list[tuple[str, list[str]]] = [(self.place.key, [])]
        seen = {self.place.key}
        listed = 0
        while below:
            folder, titles = below.pop()
            for file in self._listing("/open-apis/drive/v1/files",
                                      {"folder_token": folder, "page_size": FOLDER_PAGE},
                                      "files", "next_page_token"):
                listed += 1
                if listed > settings.KB_SOURCE_MAX_FILES:
                    raise too_many()
                token, kind = _token(file, "token"), file.get("type")
                path = [*titles, str(file.get("name") or "")]
                if kind == "docx":
                    owner = file.get("owner_id")
                    owner = owner if isinstance(owner, str) and OBJECT_TOKEN.match(owner) else ""
                    found.append(Listed(path, token, str(file.get("modified_time") or ""),
                                        f"docx/{token}", owner))
                elif kind == "folder" and token not in seen:
                    if len(path) >= MAX_NESTING:
                        raise SyncFailed(f"the folder nests deeper than {MAX_NESTING} folders")
                    seen.add(token)
                    below.append((token, path))
        return found

    def _listing(self, path: str, query: Mapping[str, Any], items: str, next_key: str, *,
                 budget: int = 0, item: bool = False,
                 settled: bool = False) -> Iterator[dict[str, Any]]:
        """The entries of a paged listing, page by page up to its end (a page may be empty
        and still have more: the open platform filters pages by permission); `budget`: the
        bytes its answers may hold in all (0: no bound but the pages'). A failure fails the
        sync, or the one document (`item`, `settled`: _failure); an entry that is not an
        object fails it too."""
        failed = ItemFailed if item else SyncFailed
        tokens: set[str] = set()
        page_token, spent = "", 0
        while True:
            self.deadline.check()
            paged = {**query, **({"page_token": page_token} if page_token else {})}
            answer, reply = self._get(f"{path}?{urlencode(paged)}", item=item and not settled)
            spent += len(answer.body)
            if budget and spent > budget:
                raise failed(f"its answers are over {budget} bytes")
            data = reply.get("data")
            if answer.status != 200 or reply.get("code") != 0 or not isinstance(data, dict):
                raise self._failure(answer, reply, item=item, settled=settled)
            entries = data.get(items) or []
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise failed("Feishu's answer is not a listing")
            yield from entries
            page_token = str(data.get(next_key) or "")
            if not data.get("has_more"):
                return
            if not TOKEN.match(page_token) or page_token in tokens:
                raise failed("Feishu's listing goes on without a new page")
            tokens.add(page_token)

    def _docs(self, found: list[Listed]) -> list[FeishuDoc]:
        """The documents by path (a document listed twice taken once)."""
        by_token: dict[str, Listed] = {}
        for listed in found:
            by_token.setdefault(listed.token, listed)
        paths = distinct_paths({token: "/".join(map(path_name, listed.titles))
                                for token, listed in by_token.items()})
        return [FeishuDoc(token=token, path=f"{paths[token]}.md",
                          version=f"{token}:{listed.edited}" if listed.edited else "",
                          url=f"{self.place.site}/{listed.page}",
                          title=listed.titles[-1] or path_name(""), owner=listed.owner)
                for token, listed in by_token.items()]

    def _body(self, doc: FeishuDoc) -> bytes:
        """The document's blocks, every page of them, as markdown."""
        listing = self._listing(f"/open-apis/docx/v1/documents/{doc.token}/blocks",
                                {"page_size": BLOCK_PAGE, "document_revision_id": -1},
                                "items", "page_token", budget=self.max_bytes * BODY_OVERHEAD,
                                item=True)
        blocks = {block["block_id"]: block for block in listing
                  if isinstance(block.get("block_id"), str)}
        if not any(_kind(block) == PAGE for block in blocks.values()):
            raise ItemFailed("Feishu's answer holds no page block")
        return bounded(blocks_markdown(doc.title, blocks).encode("utf-8", "replace"),
                      self.max_bytes)

    def _get(self, path: str, *, item: bool = False) -> tuple[Answer, Mapping[str, Any]]:
        """A GET of the open platform (signed in again when the token nears its end): the
        answer and its JSON object ({} when it has none)."""
        if time.monotonic() >= self.renew_at:
            self._sign_in()
        answer = api_request(self.http, f"{self.place.api}{path}", self.headers,
                             deadline=self.deadline, site="Feishu", item=item,
                             max_bytes=self.max_bytes * BODY_OVERHEAD if item
                             else MAX_LISTING_BYTES)
        try:
            reply = api_json(answer, "Feishu")
        except SyncFailed:
            reply = {}
        return answer, _mapping(reply)

    def _failure(self, answer: Answer, reply: Mapping[str, Any], *, item: bool,
                 settled: bool = False) -> SyncFailed | ItemFailed:
        """An answer that is no listing as the sync's failure, or the one document's (`item`):
        never for a scope the app lacks (the owner's to grant, for every document alike), nor,
        where the answer decides who may read it (`settled`), for one Feishu may answer
        otherwise later (a rate limit or a server error outlasting the retries)."""
        own = item and reply.get("code") not in NO_SCOPE and not (
            settled and answer.status in RETRIED)
        return (ItemFailed if own else SyncFailed)(self._refusal(answer, reply))

    def _refusal(self, answer: Answer, reply: Mapping[str, Any]) -> str:
        """Why an answer is no listing, as its owner can act on it."""
        code = reply.get("code")
        if code in NO_SCOPE:  # Feishu's message names the scopes the request takes
            said = str(reply.get("msg") or "")[:MAX_MESSAGE_CHARS]
            return (f"the app in {self.source.secret_env} lacks a scope this source needs: "
                    f"{SCOPES}{f' (Feishu: {said})' if said else ''}")
        if code == DOC_GONE or (answer.status == 404 and code is None):
            return "gone since the listing"
        if code == DOC_FORBIDDEN:
            return "the app may not read this document: share it with the app"
        if code == SHARING_HIDDEN:
            return ("the app may not see who may read this document: share it with the app "
                    "with the right to share it")
        if answer.status == 200 and not reply:
            return "Feishu's answer is not JSON"
        shown = f" (code {code})" if isinstance(code, int) else ""
        return f"Feishu answered {answer.status}{shown}"


def _named(members: Iterable[Mapping[str, Any]]) -> list[str]:
    """A private space's members, or a Drive document's owner and collaborators, as readers
    (readers_named, which reads the listing no further than it needs): apps left out; none
    left, or one of no kind a reader can say: NOBODY."""
    return readers_named(_member_names(members), restricts=True)


def _member_names(members: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    for member in members:
        if member.get("type") == "app" or member.get("member_type") in APP_KINDS:
            continue  # an app (this source's among them) is no one an agent acts for
        kind, named = MEMBER_KINDS.get(str(member.get("member_type"))), member.get("member_id")
        yield kind + named if kind is not None and isinstance(named, str) and named else NOBODY


def _token(entry: Mapping[str, Any], key: str) -> str:
    """A node's, document's or file's token as a listing gives it: one a URL path carries as
    it is, else the listing fails."""
    token = entry.get(key)
    if not isinstance(token, str) or not OBJECT_TOKEN.match(token):
        raise SyncFailed(f"Feishu's listing gives an entry no {key}")
    return token


def blocks_markdown(title: str, blocks: Mapping[str, Mapping[str, Any]]) -> str:
    """A document's blocks (docx v1: a page block whose children are the document's, in
    order) as markdown: its title, headings, paragraphs, lists, to-dos, quotes, code, tables,
    the text of what holds text (callouts, columns); images, files and embeds left out."""
    lines = [f"# {title}", ""]
    seen: set[str] = set()

    def para(*texts: str) -> None:
        if lines[-1] != "":
            lines.append("")
        lines.extend([*texts, ""])

    def walk(block_id: str, depth: int, indent: str) -> None:
        block = blocks.get(block_id)
        if block is None or block_id in seen or depth > MAX_NESTING:
            return
        seen.add(block_id)
        kind = _kind(block)
        children = [c for c in _list(block.get("children")) if isinstance(c, str)]
        inner = indent
        if kind in HEADINGS:
            para(f"{'#' * min(kind - 1, 6)} {_text(block, TEXT_KEYS[kind])}")
        elif kind == TEXT:
            para(indent + _text(block, "text"))
        elif kind in (BULLET, ORDERED, TODO):
            done = _mapping(_mapping(block.get("todo")).get("style")).get("done") is True
            marker = {BULLET: "- ", ORDERED: "1. ", TODO: f"- [{'x' if done else ' '}] "}[kind]
            if lines[-1] != "" and not lines[-1].lstrip().startswith(("- ", "1. ")):
                lines.append("")
            lines.append(indent + marker + _text(block, TEXT_KEYS[kind]))
            inner = indent + " " * len(marker)
        elif kind == CODE:
            code = _text(block, "code", lines=True)
            fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", code)), default=0) + 1)
            para(fence, code, fence)
        elif kind == QUOTE:
            para("> " + _text(block, "quote"))
        elif kind == QUOTE_CONTAINER:
            inner = indent + "> "
        elif kind == DIVIDER:
            para("---")
        elif kind == TABLE:
            para(*_table(block, blocks, seen))
            return
        for child in children:
            walk(child, depth + 1, inner)

    root = next((block_id for block_id, block in blocks.items() if _kind(block) == PAGE), None)
    if root is not None:
        walk(root, 0, "")
    return "\n".join(lines).strip() + "\n"


def _text(block: Mapping[str, Any], key: str, *, lines: bool = False) -> str:
    """The text of a block's elements: runs (inline code and links kept), mentioned
    documents' titles, equations."""
    out: list[str] = []
    for element in _list(_mapping(block.get(key)).get("elements")):
        element = _mapping(element)
        run, mention, equation = (_mapping(element.get(k)) for k in (
            "text_run", "mention_doc", "equation"))
        if run:
            content = str(run.get("content") or "")
            style = _mapping(run.get("text_element_style"))
            link = _mapping(style.get("link")).get("url")
            if style.get("inline_code"):
                content = f"`{content}`"
            elif isinstance(link, str) and unquote(link).startswith(("https://", "http://")):
                content = f"[{content}]({unquote(link).replace(' ', '%20').replace(')', '%29')})"
            out.append(content)
        elif mention:
            out.append(str(mention.get("title") or ""))
        elif equation:
            out.append(str(equation.get("content") or ""))
    text = "".join(out)
    return text.rstrip("\n") if lines else " ".join(text.split())


def _table(block: Mapping[str, Any], blocks: Mapping[str, Mapping[str, Any]],
           seen: set[str]) -> list[str]:
    """A table block's cells (row by row, `property.column_size` to a row) as a markdown
    table of their text."""
    table = _mapping(block.get("table"))
    cells = [c for c in _list(table.get("cells")) if isinstance(c, str)]
    columns = _mapping(table.get("property")).get("column_size")
    if not isinstance(columns, int) or not 0 < columns <= len(cells):
        return []

    def text(cell_id: str) -> str:
        """The cell's text; a cell or block met before is read once only."""
        if cell_id in seen:
            return ""
        seen.add(cell_id)
        children = [c for c in _list(_mapping(blocks.get(cell_id)).get("children"))
                    if isinstance(c, str) and c not in seen]
        seen.update(children)
        held = [blocks.get(child) or {} for child in children]
        return " ".join(_text(b, TEXT_KEYS[_kind(b)]) for b in held
                        if _kind(b) in TEXT_KEYS).replace("|", "\\|")

    rows = [[text(c) for c in cells[i:i + columns]] for i in range(0, len(cells), columns)]
    return ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * columns,
            *("| " + " | ".join(row) + " |" for row in rows[1:])]


def _kind(block: Mapping[str, Any]) -> int:
    """A block's type (0: none that is a number)."""
    kind = block.get("block_type")
    return kind if type(kind) is int else 0


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` when an answer gave an object there, else an empty one."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
