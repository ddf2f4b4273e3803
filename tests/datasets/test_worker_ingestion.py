"""Upload through the API, index on a real Celery worker, find it with a real lookup."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from datasets.models import Document
from tests.conftest import wait_until

RUNBOOK = b"""---
title: Zookeeper session expiry
domain: coordination
keywords: [zookeeper, session expired, zxid]
category: coordination
---
# Zookeeper session expiry

## Symptoms

Clients log `SessionExpiredException` and ephemeral nodes vanish after long GC pauses.

## Fix

Raise `tickTime` only after fixing the GC pause; check `zkServer.sh status` on every node.
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_upload_is_indexed_by_the_worker_and_found(celery_worker, store, make_key) -> None:
    admin_key, admin_secret = make_key(role="admin")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {admin_secret}")
    created = client.post("/api/datasets", {"name": "ops"}, format="json")
    assert created.status_code == 201, created.content
    upload = client.post(f"/api/datasets/{created.json()['id']}/documents",
                         {"file": _file("zk.md", RUNBOOK)}, format="multipart")
    assert upload.status_code == 202, upload.content
    job_id = upload.json()["job"]["id"]

    def done() -> bool:
        return client.get(f"/api/jobs/{job_id}").json()["status"] in ("succeeded", "failed")

    wait_until(done, what="the indexing job")
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job
    document = Document.objects.get()
    assert document.status == Document.Status.READY and document.chunk_count >= 2

    _, tool_secret = make_key(role="tool")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tool_secret}")
    answer = client.post("/api/tools/lookup_knowledge",
                         {"query": "zookeeper SessionExpiredException"}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["evidence_status"] == "READY"
    assert body["evidence"][0]["document_id"].startswith(f"{document.doc_id}#chunk-")


def _file(name: str, content: bytes):  # type: ignore[no-untyped-def]
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content, content_type="text/markdown")
