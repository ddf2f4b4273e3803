"""The MCP server over stdio: `manage.py mcp_server` as a subprocess, driven by the official
SDK's ClientSession. A module of its own: the subprocess needs a Milvus server even in the
embedded run, which this module's `milvus_server` gives its tests (and no worker of the
session's reads it)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from audit.models import ToolInvocation
from kbplatform.processes import MilvusEngineServer, free_port
from retrieval.tools.registry import TOOLS
from tests.conftest import database_url
from tests.mcp_clients import over_stdio
from tests.retrieval.conftest import Imported, MakeKey

ROOT = Path(__file__).resolve().parents[3]
READY_QUESTION = "nginx 502 bad gateway upstream connection refused"
OFF_TOPIC = "What is the capital of Mongolia?"


def audited(tool_call_id: str) -> ToolInvocation:
    return ToolInvocation.objects.get(tool_call_id=tool_call_id)


@pytest.fixture(scope="module")
def milvus_server(milvus_server: MilvusEngineServer | None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusEngineServer]:
    """A Milvus the stdio server's process reaches too (the embedded run opens a file)."""
    if milvus_server is not None:
        yield milvus_server
        return
    folder = tmp_path_factory.mktemp("mcp-milvus")
    before = settings.MILVUS_URI
    server = MilvusEngineServer(f"http://127.0.0.1:{free_port()}", folder / "milvus.db",
                                folder / "server.log")
    server.start()
    settings.MILVUS_URI = server.uri
    yield server
    settings.MILVUS_URI = before
    server.stop()


@pytest.mark.django_db(transaction=True)
def test_the_official_client_session_over_stdio(acme: Imported, make_key: MakeKey) -> None:
    _, secret = make_key("acme")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
           "DATABASE_URL": database_url(), "MILVUS_URI": settings.MILVUS_URI,
           "KB_EMBEDDER": settings.KB_EMBEDDER, "AGENT_KEY": secret}
    names, (ready, empty, node) = over_stdio(env, key_env="AGENT_KEY", calls=[
        ("lookup_knowledge", {"query": READY_QUESTION, "tool_call_id": "mcp-stdio-1"}),
        ("lookup_knowledge", {"query": OFF_TOPIC, "tool_call_id": "mcp-stdio-2"}),
        ("rag_node", {"rag_keywords": ["kafka", "consumer", "lag"],
                      "tool_call_id": "mcp-stdio-3"})])
    assert names == [tool.name for tool in TOOLS]
    assert ready.structured_content["evidence_status"] == "READY"
    assert acme.stem_of(ready.structured_content["evidence"][0]["document_id"]) == "nginx"
    assert empty.structured_content["evidence_status"] == "EMPTY"
    # What a model reads of an EMPTY: where it looked and what is there, each on one line.
    assert empty.content[0].text.splitlines()[1:] == [
        'searched: ["ops"]', "they cover: " + json.dumps(
            empty.structured_content["covered_topics"], ensure_ascii=False)]
    assert node.structured_content["status"] == "ANSWERED"
    assert node.content[0].text == node.structured_content["result"]
    assert [(audited(c).channel, audited(c).tool_name) for c in
            ("mcp-stdio-1", "mcp-stdio-2", "mcp-stdio-3")] == [
        ("mcp", "lookup_knowledge"), ("mcp", "lookup_knowledge"), ("mcp", "rag_node")]

    _, (refused,) = over_stdio({**env, "AGENT_KEY": "kb_x_wrong"}, key_env="AGENT_KEY", calls=[
        ("lookup_knowledge", {"query": READY_QUESTION})])
    assert refused.is_error and refused.structured_content["code"] == "authentication_failed"


def test_the_stdio_server_says_which_variable_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KB_API_KEY"}
    done = subprocess.run([sys.executable, "manage.py", "mcp_server"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "set KB_API_KEY" in done.stderr


@pytest.mark.django_db(transaction=True)
def test_bench_agents_finds_the_same_evidence_over_every_channel(
        acme: Imported, make_key: MakeKey, web: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`manage.py bench_agents` as docs/benchmarks.md runs it, on three questions."""
    import json

    from django.core.management import call_command

    _, secret = make_key("acme")
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(row) for row in [
        {"id": "a", "query": READY_QUESTION, "expect": "web/nginx.md", "kind": "plain",
         "split": "fit"},
        {"id": "b", "query": "kafka consumer lag", "expect": "mq/kafka.md", "kind": "plain",
         "split": "fit"},
        {"id": "c", "query": OFF_TOPIC, "expect": None, "kind": "off-topic", "split": "fit"}]))
    for name, value in (("KB_API_KEY", secret), ("DATABASE_URL", database_url()),
                        ("MILVUS_URI", settings.MILVUS_URI)):  # what the stdio server reads
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    call_command("bench_agents", "--url", web, "--questions", str(questions), "--rounds", "1",
                 "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["calls_per_channel"] == 3 and summary["disagreements"] == []
    assert set(summary["channels"]) == {"rest", "mcp_http", "mcp_stdio"}

