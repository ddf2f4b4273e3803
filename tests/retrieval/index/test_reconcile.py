"""`manage.py reconcile_index [--repair]`: drift between the database and Milvus is found,
reported and repaired."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from datasets.models import Chunk
from retrieval.index import milvus
from retrieval.index.milvus.writer import ChunkRow
from tests.datasets.builders import lookup, runbook, top_doc_id

pytestmark = pytest.mark.django_db


def _reconcile(*args: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    try:
        call_command("reconcile_index", "--json", *args, stdout=out)
    except CommandError:
        pass  # drift found: the report was printed first
    return json.loads(out.getvalue())


def test_drift_of_every_kind_is_reported_then_repaired(kb, store, ingest) -> None:
    missing, stale, rows = (ingest(kb.dataset, f"{t}.md", runbook(t))
                            for t in ("redis", "kafka", "nginx"))
    writer = milvus.writer()
    writer.delete_document(missing.doc_id, collection=store.serving)  # lost from Milvus
    old = store.rows(stale.doc_id, "tenant_id", "dataset_id", "category", "content",
                     "search_text", "vector", "metadata")
    writer.replace_documents([], [ChunkRow(  # an older content of the document
        id=r["id"], tenant_id=r["tenant_id"], dataset_id=r["dataset_id"], doc_id=stale.doc_id,
        activated=True, category=r["category"], content="an older text", search_text="older",
        vector=r["vector"], metadata={**r["metadata"], "contentHash": "0" * 64}) for r in old],
        collection=store.serving)
    writer.replace_documents([], [ChunkRow(  # a document the database does not know
        id="7#chunk-0", tenant_id=kb.tenant.pk, dataset_id=kb.dataset.pk, doc_id=7,
        activated=True, category="", content="orphan", search_text="orphan",
        vector=old[0]["vector"], metadata={"docId": "7", "chunkIndex": 0})],
        collection=store.serving)
    Chunk.objects.filter(document=rows).delete()  # the database lost its chunk rows

    report = _reconcile()

    assert report["drift"] == {"orphan": 1, "missing": 1, "stale": 1, "chunk_rows": 1}
    assert report["examples"]["orphan"] == ["7#chunk-0"]
    with pytest.raises(CommandError, match="drift found"):
        call_command("reconcile_index", stdout=io.StringIO())

    repaired = _reconcile("--repair")

    assert repaired["repaired"] is True
    after = _reconcile()
    assert after["drift"] == dict.fromkeys(after["drift"], 0)
    assert store.chunk_ids(7) == []
    assert len(store.chunk_ids(missing.doc_id)) == 2
    assert Chunk.objects.filter(document=rows).count() == 2
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == missing.doc_key
    assert all("older" not in r["content"] for r in store.rows(stale.doc_id, "content"))
    out = io.StringIO()
    call_command("reconcile_index", stdout=out)
    assert out.getvalue().strip().endswith("clean")
