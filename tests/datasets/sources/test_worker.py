"""A source synced by a real Celery worker: the API's Sync now, the worker's job, Milvus."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from datasets.models import Document
from kbplatform.env import SourceRoot
from tests.conftest import wait_until
from tests.datasets.sources.builders import make_source


@pytest.mark.integration  # a Celery worker process
@pytest.mark.django_db(transaction=True)
def test_a_folder_source_is_synced_by_the_worker(celery_worker, store, kb,
                                                 settings) -> None:
    # The worker reads its own settings: its KB_SOURCE_ROOTS is a parent (tests/conftest.py),
    # whose acme/ is the kb fixture's tenant's folder.
    parent = Path(celery_worker.env["KB_SOURCE_ROOTS"])
    settings.KB_SOURCE_ROOTS = (SourceRoot(parent),)
    folder = parent / "acme" / "knowledge"
    shutil.copytree(settings.KB_KNOWLEDGE_DIR / "cache", folder / "cache")
    source = make_source(kb.dataset, kind="folder", location=str(folder),
                         include=["cache/*.md"])

    answer = kb.admin.post(f"/api/sources/{source.pk}/sync")
    assert answer.status_code == 202, answer.content
    job_id = answer.json()["id"]

    def job() -> dict[str, object]:
        body: dict[str, object] = kb.admin.get(f"/api/jobs/{job_id}").json()
        return body

    wait_until(lambda: job()["status"] in ("succeeded", "failed"), what="the sync job")
    assert job()["status"] == "succeeded", job()
    wait_until(lambda: not Document.objects.filter(source=source).exclude(
        status=Document.Status.READY).exists(), what="the indexing")
    documents = Document.objects.filter(source=source)
    assert sorted(d.source_path for d in documents) == [
        "src/cache/redis-hot-key.md", "src/cache/redis-latency.md",
        "src/cache/redis-memory-full.md"]
    assert all(store.rows(d.doc_id) for d in documents)
    assert kb.admin.post(f"/api/sources/{source.pk}/sync").status_code == 202
