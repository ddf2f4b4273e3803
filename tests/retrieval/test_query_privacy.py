"""No query text anywhere by default (seed 000 §9.1, issue 24 item 7): a query and what the
query transform made of it (the rules' and the chat model's rewrites, the expanded, multiple and
decomposed queries, the agentic plan and its corrections) and its translation (issue 37) are in
no database row, no cache or Redis entry and no log line after lookups, answers, agentic runs
and node runs over REST and MCP; with KB_AUDIT_STORE_RAW_QUERY they are kept, and for a tenant
that opted in (issue 36 item 16) they are kept for its own retention while another tenant's are
nowhere."""

from __future__ import annotations

import base64
import json
import logging
import pickle
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.core.cache import cache
from django.db import connection

from audit.models import ToolInvocation
from audit.privacy import audited_text
from retrieval.analysis import normalize_text
from retrieval.lookup.graph.model_transform import SYSTEM_PROMPT as TRANSFORM_PROMPT
from retrieval.lookup.graph.query_transform import rewrite
from retrieval.lookup.graph.translate import CACHE
from retrieval.models import RagConfig
from tests.mcp_clients import over_http
from tests.retrieval.chat_server import (
    ChatServer,
    asks_to_translate,
    careful_reply,
    chat_server,
)
from tests.retrieval.conftest import Imported, MakeKey, client_for

# Words of asking the rules strip, around a topic the runbooks answer, and a marker found in
# no runbook: wherever the marker is, the query (or a query made of it) is.
MARKER = "payrollzq7"
QUESTION = f"Please how do I fix nginx 502 bad gateway on the {MARKER} cluster?"
TWO_PARTS = (f"How do I fix nginx 502 bad gateway on {MARKER}? Why does kafka consumer lag "
             f"grow on {MARKER}?")
MODEL_REWRITE = f"nginx 502 upstream refused {MARKER} rewritten-by-model"
PATHS = ("/api/tools/lookup_knowledge", "/api/rag/answer", "/api/rag/agentic")


def stored() -> str:
    """Everything the platform keeps: every row of every table, every cache entry."""
    rows = [json.dumps(list(model.objects.values_list()), default=str, ensure_ascii=False)
            for model in apps.get_models()]
    return "\n".join([*rows, cached()])


def cached() -> str:
    if django_settings.REDIS_URL:
        client = cache._cache.get_client()  # type: ignore[attr-defined]
        entries = []
        for key in client.scan_iter("*"):
            kind = client.type(key)
            value = client.get(key) if kind == b"string" else client.dump(key)
            entries.append(f"{key!r} {_unpickled(value)}")
        return "\n".join(entries)
    with connection.cursor() as cursor:
        cursor.execute("SELECT cache_key, value FROM kb_cache")
        return "\n".join(f"{k} {_unpickled(base64.b64decode(v))}" for k, v in cursor.fetchall())


def _unpickled(raw: bytes | None) -> str:
    try:
        return repr(pickle.loads(raw or b""))  # noqa: S301 (our own cache's values)
    except Exception:
        return repr(raw)


def call(secret: str, path: str, query: str, **body: Any) -> dict[str, Any]:
    response = client_for(secret).post(path, {"query": query, **body,
                                              "tool_call_id": f"p-{uuid.uuid4().hex}"},
                                       format="json")
    assert response.status_code == 200, response.content
    payload: dict[str, Any] = response.json()
    return payload


def every_path(secret: str) -> list[dict[str, Any]]:
    """Each REST path once with QUESTION, the agentic graph and the node with TWO_PARTS."""
    bodies = [call(secret, path, QUESTION) for path in PATHS]
    bodies.append(call(secret, "/api/rag/agentic", TWO_PARTS))
    response = client_for(secret).post("/api/rag/node", {"query": TWO_PARTS}, format="json")
    assert response.status_code == 200, response.content
    return [*bodies, response.json()]


def searched(body: dict[str, Any]) -> list[str]:
    """The queries an agentic or node run searched, as its body tells the caller."""
    return [q for hop in body.get("routes", []) for q in (hop.get("query"), hop.get("next"))
            if q]


def assert_nowhere(texts: list[str], logs: str) -> None:
    everything = stored()
    for text in texts:
        assert text not in everything, text
        assert text not in logs, text
    assert MARKER not in everything and MARKER not in logs


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The log lines of the test, at what a deployment logs (KB_LOG_LEVEL's default); and a
    cache without the entries of earlier tests (Redis outlives a test's database)."""
    cache.clear()
    caplog.set_level(logging.INFO)
    yield caplog


@pytest.mark.parametrize("strategy", ["REWRITE", "EXPAND", "MULTI_QUERY", "DECOMPOSE"])
def test_the_rules_transform_leaves_no_query_text(acme: Imported, make_key: MakeKey,
                                                  logs: pytest.LogCaptureFixture,
                                                  strategy: str) -> None:
    RagConfig.objects.create(tenant=acme.tenant, enable_query_transform=True,
                             query_transform_strategy=strategy)
    _, secret = make_key("acme")
    bodies = every_path(secret)
    assert all(b.get("evidence_status", "READY") == "READY" for b in bodies[:3])
    assert_nowhere([QUESTION, TWO_PARTS, rewrite(QUESTION),
                    *(q for b in bodies for q in searched(b))], logs.text)
    # What the audit does keep of the question, and of its rewrite: lengths and keyed hashes.
    rows = ToolInvocation.objects.all()
    assert len(rows) == len(bodies) and all(r.query_hash and r.query_length for r in rows)
    notes = [s["note"] for s in rows.get(tool_call_id=bodies[0]["tool_call_id"])
             .details["retrievalDetails"]["stages"]]
    if strategy == "REWRITE":
        assert any(n.startswith(f"REWRITE: rewritten to {len(rewrite(QUESTION))} characters #")
                   for n in notes), notes


@pytest.fixture
def server(settings: Any) -> Iterator[ChatServer]:
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_CHAT_MODEL = running.url, "local-chat"
        yield running


def rewrites(body: dict[str, Any]) -> str:
    if body["messages"][0]["content"] == TRANSFORM_PROMPT:
        return json.dumps({"queries": [MODEL_REWRITE]})
    return careful_reply(body)


def test_the_models_transform_leaves_no_query_text(acme: Imported, make_key: MakeKey,
                                                   logs: pytest.LogCaptureFixture,
                                                   server: ChatServer) -> None:
    server.reply = rewrites
    RagConfig.objects.create(tenant=acme.tenant, enable_query_transform=True,
                             query_transform_strategy="REWRITE")
    _, secret = make_key("acme")
    bodies = every_path(secret)
    prompts = [r["messages"][0]["content"] for r in server.requests]
    assert TRANSFORM_PROMPT in prompts  # the model rewrote the queries
    assert_nowhere([QUESTION, TWO_PARTS, MODEL_REWRITE,
                    *(q for b in bodies for q in searched(b))], logs.text)


# Issue 37: a Chinese question about the English runbooks, translated by the local model.
ZH_QUESTION = f"{MARKER} 集群上消费组的积压一直在涨，消息处理不过来"
MODEL_TRANSLATION = f"the consumer group backlog keeps growing on the {MARKER} cluster"


@pytest.fixture
def translator(settings: Any) -> Iterator[ChatServer]:
    CACHE.clear()  # this process's memory: emptied so that the model is asked
    with chat_server() as running:
        settings.KB_CHAT_BASE_URL, settings.KB_LOCAL_MODEL_URL = "", running.url
        running.reply = lambda body: (MODEL_TRANSLATION if asks_to_translate(body)
                                      else careful_reply(body))
        yield running
    CACHE.clear()


def translate_notes(body: dict[str, Any]) -> list[str]:
    row = ToolInvocation.objects.get(tool_call_id=body["tool_call_id"])
    return [s["note"] for s in row.details["retrievalDetails"]["stages"]
            if s["stage"] == "translate"]


def test_a_translated_question_leaves_no_text(acme: Imported, make_key: MakeKey,
                                              logs: pytest.LogCaptureFixture,
                                              translator: ChatServer) -> None:
    _, secret = make_key("acme")
    bodies = [call(secret, path, ZH_QUESTION) for path in PATHS]
    assert sum(map(asks_to_translate, translator.requests)) >= 1
    assert_nowhere([ZH_QUESTION, MODEL_TRANSLATION], logs.text)
    [note] = translate_notes(bodies[0])  # its length and a keyed hash
    assert re.fullmatch(r"zh→en by openai/local in \d+ ms: "
                        f"{len(MODEL_TRANSLATION)} characters #[0-9a-f]{{8}}; searched together",
                        note), note


def test_with_raw_queries_on_the_translation_is_kept(
        acme: Imported, make_key: MakeKey, settings: Any, translator: ChatServer) -> None:
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    _, secret = make_key("acme")
    body = call(secret, "/api/tools/lookup_knowledge", ZH_QUESTION)
    [note] = translate_notes(body)
    assert audited_text(MODEL_TRANSLATION) in note


@pytest.mark.django_db(transaction=True)
def test_mcp_calls_leave_no_query_text(acme: Imported, make_key: MakeKey, web: str,
                                       logs: pytest.LogCaptureFixture) -> None:
    RagConfig.objects.create(tenant=acme.tenant, enable_query_transform=True,
                             query_transform_strategy="REWRITE")
    _, secret = make_key("acme")
    _, results = over_http(f"{web}/mcp", secret, [
        ("lookup_knowledge", {"query": QUESTION}), ("rag_answer", {"query": QUESTION}),
        ("rag_agentic", {"query": TWO_PARTS}), ("rag_node", {"query": TWO_PARTS})])
    assert not any(r.is_error for r in results)
    assert_nowhere([QUESTION, TWO_PARTS,
                    *(q for r in results for q in searched(r.structured_content))], logs.text)
    assert ToolInvocation.objects.filter(channel="mcp").count() == 4


def test_with_raw_queries_on_the_question_and_its_rewrite_are_kept(
        acme: Imported, make_key: MakeKey, settings: Any) -> None:
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    RagConfig.objects.create(tenant=acme.tenant, enable_query_transform=True,
                             query_transform_strategy="REWRITE")
    _, secret = make_key("acme")
    bodies = every_path(secret)
    rows = {r.tool_call_id: r for r in ToolInvocation.objects.all()}
    for body in bodies:
        row = rows[body["tool_call_id"]]
        assert row.query_text == body["query"]  # the question asked, not a sub-question
    lookup = rows[bodies[0]["tool_call_id"]]
    notes = [s["note"] for s in lookup.details["retrievalDetails"]["stages"]]
    assert f"REWRITE: rewritten to {audited_text(rewrite(QUESTION))} (1 queries)" in notes


def broker_messages() -> str:
    """Every key and value of the Celery broker's Redis database, when it is Redis."""
    url = django_settings.CELERY_BROKER_URL
    if not url.startswith("redis"):
        return ""
    import redis

    client = redis.Redis.from_url(url)
    entries = []
    for key in client.scan_iter("*"):
        kind = client.type(key)
        value = (client.get(key) if kind == b"string" else
                 client.lrange(key, 0, -1) if kind == b"list" else client.dump(key))
        entries.append(f"{key!r} {value!r}")
    return "\n".join(entries)


def database_files() -> bytes:
    """The SQLite database file and its journals, byte for byte (b"" on MariaDB).

    Read by another process: closing a descriptor of the file here would drop every POSIX
    lock this process holds on it, SQLite's included. Another process's connection could then
    checkpoint and delete the WAL and its index under this process's connections, whose next
    reads fail with "disk I/O error".
    """
    if connection.vendor != "sqlite":
        return b""
    name = Path(connection.settings_dict["NAME"])
    files = [str(name), f"{name}-wal", f"{name}-journal"]  # cat skips a journal not there
    return subprocess.run(["cat", *files], capture_output=True, timeout=60).stdout


@pytest.mark.django_db(transaction=True)
def test_the_knowledge_gaps_keep_no_query_text(acme: Imported, make_key: MakeKey,
                                               logs: pytest.LogCaptureFixture,
                                               admin_client: Any) -> None:
    """Issue 28 item 4: what the gaps page groups by is words of the tenant's documents; a
    marker in the questions is in no row (the SQLite file read byte for byte), no cache or
    broker entry, no log line, and not on the page or in its CSV."""
    from django.urls import reverse

    from audit.models import InvocationDataset

    _, secret = make_key("acme")
    off_topic = f"{MARKER} quarterly payroll taxes for {MARKER}"
    bodies = [call(secret, "/api/tools/lookup_knowledge", q)
              for q in (QUESTION, QUESTION, off_topic, f"kafka {MARKER} lag")]
    assert bodies[2]["evidence_status"] == "EMPTY"

    terms = {tuple(t) for t in InvocationDataset.objects.values_list("terms", flat=True)}
    corpus = normalize_text(" ".join(Path(acme.documents[s].source_path).stem + " "
                                     + acme.documents[s].source_text for s in acme.documents))
    # The L0 domain first, then the question's words its candidates hold, at most five.
    assert ("web", "fix", "nginx", "502", "bad") in terms, terms
    assert ("messaging", "kafka", "lag") in terms, terms
    assert () in terms  # the off-topic question: no word of the knowledge base
    assert all(w in corpus for t in terms for w in t), terms  # never another word
    page = admin_client.get(reverse("admin:audit_knowledge_gaps", args=[acme.dataset.pk]))
    exported = admin_client.get(reverse("admin:audit_knowledge_gaps_csv",
                                        args=[acme.dataset.pk]))
    assert page.status_code == exported.status_code == 200
    assert "(no term of the knowledge base)" in page.content.decode()

    everything = "\n".join([stored(), broker_messages(), logs.text, page.content.decode(),
                            exported.content.decode()])
    for text in (MARKER, QUESTION, off_topic):
        assert text not in everything, text
    files = database_files()
    assert MARKER.encode() not in files
    assert connection.vendor != "sqlite" or b"php-fpm" in files  # the live file was read


# Issue 36 item 16: a tenant's own opt-in to raw queries, with its own retention.
OTHER_MARKER = "ledgerqx4"


def test_a_tenant_that_opted_in_keeps_its_questions_for_its_own_days_and_no_other_does(
        acme: Imported, globex: Imported, make_key: MakeKey, admin_client: Any,
        logs: pytest.LogCaptureFixture) -> None:
    from datetime import timedelta

    from django.db.models import F
    from django.urls import reverse

    from kbplatform.celery import app

    assert not django_settings.KB_AUDIT_STORE_RAW_QUERY  # the deployment keeps no one's
    acme.tenant.store_raw_queries, acme.tenant.raw_query_retention_days = True, 2
    acme.tenant.save()
    for tenant in (acme.tenant, globex.tenant):
        RagConfig.objects.create(tenant=tenant, enable_query_transform=True,
                                 query_transform_strategy="REWRITE")
    _, kept_secret = make_key("acme")
    _, other_secret = make_key("globex")
    off_topic = f"{MARKER} quarterly payroll taxes for {MARKER}"
    bodies = [*every_path(kept_secret),
              call(kept_secret, "/api/tools/lookup_knowledge", off_topic)]
    other = [call(other_secret, path, QUESTION.replace(MARKER, OTHER_MARKER))
             for path in (*PATHS, "/api/tools/lookup_knowledge")]
    call(other_secret, "/api/tools/lookup_knowledge", off_topic.replace(MARKER, OTHER_MARKER))
    assert bodies[-1]["evidence_status"] == "EMPTY" and len(other) == 4

    def gaps(imported: Imported) -> str:
        args = [imported.dataset.pk]
        return (admin_client.get(reverse("admin:audit_knowledge_gaps", args=args)).content
                .decode() + admin_client.get(reverse("admin:audit_knowledge_gaps_csv",
                                                     args=args)).content.decode())

    # The tenant that did not opt in: its questions nowhere, not even on its gaps page.
    everything = "\n".join([stored(), logs.text, gaps(globex)])
    assert OTHER_MARKER not in everything
    assert "Example queries" not in gaps(globex)
    # The one that did: each call's question, its rewrite, its plan; and the gaps' examples.
    rows = {r.tool_call_id: r for r in ToolInvocation.objects.filter(tenant=acme.tenant)}
    assert all(rows[b["tool_call_id"]].query_text == b["query"] for b in bodies)
    assert all(r.query_kept for r in rows.values())
    assert audited_text(rewrite(QUESTION)) in stored()
    assert "Example queries" in gaps(acme) and off_topic in gaps(acme)
    assert MARKER not in logs.text  # kept by the audit, never logged

    # Its own retention (2 days, not the deployment's 30): the periodic pass erases them all,
    # from the rows and the traces alike; a question of today stays.
    ToolInvocation.objects.filter(tenant=acme.tenant).update(
        created_at=F("created_at") - timedelta(days=3))
    fresh = call(kept_secret, "/api/tools/lookup_knowledge", "nginx 502 freshqz9 gateway")
    app.loader.import_default_modules()
    app.tasks["audit.tasks.raw_queries_erase_task"].apply()
    after = stored()
    for text in (MARKER, QUESTION, TWO_PARTS, rewrite(QUESTION)):
        assert text not in after, text
    assert ToolInvocation.objects.get(tool_call_id=fresh["tool_call_id"]).query_text == \
        "nginx 502 freshqz9 gateway"
    assert "Example queries" in gaps(acme) and off_topic not in gaps(acme)

    # Switched off, the tenant's text is erased by the next pass, whatever its age.
    acme.tenant.store_raw_queries = False
    acme.tenant.save()
    assert "Example queries" not in gaps(acme)
    app.tasks["audit.tasks.raw_queries_erase_task"].apply()
    assert "freshqz9" not in stored()
