"""Backend failures outside DRF's own: a locked database is a 503 with the error shape (the
MariaDB lock is in tests/retrieval/test_faults.py)."""

from __future__ import annotations

import time

import pytest

from datasets.models import Document
from tests.datasets.builders import runbook
from tests.sqlite_lock import sqlite_locked


@pytest.mark.embedded
@pytest.mark.django_db(transaction=True)
def test_a_locked_sqlite_database_is_503_never_a_500(store, kb, ingest) -> None:
    """The embedded defaults: a 40 s lock held by another process gave a 500 after 30 s."""
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    with sqlite_locked(mode="EXCLUSIVE", seconds=20, timeout=2):
        started = time.monotonic()
        lookup = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                              format="json")
        flip = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                              format="json")
        elapsed = time.monotonic() - started

    assert lookup.status_code == 503, lookup.content
    assert flip.status_code == 503, flip.content
    assert flip.json()["code"] == "unavailable"
    assert elapsed < 15
    assert Document.objects.get(pk=redis.pk).activated


@pytest.mark.django_db
def test_djangos_own_404_has_the_error_shape_too() -> None:
    """DRF raises Django's Http404 for a `?format=` no renderer has: the body says not_found,
    not internal_error."""
    from rest_framework.test import APIClient

    response = APIClient().get("/api/datasets?format=xml")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
