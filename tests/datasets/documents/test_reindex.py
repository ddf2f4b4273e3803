"""Re-imports: unchanged text costs no embedding, changed documents leave no orphan chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datasets.ingestion.importer import knowledge_import
from datasets.models import Chunk, Document
from retrieval.index.embedders import get_embedder
from retrieval.index.sync import document_sync
from retrieval.models import EmbeddingCache
from tests.datasets.builders import lookup, markdown, milvus_rows

pytestmark = pytest.mark.django_db

V1 = markdown("Disk full", {
    "Symptoms": "Writes fail with ENOSPC and the zeppelin log rotation stops.",
    "Find the space": "Run `du -xh / | sort -h | tail` to see which folder grew.",
    "Old kernels": "Remove old kernels with the package manager.",
    "Docker": "Prune dangling docker images and volumes.",
}, category="storage")
# Keeps the first section word for word, rewrites the second, drops the last two.
V2 = markdown("Disk full", {
    "Symptoms": "Writes fail with ENOSPC and the zeppelin log rotation stops.",
    "Find the space": "Use `ncdu -x /` and look for deleted files still held open: lsof +L1.",
}, category="storage")


def _import(root: Path, kb):  # type: ignore[no-untyped-def]
    """Import, then do what the indexing worker does; the summary and the chunks served."""
    summary = knowledge_import(root=root, tenant_slug=kb.tenant.slug,
                               dataset_name=kb.dataset.name)
    for pk in summary.queued:
        document_sync(document_id=pk)
    return summary


def _write(root: Path, raw: bytes) -> Path:
    root.mkdir(exist_ok=True)
    path = root / "disk.md"
    path.write_bytes(raw)
    return root


def test_unchanged_reimport_does_no_embedding_work(kb, store, tmp_path) -> None:
    root = _write(tmp_path / "kb", V1)
    assert len(_import(root, kb).queued) == 1
    document = Document.objects.get()
    chunks = list(Chunk.objects.filter(document=document).values_list("pk", "content"))
    rows = milvus_rows(store, document.doc_id, "content")
    # Every vector the embedder computes lands in this table: an empty table stays empty
    # only if nothing was embedded.
    EmbeddingCache.objects.all().delete()

    summary = _import(root, kb)

    assert (summary.found, len(summary.queued), summary.unchanged) == (1, 0, 1)
    assert Document.objects.get().chunk_count == 4
    assert not EmbeddingCache.objects.exists()
    assert list(Chunk.objects.filter(document=document).values_list("pk", "content")) == chunks
    assert milvus_rows(store, document.doc_id, "content") == rows


def test_changed_document_replaces_its_old_chunks_completely(kb, store, tmp_path) -> None:
    root = _write(tmp_path / "kb", V1)
    _import(root, kb)
    document = Document.objects.get()
    assert len(store.chunk_ids(document.doc_id)) == 4

    _write(root, V2)
    summary = _import(root, kb)

    assert (len(summary.queued), summary.unchanged) == (1, 0)
    document.refresh_from_db()
    assert Document.objects.get().doc_id == document.doc_id  # same identity, new content
    expected = [f"{document.doc_id}#chunk-0", f"{document.doc_id}#chunk-1"]
    assert store.chunk_ids(document.doc_id) == expected
    assert store.count() == 2  # nothing else left anywhere in the collection
    db_chunks = list(Chunk.objects.filter(document=document).values_list("content", flat=True))
    assert [row["content"] for row in milvus_rows(store, document.doc_id, "content")] \
        == db_chunks
    assert "ncdu" in db_chunks[1] and not any("kernels" in c or "docker" in c for c in db_chunks)
    answer = lookup(kb.tool, "prune dangling docker images")
    assert not any("docker" in item["excerpt"].lower() for item in answer["evidence"])


def test_unchanged_text_reuses_cached_vectors_and_new_text_is_embedded(kb, store,
                                                                       tmp_path) -> None:
    root = _write(tmp_path / "kb", V1)
    _import(root, kb)
    document = Document.objects.get()
    # Overwrite every cached vector with a marker no model produces: a chunk whose vector
    # in Milvus is the marker was served from the cache, not embedded again.
    marker = np.zeros(get_embedder().dimension, dtype="<f4")
    marker[7] = 1.0
    assert EmbeddingCache.objects.update(vector=marker.tobytes()) >= 4

    _write(root, V2)
    _import(root, kb)

    vectors = [np.asarray(row["vector"]) for row in milvus_rows(store, document.doc_id, "vector")]
    assert len(vectors) == 2
    assert np.allclose(vectors[0], marker)  # the unchanged "Symptoms" section
    assert not np.allclose(vectors[1], marker)  # the rewritten section was embedded
    assert np.isclose(np.linalg.norm(vectors[1]), 1.0, atol=1e-3)
