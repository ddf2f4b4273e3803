"""Agent integrations, with the official clients: the MCP server over stdio (a subprocess) and
over streamable HTTP (/mcp of the WSGI app, on a real HTTP server), the tool schemas in the
OpenAI format in a tool-calling round trip against a local chat-completions server, and the
typed REST client checked against the OpenAPI schema."""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.conf import settings

from audit.models import ToolInvocation
from datasets.models import Document
from kbplatform_client import (
    Dataset,
    Evidence,
    Job,
    KbClient,
    KbError,
    LookupFilters,
    OnBehalfOf,
    ReplayedEvidence,
)
from retrieval.tools.registry import TOOLS
from retrieval.tools.schemas import tool_definitions
from tests.conftest import wait_until
from tests.mcp_clients import over_http
from tests.retrieval.chat_server import chat_server
from tests.retrieval.conftest import Imported, MakeKey, client_for

ROOT = Path(__file__).resolve().parents[3]
READY_QUESTION = "nginx 502 bad gateway upstream connection refused"
OFF_TOPIC = "What is the capital of Mongolia?"


# --- the tool schemas -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["openai", "anthropic", "mcp"])
def test_the_tool_schemas_are_valid_json_schema_in_each_format(fmt: str) -> None:
    response = client_for(None).get(f"/api/tools/schema?format={fmt}")
    assert response.status_code == 200
    tools = response.json()["tools"]
    assert [t["function"]["name"] if fmt == "openai" else t["name"] for t in tools] == \
        [tool.name for tool in TOOLS]
    for tool in tools:
        schema = {"openai": lambda t: t["function"]["parameters"],
                  "anthropic": lambda t: t["input_schema"],
                  "mcp": lambda t: t["inputSchema"]}[fmt](tool)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and "$ref" not in json.dumps(schema)
    lookup = tools[0]["function"] if fmt == "openai" else tools[0]
    assert "document_id" in lookup["description"]  # how to cite


def test_the_schemas_are_the_rest_apis_own() -> None:
    """The same serializers: what the schema refuses, the endpoint refuses."""
    params = tool_definitions("openai")[0]["function"]["parameters"]
    validator = jsonschema.Draft202012Validator(params)
    assert params["required"] == ["query"]
    assert params["properties"]["query"]["maxLength"] == settings.KB_MAX_QUERY_CHARS
    assert not list(validator.iter_errors({"query": "nginx 502", "dataset_ids": [1]}))
    assert list(validator.iter_errors({"query": "x" * (settings.KB_MAX_QUERY_CHARS + 1)}))
    # A call's filters: their keys and bounds, and no key of the model's own.
    assert not list(validator.iter_errors({"query": "q", "filters": {"domain": ["web"]}}))
    for wrong in ({"service": ["x"]}, {"domain": "web"}, {"document_ids": []},
                  {"document_ids": ["1"] * 101}):
        assert list(validator.iter_errors({"query": "q", "filters": wrong})), wrong
    node = tool_definitions("anthropic")[-1]
    assert node["name"] == "rag_node"
    assert {"rag_keywords", "target_dataset_name", "sub_agents"} <= \
        set(node["input_schema"]["properties"])


def test_the_result_schemas_take_what_the_tools_answer_nulls_included() -> None:
    """MCP clients check each result against its output schema: a nullable object (`lines`
    of a PDF's evidence, or of a chunk indexed before lines were kept) must pass."""
    from jsonschema import validate

    from retrieval.lookup.project import RagToolResult
    from retrieval.tools.schemas import output_schema
    from tests.retrieval.builders import lookup_result

    body = RagToolResult.of(lookup_result()).as_dict()
    assert body["evidence"][0]["lines"] is None
    validate(body, output_schema("lookup_knowledge"))
    body["evidence"][0]["lines"] = {"start": 3, "end": 9}
    validate(body, output_schema("lookup_knowledge"))
    replayed = {"tool_call_id": "c", "served_at": "2026-12-06T12:00:00+00:00",
                "evidence_status": "READY", "config_version": None, "index_version": None,
                "withheld": 0, "evidence": [{**e, "revision": "", "current": False}
                                            for e in body["evidence"]]}
    validate(replayed, output_schema("replay_evidence"))


def test_an_unknown_format_is_a_clear_400() -> None:
    response = client_for(None).get("/api/tools/schema?format=gemini")
    assert response.status_code == 400 and response.json()["code"] == "invalid_format"


def audited(tool_call_id: str) -> ToolInvocation:
    return ToolInvocation.objects.get(tool_call_id=tool_call_id)


# --- MCP over streamable HTTP -----------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_the_official_client_over_streamable_http(acme: Imported, make_key: MakeKey,
                                                  web: str) -> None:
    _, secret = make_key("acme")
    names, (ready, empty, datasets) = over_http(f"{web}/mcp", secret, [
        ("lookup_knowledge", {"query": READY_QUESTION, "tool_call_id": "mcp-http-1"}),
        ("lookup_knowledge", {"query": OFF_TOPIC, "tool_call_id": "mcp-http-2"}),
        ("list_datasets", {})])
    assert names == [tool.name for tool in TOOLS]
    assert not ready.is_error and ready.structured_content["evidence_status"] == "READY"
    first = ready.structured_content["evidence"][0]["document_id"]
    assert f'<source id="{first}"' in ready.content[0].text  # delimited, under its id
    assert acme.stem_of(first) == "nginx"
    assert empty.structured_content["evidence_status"] == "EMPTY" and not empty.is_error
    assert [d["name"] for d in datasets.structured_content["datasets"]] == ["ops"]
    row = audited("mcp-http-1")
    assert (row.channel, row.tool_name, row.outcome) == ("mcp", "lookup_knowledge", "ok")
    assert row.api_key_id is not None and row.latency_ms > 0
    assert audited("mcp-http-2").outcome == "empty"

    # The evidence guard confirms what the MCP call handed out, over REST as over MCP.
    _, (guard,) = over_http(f"{web}/mcp", secret, [
        ("evidence_guard", {"tool_call_id": "mcp-http-1", "document_ids": [first]})])
    assert guard.structured_content == {"ready": [first], "not_ready": []}


@pytest.mark.django_db(transaction=True)
def test_a_wrong_key_over_http_is_a_tool_error_with_the_rest_apis_code(
        acme: Imported, web: str) -> None:
    before = ToolInvocation.objects.count()
    _, (refused,) = over_http(f"{web}/mcp", "kb_wrong_key", [
        ("lookup_knowledge", {"query": READY_QUESTION})])
    assert refused.is_error
    assert refused.structured_content["code"] == "authentication_failed"
    rest = client_for("kb_wrong_key").post("/api/tools/lookup_knowledge", {"query": "q"},
                                           format="json")
    assert rest.json()["code"] == refused.structured_content["code"]
    rows = ToolInvocation.objects.order_by("id")[before:]
    assert [(r.channel, r.outcome, r.api_key_id) for r in rows] == [
        ("mcp", "unauthenticated", None), ("rest", "unauthenticated", None)]


@pytest.mark.django_db(transaction=True)
def test_invalid_arguments_and_unknown_datasets_are_tool_errors(
        acme: Imported, globex: Imported, make_key: MakeKey, web: str) -> None:
    from datasets.models import Dataset

    _, secret = make_key("acme")
    foreign = Dataset.objects.get(tenant=globex.tenant).pk
    _, (blank, unknown, no_tool) = over_http(f"{web}/mcp", secret, [
        ("lookup_knowledge", {"query": "   ", "tool_call_id": "mcp-bad-1"}),
        ("lookup_knowledge", {"query": "q", "dataset_ids": [foreign],
                              "tool_call_id": "mcp-bad-2"}),
        ("drop_database", {})])
    _, (filtered,) = over_http(f"{web}/mcp", secret, [
        ("lookup_knowledge", {"query": "q", "tool_call_id": "mcp-bad-3",
                              "filters": {"secret=hunter2": ["x"], "domain": ["web"]}})])
    assert filtered.is_error and "filters" in filtered.structured_content["extra"]["fields"]
    # The caller's key is in the answer's message, never in what the audit keeps.
    assert "hunter2" not in json.dumps(audited("mcp-bad-3").details)
    assert blank.is_error and blank.structured_content["code"] == "invalid"
    assert "query" in blank.structured_content["extra"]["fields"]
    assert unknown.is_error and unknown.structured_content["code"] == "unknown_dataset"
    assert no_tool.is_error and no_tool.structured_content["code"] == "not_found"
    assert [audited(c).outcome for c in ("mcp-bad-1", "mcp-bad-2")] == ["invalid", "invalid"]


@pytest.mark.django_db(transaction=True)
def test_a_failing_backend_is_an_unavailable_tool_error(acme: Imported, make_key: MakeKey,
                                                        web: str) -> None:
    from retrieval.models import RagConfig

    RagConfig.objects.create(tenant=acme.tenant, enable_correction=True)  # no longer valid
    _, secret = make_key("acme")
    _, (failed,) = over_http(f"{web}/mcp", secret, [
        ("rag_answer", {"query": READY_QUESTION, "tool_call_id": "mcp-down"})])
    assert failed.is_error and failed.structured_content["answer_status"] == "UNAVAILABLE"
    row = audited("mcp-down")
    assert (row.channel, row.tool_name, row.outcome) == ("mcp", "rag_answer", "unavailable")


def test_the_http_endpoint_bounds_what_it_accepts(web: str) -> None:
    """No event stream to hold a web thread (GET), a bounded body, DNS-rebinding protection."""
    import http.client
    from urllib.parse import urlsplit

    from retrieval.tools.mcp_http import MAX_BODY_BYTES

    def ask(method: str, body: bytes = b"", host: str = "", origin: str = "") -> int:
        where = urlsplit(web)
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if host:
            headers["Host"] = host
        if origin:
            headers["Origin"] = origin
        connection.request(method, "/mcp", body=body or None, headers=headers)
        status = connection.getresponse().status
        connection.close()
        return status

    assert ask("GET") == 405 and ask("DELETE") == 405
    assert ask("POST", b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' +
               b"a" * MAX_BODY_BYTES + b'"}}') == 413
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    assert ask("POST", ping, host="evil.example") == 421
    assert ask("POST", ping, origin="http://evil.example") == 403
    assert ask("POST", ping, origin="http://localhost:3000") == 200


# --- OpenAI function calling through the client -----------------------------------------------

def readme_agent_loop() -> str:
    """The README's agent loop, as written (its Python block under "## Agents")."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Agents"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.django_db(transaction=True)
def test_the_readmes_agent_loop_calls_the_tool_and_cites(
        acme: Imported, make_key: MakeKey, web: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's loop against a scripted chat-completions server: the model asks for
    lookup_knowledge with arguments valid under the OpenAI schema, the loop calls it through
    the client, the model cites a document_id, the guard confirms it."""
    _, secret = make_key("acme")

    def call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
        return {"id": f"tc-{n}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}

    def model(body: dict[str, Any]) -> dict[str, Any]:
        assert [t["function"]["name"] for t in body["tools"]] == [t.name for t in TOOLS]
        results = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if not results:  # round 1: look it up
            arguments = {"query": READY_QUESTION}
            jsonschema.validate(arguments, body["tools"][0]["function"]["parameters"])
            return {"content": None, "tool_calls": [call("lookup_knowledge", arguments, 1)]}
        cited = results[0]["evidence"][0]["document_id"]
        if len(results) == 1:  # round 2: check the id by the call's id; a mistaken lookup
            return {"content": None, "tool_calls": [
                call("evidence_guard", {"tool_call_id": results[0]["tool_call_id"],
                                        "document_ids": [cited]}, 2),
                call("lookup_knowledge", {"query": "q", "dataset_ids": [999_999]}, 3)]}
        assert results[1] == {"ready": [cited], "not_ready": []}
        assert results[2]["error"] == "unknown_dataset"  # handed back, the loop goes on
        return {"content": f"Check the upstream is listening [{cited}] [d_made_up#chunk-9]."}

    code = readme_agent_loop()
    for written, here in (('"http://127.0.0.1:8000"', repr(web)),
                          ('open("var/demo-tool-key.txt").read().strip()', repr(secret))):
        assert written in code
        code = code.replace(written, here)
    with chat_server() as server:
        server.reply = model
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)  # what OpenAI() reads
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        scope: dict[str, Any] = {}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102
    answer, cited = scope["answer"], scope["cited"]
    assert len(cited) == 1 and acme.stem_of(cited[0]) == "nginx"  # the made-up id is not
    assert f"[{cited[0]}]" in answer
    assert audited_session("agent-1") == [("rest", "lookup_knowledge")] * 2


def audited_session(session_id: str) -> list[tuple[str, str]]:
    return [(r.channel, r.tool_name) for r in
            ToolInvocation.objects.filter(session_id=session_id).order_by("id")]


# --- the typed client --------------------------------------------------------------------------

CLIENT_OPERATIONS = {  # method → (HTTP method, path in the OpenAPI schema)
    "lookup": ("post", "/api/tools/lookup_knowledge"),
    "evidence_guard": ("post", "/api/tools/evidence_guard"),
    "rate_evidence": ("post", "/api/tools/rate_evidence"),
    "fetch_evidence": ("post", "/api/tools/fetch_evidence"),
    "verify_answer": ("post", "/api/tools/verify_answer"),
    "cited_rates": ("get", "/api/audit/cited-rates"),
    "experiment_cited_rates": ("get", "/api/rag/experiments/{experiment_id}/cited-rates"),
    "rag_answer": ("post", "/api/rag/answer"), "rag_agentic": ("post", "/api/rag/agentic"),
    "rag_node": ("post", "/api/rag/node"), "tool_schemas": ("get", "/api/tools/schema"),
    "datasets": ("get", "/api/datasets"), "filterable_fields": ("get", "/api/datasets"),
    "upload": ("post", "/api/datasets/{dataset_id}/documents"),
    "job": ("get", "/api/jobs/{job_id}"),
    "replay_evidence": ("get", "/api/evidence/{tool_call_id}"),
}


def test_the_client_is_checked_against_the_openapi_schema() -> None:
    schema = client_for(None).get("/api/schema?format=json").json()
    public = {name for name, _ in inspect.getmembers(KbClient, inspect.isfunction)
              if not name.startswith("_")} - {"call_tool", "wait_for_job", "acting_for"}
    assert public == set(CLIENT_OPERATIONS)
    components = schema["components"]["schemas"]
    for method_name, (method, path) in CLIENT_OPERATIONS.items():
        operation = schema["paths"][path][method]
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if not body:
            continue
        properties = set(components[body["schema"]["$ref"].rsplit("/", 1)[1]]["properties"])
        keywords = {p.name for p in inspect.signature(getattr(KbClient, method_name))
                    .parameters.values() if p.kind is p.KEYWORD_ONLY or
                    p.kind is p.POSITIONAL_OR_KEYWORD} - {"self"}
        if method_name != "rag_node":  # rag_node takes the body's fields as **task
            assert keywords <= properties, (method_name, keywords - properties)
    # What the client says a dataset and a job hold is what the API answers with, and its
    # lookup filters are the ones the API takes.
    for typed, component in ((Dataset, "Dataset"), (Job, "Job"),
                             (LookupFilters, "LookupFiltersRequest"),
                             (OnBehalfOf, "OnBehalfOfRequest")):
        assert set(typed.__annotations__) == set(components[component]["properties"]), \
            component


@pytest.mark.django_db(transaction=True)
def test_the_client_uploads_follows_the_job_and_looks_up(acme: Imported, make_key: MakeKey,
                                                         web: str, request: Any) -> None:
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        request.getfixturevalue("celery_worker")  # the services run indexes in a worker
    _, admin = make_key("acme", role="admin")
    kb = KbClient(web, api_key=admin)
    [ops] = kb.datasets()
    text = ("# Zookeeper session expired\n\nWhen a Zookeeper client logs SESSION_EXPIRED, "
            "raise the session timeout and check for long GC pauses.\n")
    uploaded = kb.upload(ops["id"], "zk-session.md", text.encode())
    if uploaded["job"]:
        assert kb.wait_for_job(uploaded["job"]["id"], timeout_s=120)["status"] == "succeeded"
    found = kb.lookup("zookeeper SESSION_EXPIRED")
    assert found["evidence_status"] == "READY"
    assert found["evidence"][0]["document_id"].startswith(uploaded["document"]["document_id"])
    # The call's filters: its own document by an evidence id, or the others by their ids.
    mine = uploaded["document"]["document_id"]
    assert kb.lookup("zookeeper SESSION_EXPIRED", filters={"document_ids": [
        found["evidence"][0]["document_id"]]})["evidence_status"] == "READY"
    elsewhere = kb.lookup("zookeeper SESSION_EXPIRED", filters={
        "document_ids": [d.doc_key for d in acme.documents.values()]})
    assert not any(e["document_id"].startswith(f"{mine}#") for e in elsewhere["evidence"])
    replayed = kb.replay_evidence(found["tool_call_id"])
    assert [e["excerpt"] for e in replayed["evidence"]] == [
        e["excerpt"] for e in found["evidence"]]
    assert set(ReplayedEvidence.__annotations__) == {*Evidence.__annotations__, "revision",
                                                     "current"}
    with pytest.raises(KbError) as gone:
        kb.replay_evidence("call_never_made")
    assert (gone.value.status, gone.value.code) == (404, "not_found")
    with pytest.raises(KbError) as refused:
        KbClient(web, api_key="kb_wrong").lookup("q")
    assert (refused.value.status, refused.value.code) == (401, "authentication_failed")
    # Restricted to a group, the document is served to a call made for one of its members.
    assert client_for(admin).patch(f"/api/documents/{mine}", {"readers": ["group:sre"]},
                                   format="json").status_code == 200
    # Once its rows name the group: while the worker rewrites them, Milvus 2.5's engine
    # serves neither the old rows nor the new ones (docs/operations.md).
    wait_until(lambda: Document.objects.get(doc_id=int(mine)).indexed_readers == ["group:sre"],
               timeout=60, what="the worker writes the readers into its rows")
    acting, secret = make_key("acme")
    acting.acts_for_people = True
    acting.save(update_fields=["acts_for_people"])
    sre = KbClient(web, api_key=secret).acting_for("alice@example.com", ["sre"])
    found = sre.lookup("zookeeper SESSION_EXPIRED", tool_call_id="call_sre_1")
    assert found["evidence"][0]["document_id"].startswith(f"{mine}#")
    assert sre.replay_evidence("call_sre_1")["withheld"] == 0
    assert sre.evidence_guard([found["evidence"][0]["document_id"]],
                              tool_call_id="call_sre_1")["not_ready"] == []
    others = KbClient(web, api_key=secret).acting_for("bob@example.com", ["dba"])
    assert others.replay_evidence("call_sre_1")["evidence"] == []
    assert not any(e["document_id"].startswith(f"{mine}#")
                   for e in others.lookup("zookeeper SESSION_EXPIRED")["evidence"])
    with pytest.raises(KbError) as forbidden:
        kb.acting_for("alice@example.com").lookup("zookeeper SESSION_EXPIRED")
    assert forbidden.value.status == 403


def test_a_503_that_is_not_a_tools_result_raises() -> None:
    """A proxy's 503 page is no UNAVAILABLE result: the client raises, never returns {}."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"<html>upstream down</html>")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        with pytest.raises(KbError) as down:
            KbClient(f"http://127.0.0.1:{proxy.server_port}", api_key="k").lookup("q")
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert (down.value.status, down.value.code) == (503, "http_error")

