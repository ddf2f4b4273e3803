"""The supervised Milvus server (Milvus 2.5's engine, as the demo runs it): an acknowledged
chunk survives a restart."""

from __future__ import annotations

import io
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from datasets.models import Document
from kbplatform.processes import MilvusEngineServer, MilvusServer, free_port
from retrieval.index import milvus
from retrieval.index.milvus import VectorStoreUnavailable
from retrieval.index.milvus.collections import MilvusCollections
from retrieval.index.milvus.connection import MilvusConnection, reset_connection
from retrieval.index.milvus.imports import MilvusClient
from retrieval.index.milvus.writer import ChunkRow, MilvusWriter
from tests.conftest import wait_until
from tests.datasets.builders import found_doc_ids, lookup, runbook, top_doc_id
from tests.milvus import Lite3Server, MilvusProbe

# integration: each test stops and restarts a Milvus server process of its own.
pytestmark = [pytest.mark.integration, pytest.mark.django_db]

DIM = 8


def _private(server: MilvusServer) -> Iterator[MilvusServer]:
    """A server of our own: killing the session's server would break other tests."""
    server.start()
    yield server
    server.stop(signal.SIGKILL)
    reset_connection()


@pytest.fixture
def private_milvus(tmp_path: Path) -> Iterator[MilvusServer]:
    yield from _private(MilvusEngineServer(f"http://127.0.0.1:{free_port()}",
                                           tmp_path / "milvus.db", tmp_path / "server.log"))


@pytest.fixture
def private_lite3(tmp_path: Path) -> Iterator[MilvusServer]:
    """Milvus Lite 3.x, which keeps index files of its own (Milvus 2.5's engine keeps one
    data file)."""
    yield from _private(Lite3Server(f"http://127.0.0.1:{free_port()}", tmp_path / "data",
                                    tmp_path / "server.log"))


def _restart(server: MilvusServer, sig: int) -> None:
    server.stop(sig)
    _start(server)


def _start(server: MilvusServer) -> None:
    server.start()
    uri = f"http://{server.host}:{server.port}"

    def answers() -> bool:
        # A bare client: the store would also load collections, which is under test here.
        # Right after a restart pymilvus's shared channel sits in gRPC reconnect backoff
        # for a second or two and reports "Fail connecting".
        try:
            client = MilvusClient(uri=uri, timeout=2)
            client.list_collections()
            return True
        except Exception:
            return False

    wait_until(answers, timeout=30, what="the restarted Milvus server")


def _rows(batch: int, size: int = 25) -> list[ChunkRow]:
    return [ChunkRow(id=f"{batch}#chunk-{i}", tenant_id=1, dataset_id=1, doc_id=batch,
                     activated=True, category="", content=f"batch {batch} row {i}",
                     search_text=f"batch {batch} row {i}", vector=[float(i % 7 + 1)] * DIM,
                     metadata={"batch": batch}) for i in range(size)]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_acknowledged_chunk_is_lost_when_the_server_stops_mid_write(private_milvus,
                                                                       stop) -> None:
    """Every write ends with a flush: what was acknowledged is on disk, however the server
    stops (Milvus Lite 3.x, the demo's before, tore index files on anything but SIGINT: see
    test_a_torn_index_file_makes_lookups_unavailable_until_a_rebuild)."""
    uri = f"http://{private_milvus.host}:{private_milvus.port}"
    connection = MilvusConnection(uri=uri, timeout=5)
    MilvusCollections(connection, alias="durable").create("durable_v1", DIM)
    chunks = MilvusWriter(connection)
    acked: list[str] = []
    failed: list[Exception] = []

    def writer() -> None:
        for batch in range(1, 10_000):
            rows = _rows(batch)
            try:
                chunks.replace_documents([], rows, collection="durable_v1")
            except VectorStoreUnavailable as exc:
                failed.append(exc)
                return
            acked.extend(row.id for row in rows)  # upsert returned: acknowledged

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acked) >= 100 or not thread.is_alive(), timeout=60,
               what="acknowledged writes")
    private_milvus.stop(stop)  # while the writer is still writing
    thread.join(timeout=60)
    assert failed, "the writer should have seen the server go away"
    connection.close()
    _start(private_milvus)

    after = MilvusConnection(uri=uri, timeout=5)
    MilvusCollections(after, alias="durable").load("durable_v1")  # searchable, not only stored
    stored = {row["id"] for row in after.client().query(
        "durable_v1", filter='id != ""', output_fields=["id"], limit=16_384)}
    lost = [key for key in acked if key not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged chunks lost, e.g. {lost[:3]}"
    # Besides the acknowledged rows, at most the batch in flight at the stop may have landed.
    assert len(stored - set(acked)) <= len(_rows(0))
    after.close()


def test_documents_survive_a_restart_and_lookups_and_uploads_work_after_it(
        private_milvus, kb, ingest_on, settings_uri) -> None:
    settings_uri(private_milvus)
    documents = [ingest_on(kb.dataset, f"{topic}.md", runbook(topic))
                 for topic in ("redis", "kafka", "nginx")]
    store = MilvusProbe()
    chunk_ids = {d.doc_id: store.chunk_ids(d.doc_id) for d in documents}

    _restart(private_milvus, signal.SIGTERM)  # its supervisor's stop

    # The same process and client, as a web worker would keep them across the restart:
    # collections come back unloaded, and the store must load them again by itself.
    answer = lookup(kb.tool, "kafka dashboard restart")
    assert answer["evidence_status"] == "READY", answer
    assert top_doc_id(answer) == documents[1].doc_key
    assert {d.doc_id: store.chunk_ids(d.doc_id) for d in documents} == chunk_ids
    assert store.count() == sum(d.chunk_count for d in documents) == 6

    added = ingest_on(kb.dataset, "mysql.md", runbook("mysql"))
    assert Document.objects.get(pk=added.pk).status == Document.Status.READY
    wait_until(lambda: added.doc_key in found_doc_ids(lookup(kb.tool, "mysql dashboard restart")),
               timeout=10, what="the document written after the restart")


@pytest.mark.lite3
def test_a_torn_index_file_makes_lookups_unavailable_until_a_rebuild(
        private_lite3, kb, ingest_on, settings_uri) -> None:
    # Milvus Lite 3.2.2 writes index files in place and, when one exists, never rebuilds it:
    # a process killed (SIGTERM has no handler, so SIGTERM too) while its background worker
    # writes one leaves a 0-byte or partial file, and the collection can no longer be loaded.
    # Seen twice in this suite after SIGTERM; made deterministic here by truncating a file
    # while the server is down.
    settings_uri(private_lite3)
    redis = ingest_on(kb.dataset, "redis.md", runbook("redis"))
    ingest_on(kb.dataset, "kafka.md", runbook("kafka"))
    torn = MilvusProbe().serving
    private_lite3.stop(signal.SIGINT)
    index_file = next(private_lite3.data.rglob("*.dataset_id.inverted.sidx"))
    index_file.write_bytes(b"")
    _start(private_lite3)
    reset_connection()  # the web and worker processes were restarted too

    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard restart"},
                          format="json")
    assert answer.status_code == 503, answer.content  # a failure, never "no results"
    assert answer.json()["evidence_status"] == "UNAVAILABLE"

    reset_connection()
    out = io.StringIO()
    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=out)

    assert MilvusProbe().serving != torn
    call_command("drop_index_version", str(_version(torn)),
                 "--confirm", "DROP", stdout=out)
    assert torn not in milvus.collections().names()
    answer = lookup(kb.tool, "redis dashboard restart")
    assert answer["evidence_status"] == "READY"
    assert top_doc_id(answer) == redis.doc_key


@pytest.fixture
def settings_uri(settings):  # type: ignore[no-untyped-def]
    """Point the app (get_store) at a server of this test."""

    def point(server: MilvusServer) -> None:
        settings.MILVUS_URI = f"http://{server.host}:{server.port}"
        reset_connection()

    yield point
    reset_connection()


@pytest.fixture
def ingest_on():  # type: ignore[no-untyped-def]
    from datasets.documents.services import document_store
    from retrieval.index.sync import document_sync

    def run(dataset, name, raw):  # type: ignore[no-untyped-def]
        outcome = document_store(dataset=dataset, file_name=name, raw=raw,
                                 max_bytes=settings.KB_MAX_UPLOAD_BYTES)
        document_sync(document_id=outcome.document.pk)
        outcome.document.refresh_from_db()
        return outcome.document

    return run


def _version(collection: str) -> int:
    from retrieval.models import IndexVersion

    return IndexVersion.objects.get(collection_name=collection).pk
