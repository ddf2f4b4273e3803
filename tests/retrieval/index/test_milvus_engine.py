"""The platform on Milvus 2.5's own C++ engine (the `milvus` program of the milvus-lite 2.5.1
wheel, scripts/milvus-engine.sh): it keeps a production Milvus server's limits, which Milvus
Lite 3.x does not check. A collection declaring a VarChar over 65,535 bytes was refused there
(issue 36: every document failed "the vector store refused this document") while every test
on Milvus Lite 3.x passed."""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from kbplatform.processes import MilvusEngineServer, free_port
from retrieval.index import milvus
from retrieval.index.milvus import reset_connection
from retrieval.index.milvus.collections import VARCHAR_MAX_BYTES
from tests.conftest import document_ingest, engine_home
from tests.datasets.builders import runbook

# integration: a Milvus server process of its own (scripts/test.sh unpacks the engine).
pytestmark = [pytest.mark.integration, pytest.mark.django_db]

@pytest.fixture
def engine(tmp_path: Path, settings: Any) -> Iterator[MilvusEngineServer]:
    server = MilvusEngineServer(engine_home(), f"http://127.0.0.1:{free_port()}",
                                tmp_path / "data", tmp_path / "engine.log")
    server.start()
    settings.MILVUS_URI = server.uri
    reset_connection()
    yield server
    reset_connection()
    server.stop(signal.SIGKILL)


def _first_title(kb: Any, query: str) -> str:
    response = kb.tool.post("/api/tools/lookup_knowledge", {"query": query}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["evidence_status"] == "READY", body
    return str(body["evidence"][0]["title"])


def test_the_collection_is_created_and_serves_lookups_on_milvus_25s_engine(engine, kb) -> None:
    documents = [document_ingest(kb.dataset, f"{topic}.md", runbook(topic, sections=3))
                 for topic in ("redis", "kafka", "nginx")]
    assert {d.status for d in documents} == {"ready"}, [d.error for d in documents]
    assert _first_title(kb, "kafka dashboard restart") == "kafka runbook"

    # Every VarChar of the schema as the engine holds it, within a server's limit.
    collections = milvus.collections()
    described = collections.connection.client().describe_collection(collections.names()[0])
    lengths = {f["name"]: f["params"]["max_length"] for f in described["fields"]
               if "max_length" in f.get("params", {})}
    assert lengths and max(lengths.values()) <= VARCHAR_MAX_BYTES, lengths

    # The engine has no aliases: a rebuild switches what serves all the same (lookups read the
    # index version), and the old collection stays for a rollback.
    call_command("rebuild_hybrid_knowledge", "--confirm", "REBUILD", stdout=io.StringIO())
    assert len(milvus.collections().names()) == 2
    assert _first_title(kb, "nginx dashboard restart") == "nginx runbook"
