"""Activating, deactivating and deleting documents reaches Milvus, not only the database."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from datasets.models import Chunk, Document
from datasets.services import document_index, document_store
from tests.datasets.builders import (
    api_client,
    found_doc_ids,
    lookup,
    milvus_rows,
    runbook,
    top_doc_id,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def docs(kb, ingest):  # type: ignore[no-untyped-def]
    """Two serving documents on different topics."""
    return (ingest(kb.dataset, "redis.md", runbook("redis")),
            ingest(kb.dataset, "kafka.md", runbook("kafka")))


def _activated_in_milvus(store, document) -> set[bool]:  # type: ignore[no-untyped-def]
    return {row["activated"] for row in milvus_rows(store, document.doc_id, "activated")}


def test_deactivate_hides_a_document_from_lookups_and_activate_brings_it_back(
        kb, store, docs) -> None:
    redis, kafka = docs
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == redis.doc_key

    off = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": False}, format="json")

    assert off.status_code == 200, off.content
    assert off.json()["activated"] is False
    assert _activated_in_milvus(store, redis) == {False}
    assert _activated_in_milvus(store, kafka) == {True}
    assert redis.doc_key not in found_doc_ids(lookup(kb.tool, "redis dashboard restart"))

    on = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": True}, format="json")

    assert on.status_code == 200 and on.json()["activated"] is True
    assert _activated_in_milvus(store, redis) == {True}
    assert top_doc_id(lookup(kb.tool, "redis dashboard restart")) == redis.doc_key


def test_delete_removes_the_chunks_from_milvus_and_the_database(kb, store, docs) -> None:
    redis, kafka = docs
    kafka_rows = milvus_rows(store, kafka.doc_id)

    response = kb.admin.delete(f"/api/documents/{redis.doc_key}")

    assert response.status_code == 204, response.content
    assert store.chunk_ids(redis.doc_id) == []
    assert not Chunk.objects.filter(document=redis).exists()
    assert milvus_rows(store, kafka.doc_id) == kafka_rows
    assert store.count() == len(kafka_rows)
    assert kb.admin.get(f"/api/documents/{redis.doc_key}").status_code == 404
    listed = kb.admin.get(f"/api/datasets/{kb.dataset.pk}/documents").json()["documents"]
    assert [d["source_path"] for d in listed] == ["kafka.md"]
    assert redis.doc_key not in found_doc_ids(lookup(kb.tool, "redis dashboard restart"))


def test_only_the_tenants_admin_key_changes_documents(kb, store, docs, make_key) -> None:
    redis, _ = docs
    _, stranger = make_key(tenant="other", role="admin")
    outsider = api_client(stranger)

    assert kb.tool.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                         format="json").status_code == 403
    assert kb.tool.delete(f"/api/documents/{redis.doc_key}").status_code == 403
    assert outsider.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                          format="json").status_code == 404
    assert outsider.delete(f"/api/documents/{redis.doc_key}").status_code == 404
    assert _activated_in_milvus(store, redis) == {True}
    assert len(store.chunk_ids(redis.doc_id)) == redis.chunk_count == 2


def test_deactivated_before_indexing_stays_hidden_once_indexed(kb, store, settings) -> None:
    # Uploaded, then switched off before the worker got to it.
    outcome = document_store(dataset=kb.dataset, file_name="redis.md", raw=runbook("redis"),
                             max_bytes=settings.KB_MAX_UPLOAD_BYTES)
    document = outcome.document
    response = kb.admin.patch(f"/api/documents/{document.doc_key}", {"activated": False},
                              format="json")
    assert response.status_code == 200

    document_index(document=Document.objects.get(pk=document.pk))

    assert _activated_in_milvus(store, document) == {False}
    assert document.doc_key not in found_doc_ids(lookup(kb.tool, "redis dashboard restart"))


def test_admin_actions_deactivate_and_delete_reach_milvus(kb, store, docs) -> None:
    redis, kafka = docs
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-not-used")
    browser = Client()
    browser.force_login(user)
    changelist = "/admin/datasets/document/"
    actions = browser.get(changelist).context["action_form"].fields["action"].choices
    assert "delete_selected" not in dict(actions)  # it would leave the chunks in Milvus

    browser.post(changelist, {"action": "deactivate", "_selected_action": [redis.pk]})
    assert _activated_in_milvus(store, redis) == {False}

    browser.post(changelist, {"action": "delete_documents", "_selected_action": [kafka.pk]})
    assert store.chunk_ids(kafka.doc_id) == []
    assert Document.objects.get(pk=kafka.pk).deleted
