"""Fixtures of the lookup_knowledge end-to-end tests: small runbooks imported for real.

The runbooks are written so that the offline embedders separate them clearly: each test
query is close to one document and far from the others, and the L0 terms (domain, title,
keywords) of each document are chosen so that a test query hits exactly the domain it means.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from rest_framework.test import APIClient

from datasets.ingestion.importer import knowledge_import
from datasets.models import ApiKey, Dataset, Document, Tenant
from retrieval.index.sync import document_sync
from tests.worlds import corpus, shared

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse as TestResponse

MakeKey = Callable[..., tuple[ApiKey, str]]

ZEBRA = """---
title: Zebra stripe patterns
domain: zoology
keywords: [zebra, stripes]
category: zoology
---
# Zebra stripe patterns

## Why zebras have stripes

The black and white stripes of a zebra confuse biting flies and help the herd regulate
body heat on the savanna.
"""

# Close to a question about zebra stripes, but in another domain and category, and without
# any zoology term in its own title, domain or keywords.
PHOTO = """---
title: Photographing wildlife at dawn
domain: photography
keywords: [telephoto]
category: photo
---
# Photographing wildlife at dawn

## Black and white coats

The black and white stripes of zebras are hard to expose: meter on the white stripes and
underexpose by one stop at dawn.
"""

NGINX = """---
title: Nginx 502 Bad Gateway
domain: web
keywords: [openresty, php-fpm]
category: web
team: Web-Platform
---
# Nginx 502 Bad Gateway

## Symptoms

Nginx answers 502 Bad Gateway when the upstream server refuses the connection or closes it
early; the error log shows connect() failed (111: Connection refused) while connecting to
upstream.

## Fix

Restart php-fpm or the upstream application, and check that proxy_pass points at the port
the application really listens on.
"""

# Five sections, each one a chunk, all about the same thing: a question about it matches
# every chunk, so only the per-document limit keeps the answer from being this one document.
KAFKA = """---
title: Kafka consumer lag
domain: messaging
keywords: [kafka, consumer lag]
category: messaging
team: [data, sre]
---
# Kafka consumer lag

## Symptoms of Kafka consumer lag

The Kafka consumer group lag keeps growing: consumers read messages slower than producers
write them, and the lag of every partition rises.

## Measuring Kafka consumer lag

Run kafka-consumer-groups --describe --group orders to see the consumer lag of each
partition of the Kafka consumer group.

## Causes of Kafka consumer lag

Kafka consumer lag grows when a consumer is slow, when the consumer group rebalances often,
or when there are fewer consumers than partitions.

## Fixing Kafka consumer lag

Add consumers to the Kafka consumer group up to the number of partitions, and make each
consumer process messages faster to bring the consumer lag down.

## Alerting on Kafka consumer lag

Alert when the Kafka consumer lag of a consumer group grows for ten minutes in a row.
"""

RUNBOOKS_A = {"zebra.md": ZEBRA, "photo.md": PHOTO, "nginx.md": NGINX, "kafka.md": KAFKA}

# Tenant B: the same 502 topic in its own words (so tenant A's 502 question would match it),
# and a topic tenant A has nothing about.
NGINX_B = """---
title: Globex edge proxy 502
domain: web
keywords: [openresty]
category: web
team: web-platform
---
# Globex edge proxy 502

## Bad gateway on the Globex edge

The Globex edge Nginx answers 502 Bad Gateway when its upstream refuses the connection;
connect() failed (111: Connection refused) while connecting to upstream.
"""

COOLANT = """---
title: Coolant pump vibration
domain: plant
keywords: [coolant pump]
category: plant
---
# Coolant pump vibration

## Diagnosing a vibrating coolant pump

A coolant pump that vibrates usually has a worn bearing or cavitation at the impeller;
check the suction pressure and the bearing temperature of the pump.
"""

RUNBOOKS_B = {"nginx-globex.md": NGINX_B, "coolant.md": COOLANT}

CONTRACT_KEYS = {"evidence_status", "tool_call_id", "query", "evidence", "relevance_level",
                 "truncated", "returned_count", "searched_datasets", "covered_topics"}
EVIDENCE_KEYS = {"document_id", "source", "title", "breadcrumb", "location", "commit",
                 "excerpt", "also_in", "url", "lines", "updated_at", "reviewed_at",
                 "valid_until", "owner", "stale"}


@dataclass(frozen=True)
class Imported:
    """One tenant's dataset as a test imported it: its documents by file stem."""

    tenant: Tenant
    dataset: Dataset
    documents: dict[str, Document]

    def stem_of(self, evidence_id: str) -> str | None:
        doc_id = evidence_id.split("#", 1)[0]
        return next((stem for stem, d in self.documents.items() if d.doc_key == doc_id), None)


def write_runbooks(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def import_runbooks(folder: Path, *, tenant: str, dataset: str,
                    files: dict[str, str] | None = None) -> Imported:
    if files is not None:
        write_runbooks(folder, files)
    summary = knowledge_import(root=folder, tenant_slug=tenant, dataset_name=dataset)
    assert not summary.failed, summary.failed
    for pk in summary.queued:  # what the indexing worker does, in this process
        document_sync(document_id=pk)
    return imported(tenant=tenant, dataset=dataset)


def imported(*, tenant: str, dataset: str) -> Imported:
    data = Dataset.objects.select_related("tenant").get(tenant__slug=tenant, name=dataset)
    documents = {Path(d.source_path).stem: d
                 for d in Document.objects.filter(dataset=data, deleted=False)}
    assert all(d.status == Document.Status.READY for d in documents.values())
    return Imported(tenant=data.tenant, dataset=data, documents=documents)


# The corpora below are made once for the tests that share them (tests/worlds.py); a test that
# makes its own (transactional, or marked own_world) imports them as they were always imported.
def _corpus(name: str, folder: str, tenant: str, dataset: str, files: dict[str, str],
            needs: tuple[str, ...] = ()) -> Callable[[Path], Imported]:
    def make(under: Path) -> Imported:
        return import_runbooks(under / folder, tenant=tenant, dataset=dataset, files=files)

    corpus(name, module=__name__, make=make,
           load=lambda made: imported(tenant=tenant, dataset=dataset), needs=needs)
    return make


_make_acme = _corpus("acme", "acme-ops", "acme", "ops", RUNBOOKS_A)
_make_globex = _corpus("globex", "globex-ops", "globex", "ops", RUNBOOKS_B)
_make_acme_edge = _corpus("acme_edge", "acme-edge", "acme", "edge", {"edge-502.md": NGINX_B},
                          needs=("acme",))


@pytest.fixture
def acme(store: Any, db: None, tmp_path: Path, request: pytest.FixtureRequest) -> Imported:
    """Tenant acme, dataset ops: zebra, photo, nginx, kafka."""
    return shared(request) or _make_acme(tmp_path)


@pytest.fixture
def globex(store: Any, db: None, tmp_path: Path, request: pytest.FixtureRequest) -> Imported:
    """Tenant globex, dataset ops: its own 502 runbook and a coolant pump runbook."""
    return shared(request) or _make_globex(tmp_path)


@pytest.fixture
def acme_edge(acme: Imported, tmp_path: Path, request: pytest.FixtureRequest) -> Imported:
    """A second dataset of tenant acme that also has a 502 runbook."""
    return shared(request) or _make_acme_edge(tmp_path)


def client_for(secret: str | None) -> APIClient:
    client = APIClient()
    if secret:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def lookup(client: APIClient, query: str, **body: Any) -> TestResponse:
    return client.post("/api/tools/lookup_knowledge", {"query": query, **body}, format="json")


def ready(response: TestResponse) -> dict[str, Any]:
    """The body of a READY answer (asserting it is one)."""
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    assert body["evidence_status"] == "READY", body
    return body


def evidence_ids(body: dict[str, Any]) -> list[str]:
    return [item["document_id"] for item in body["evidence"]]


def last_trace(admin: APIClient, session_id: str) -> dict[str, Any]:
    """retrievalDetails of a session's latest call, as an operator reads it."""
    response = admin.get(f"/api/diagnosis/{session_id}/trace")
    assert response.status_code == 200, response.content
    details: dict[str, Any] = response.json()["toolInvocations"][-1]["retrievalDetails"]
    return details


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def web(transactional_db: None) -> Iterator[str]:
    """A real HTTP server of the WSGI app (Django, and /mcp), on a free port."""
    from kbplatform.wsgi import application

    httpd = make_server("127.0.0.1", 0, application, server_class=_Server, handler_class=_Quiet)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at the end of every test.
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()
