"""A small typed client for the kbplatform REST API; the standard library only.

    from kbplatform_client import KbClient
    kb = KbClient("http://127.0.0.1:8000", api_key="kb_…")
    result = kb.lookup("Redis 内存满了怎么办", session_id="s1")
    cited = kb.evidence_guard([e["document_id"] for e in result["evidence"]], session_id="s1")

Every method is one operation of the OpenAPI schema (`GET /api/schema`); the test suite checks
each against it. An answer the API calls an error raises KbError with its HTTP status and the
error's `code` — except UNAVAILABLE from a tool (HTTP 503 with the tool's own result), which is
returned like READY or EMPTY: read `evidence_status` / `answer_status` / `status`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

TERMINAL_JOB_STATUSES = frozenset({"succeeded", "failed"})


class EvidenceCopy(TypedDict):
    document_id: str
    source: str


class Lines(TypedDict):
    start: int  # 1-based
    end: int


class Evidence(TypedDict):
    document_id: str
    source: str
    title: str
    breadcrumb: str  # "p. 3 > Section" when the excerpt has a location
    location: dict[str, int | str] | None  # {"page": 3}, {"slide": 2}, {"sheet": "Inventory"}
    commit: str  # a git source's document: the commit its content came from; "" otherwise
    excerpt: str
    also_in: list[EvidenceCopy]  # the same text found elsewhere, ranked lower: collapsed here
    url: str  # where a person reads it: the web page, the git file at its lines, the admin
    lines: Lines | None  # the lines of the file it spans (markdown)
    updated_at: str | None  # ISO 8601: when its document's content last changed
    reviewed_at: str | None  # frontmatter dates, ISO 8601
    valid_until: str | None
    owner: str
    stale: bool  # served after valid_until


class SearchedDataset(TypedDict):
    id: int
    name: str


class LookupResult(TypedDict):
    evidence_status: str
    tool_call_id: str
    query: str
    evidence: list[Evidence]
    relevance_level: str
    truncated: bool
    returned_count: int
    searched_datasets: list[SearchedDataset]  # EMPTY only: what was searched
    covered_topics: list[str]  # EMPTY only: what those datasets cover, nearest first


class LookupFilters(TypedDict, total=False):
    """What a call narrows its search to; every key given must match."""

    document_ids: list[str]  # a docId, or an evidence id naming its document
    source: list[str]  # source path prefixes
    format: list[str]  # md, pdf, docx, ...
    tags: list[str]  # frontmatter keywords, case aside
    category: list[str]
    domain: list[str]
    business_key: list[str]
    file_name: list[str]
    updated_after: str  # ISO 8601 date or date-time
    updated_before: str
    fields: dict[str, list[str]]  # frontmatter fields the tenant declared filterable


class GuardResult(TypedDict):
    ready: list[str]
    not_ready: list[str]


class FetchResult(TypedDict):
    evidence_status: str  # READY, or UNAVAILABLE (a backend failed: no text, no ids)
    tool_call_id: str
    document_id: str  # the chunk asked for
    source: str
    title: str
    breadcrumb: str
    location: dict[str, int | str] | None
    commit: str
    url: str
    lines: Lines | None
    updated_at: str | None
    reviewed_at: str | None
    valid_until: str | None
    owner: str
    stale: bool
    text: str  # the section, at most max_chars: untrusted data
    document_ids: list[str]  # the chunks `text` holds: each may be cited
    truncated: bool  # the section goes on: fetch `next` (or `previous`)
    previous: str
    next: str


class ReplayedEvidence(Evidence):
    revision: str  # the content hash of the document version the excerpt was read from
    current: bool  # the document is still at that version


class ReplayResult(TypedDict):
    tool_call_id: str
    served_at: str  # ISO 8601
    evidence_status: str
    config_version: int | None
    index_version: int | None  # the index version the call searched
    evidence: list[ReplayedEvidence]  # as served, byte for byte
    withheld: int  # pieces whose document may no longer be served to this key


class CheckedSentence(TypedDict):
    text: str
    supported: bool
    support: float  # the best served chunk's share of its content terms
    evidence: list[str]  # served chunks that support it, best first
    cited: list[str]
    judged_by: str  # words | model


class VerifyResult(TypedDict):
    sentences: list[CheckedSentence]
    unsupported: list[str]  # the sentences nothing served supports
    evidence_checked: int
    skipped: int
    judge: str | None  # the chat model that judged (judge=True)


class RatingResult(TypedDict):
    tool_call_id: str
    rating: str  # "helpful" | "not_helpful"
    rated: list[str]


class AnswerResult(LookupResult):
    answer: str
    citations: list[str]
    answer_status: str


class Dataset(TypedDict):
    id: int
    name: str
    description: str
    kb_scope: str
    activated: bool
    created_at: str


class Job(TypedDict):
    id: int
    kind: str
    status: str
    done: int
    total: int
    detail: dict[str, Any]
    error: str
    log: list[dict[str, str]]  # what it did: [{"at": ISO time, "message": …}], its last lines
    created_at: str
    updated_at: str


class KbError(RuntimeError):
    """An error answer of the API: `status` (HTTP), `code` and `message` from its body
    (`http_error` and the reason when the body is not the API's: a proxy's page, say)."""

    def __init__(self, status: int, code: str, message: str,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.body = body or {}


class OnBehalfOf(TypedDict, total=False):
    """The person a call is made for (`on_behalf_of`): the user and their groups, as the
    tenant's documents name readers."""

    user: str
    groups: list[str]


class KbClient:
    def __init__(self, base_url: str, *, api_key: str, timeout_s: float = 60.0,
                 on_behalf_of: OnBehalfOf | None = None) -> None:
        """`on_behalf_of`: every tool call is made for this person (a key that may act for
        people; else 403); None: for nobody, reading documents without readers only."""
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.on_behalf_of = on_behalf_of

    def acting_for(self, user: str, groups: Sequence[str] = ()) -> KbClient:
        """This client, its tool calls made for `user` of `groups`."""
        return KbClient(self.base_url, api_key=self.api_key, timeout_s=self.timeout_s,
                        on_behalf_of={"user": user, "groups": list(groups)})

    # --- the tools ---------------------------------------------------------------------------

    def lookup(self, query: str, *, dataset_ids: Sequence[int] = (), tool_call_id: str = "",
               session_id: str = "", filters: LookupFilters | None = None) -> LookupResult:
        """`filters` narrow the search (docs/api.md, "Narrowing a call")."""
        return cast(LookupResult, self._tool("/api/tools/lookup_knowledge", _lookup_body(
            query, dataset_ids, tool_call_id, session_id, filters)))

    def evidence_guard(self, document_ids: Sequence[str], *, tool_call_id: str = "",
                       session_id: str = "") -> GuardResult:
        body: dict[str, Any] = {"document_ids": list(document_ids)}
        body.update({k: v for k, v in (("tool_call_id", tool_call_id),
                                       ("session_id", session_id)) if v})
        return cast(GuardResult, self._json("POST", "/api/tools/evidence_guard",
                                            self._for(body)))

    def fetch_evidence(self, document_id: str, *, section: str = "", max_chars: int = 0,
                       tool_call_id: str = "", session_id: str = "") -> FetchResult:
        """The section evidence `document_id` (`<docId>#<anchor>`, or a bare docId with
        `section`, a breadcrumb) belongs to; KbError 404 `not_found` for an id this key may not
        read. `max_chars` 0: the API's default."""
        body: dict[str, Any] = {"document_id": document_id}
        body.update({k: v for k, v in (("section", section), ("max_chars", max_chars),
                                       ("tool_call_id", tool_call_id),
                                       ("session_id", session_id)) if v})
        return cast(FetchResult, self._tool("/api/tools/fetch_evidence", body))

    def replay_evidence(self, tool_call_id: str) -> ReplayResult:
        """Exactly what the call `tool_call_id` served, while its record is kept; KbError 404
        `not_found` for a call this key may not see (or past its time)."""
        person = self.on_behalf_of
        query = urllib.parse.urlencode(
            {"user": person.get("user", ""), "group": person.get("groups", [])}, doseq=True
        ) if person else ""
        return cast(ReplayResult, self._json(
            "GET", f"/api/evidence/{urllib.parse.quote(tool_call_id, safe='')}"
                   + (f"?{query}" if query else "")))

    def verify_answer(self, answer: str, *, tool_call_id: str = "", session_id: str = "",
                      judge: bool = False) -> VerifyResult:
        """Which sentences of `answer` the evidence served to the call (or session) supports;
        `judge`: the tenant's chat model decides too."""
        body: dict[str, Any] = {"answer": answer, **({"judge": True} if judge else {})}
        body.update({k: v for k, v in (("tool_call_id", tool_call_id),
                                       ("session_id", session_id)) if v})
        return cast(VerifyResult, self._json("POST", "/api/tools/verify_answer",
                                             self._for(body)))

    def rate_evidence(self, tool_call_id: str, document_ids: Sequence[str], *,
                      rating: str) -> RatingResult:
        """`rating` "helpful" or "not_helpful" for evidence the call `tool_call_id` of this key
        served; KbError 404 `not_served` (nothing rated) for anything else."""
        return cast(RatingResult, self._json("POST", "/api/tools/rate_evidence", self._for({
            "tool_call_id": tool_call_id, "document_ids": list(document_ids),
            "rating": rating})))

    def rag_answer(self, query: str, *, dataset_ids: Sequence[int] = (), tool_call_id: str = "",
                   session_id: str = "", filters: LookupFilters | None = None) -> AnswerResult:
        return cast(AnswerResult, self._tool("/api/rag/answer", _lookup_body(
            query, dataset_ids, tool_call_id, session_id, filters)))

    def rag_agentic(self, query: str, *, dataset_ids: Sequence[int] = (),
                    tool_call_id: str = "", session_id: str = "",
                    filters: LookupFilters | None = None) -> dict[str, Any]:
        return self._tool("/api/rag/agentic", _lookup_body(query, dataset_ids, tool_call_id,
                                                           session_id, filters))

    def rag_node(self, **task: Any) -> dict[str, Any]:
        """`task`: query, rag_keywords, user_input, target_dataset_ids, target_dataset_name,
        agent, sub_agents, tool_call_id, session_id, filters (POST /api/rag/node)."""
        return self._tool("/api/rag/node", task)

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A tool by the name of GET /api/tools/schema, with an agent's arguments."""
        if name == "list_datasets":  # what lookups may search, as the MCP tool lists them
            listed = self._json("GET", "/api/datasets")
            return {"datasets": [d for d in listed["datasets"] if d["activated"]],
                    "filterable_fields": listed["filterable_fields"]}
        if name in ("evidence_guard", "rate_evidence", "verify_answer"):
            return dict(self._json("POST", f"/api/tools/{name}", self._for(arguments)))
        paths = {"lookup_knowledge": "/api/tools/lookup_knowledge",
                 "fetch_evidence": "/api/tools/fetch_evidence",
                 "rag_answer": "/api/rag/answer", "rag_agentic": "/api/rag/agentic",
                 "rag_node": "/api/rag/node"}
        if name not in paths:
            raise KbError(404, "not_found", f"no tool named {name!r}")
        return self._tool(paths[name], dict(arguments))

    def tool_schemas(self, fmt: str = "openai") -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = self._json(
            "GET", "/api/tools/schema?" + urllib.parse.urlencode({"format": fmt}))["tools"]
        return tools

    # --- figures (admin keys) -----------------------------------------------------------------

    def cited_rates(self, *, dataset_id: int | None = None,
                    days: int | None = None) -> dict[str, Any]:
        """The cited rates of the key's tenant (or one dataset, the last `days` days)."""
        query = {k: int(v) for k, v in (("dataset_id", dataset_id), ("days", days))
                 if v is not None}
        return self._json("GET", "/api/audit/cited-rates"
                          + (f"?{urllib.parse.urlencode(query)}" if query else ""))

    def experiment_cited_rates(self, experiment_id: int) -> dict[str, Any]:
        """An A/B test's arms: cited rate and cited per call, with their z-tests."""
        return self._json("GET", f"/api/rag/experiments/{int(experiment_id)}/cited-rates")

    # --- datasets, documents, jobs -----------------------------------------------------------

    def datasets(self) -> list[Dataset]:
        return cast(list[Dataset], self._json("GET", "/api/datasets")["datasets"])

    def filterable_fields(self) -> list[str]:
        """The frontmatter fields a call's `filters={"fields": …}` may name (the tenant's)."""
        return cast(list[str], self._json("GET", "/api/datasets")["filterable_fields"])

    def upload(self, dataset_id: int, file_name: str, content: bytes) -> dict[str, Any]:
        """Upload (admin keys) one document, in any format the API reads (markdown, PDF,
        DOCX...; the server tells them by name and content): {document, changed, job}."""
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"{_quoted(file_name)}\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n"
                ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
        return self._request("POST", f"/api/datasets/{int(dataset_id)}/documents", body,
                             f"multipart/form-data; boundary={boundary}")[1]

    def job(self, job_id: int) -> Job:
        return cast(Job, self._json("GET", f"/api/jobs/{int(job_id)}"))

    def wait_for_job(self, job_id: int, *, timeout_s: float = 600.0,
                     poll_s: float = 0.5) -> Job:
        """The job once it succeeded or failed; TimeoutError when it takes longer."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["status"] in TERMINAL_JOB_STATUSES:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job['status']} after {timeout_s} s")
            time.sleep(poll_s)

    # --- the wire ----------------------------------------------------------------------------

    def _tool(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A tool's result; its UNAVAILABLE (503 with the tool's own result) is a result too.
        Any other 503 (the API's error, a proxy's page) raises KbError."""
        try:
            return self._json("POST", path, self._for(body))
        except KbError as exc:
            if exc.status == 503 and any(exc.body.get(field) == "UNAVAILABLE" for field in
                                         ("evidence_status", "answer_status", "status")):
                return exc.body
            raise

    def _for(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A tool's body, made for the client's person (one the body names stays)."""
        if self.on_behalf_of is None:
            return dict(body)
        return {"on_behalf_of": dict(self.on_behalf_of), **body}

    def _json(self, method: str, path: str, body: Mapping[str, Any] | None = None
              ) -> dict[str, Any]:
        raw = json.dumps(body).encode() if body is not None else None
        return self._request(method, path, raw, "application/json" if raw else None)[1]

    def _request(self, method: str, path: str, data: bytes | None, content_type: str | None
                 ) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.api_key}")
        request.add_header("Accept", "application/json")
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            payload = _body(exc.read())
            raise KbError(exc.code, str(payload.get("code", "http_error")),
                          str(payload.get("message", exc.reason)), payload) from None


def _lookup_body(query: str, dataset_ids: Sequence[int], tool_call_id: str,
                 session_id: str, filters: LookupFilters | None) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query}
    if dataset_ids:
        body["dataset_ids"] = list(dataset_ids)
    if filters:
        body["filters"] = dict(filters)
    body.update({k: v for k, v in (("tool_call_id", tool_call_id), ("session_id", session_id))
                 if v})
    return body


def _body(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw)
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _quoted(name: str) -> str:
    return name.replace("\\", "_").replace('"', "_").replace("\r", "_").replace("\n", "_")
