"""Backend failures outside DRF's own: a locked database is a 503 with the error shape (the
MariaDB lock is in tests/retrieval/test_faults.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from datasets.models import Document
from tests.datasets.builders import runbook


@pytest.mark.embedded
@pytest.mark.django_db(transaction=True)
def test_a_locked_sqlite_database_is_503_never_a_500(store, kb, ingest) -> None:
    """The embedded defaults: a 40 s lock held by another process gave a 500 after 30 s."""
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(20)\n"), str(connection.settings_dict["NAME"])], stdout=subprocess.PIPE,
        text=True)
    connection.close()
    connection.settings_dict["OPTIONS"]["timeout"] = 2
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        lookup = kb.tool.post("/api/tools/lookup_knowledge", {"query": "redis dashboard"},
                              format="json")
        flip = kb.admin.patch(f"/api/documents/{redis.doc_key}", {"activated": False},
                              format="json")
        elapsed = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
        connection.close()
        connection.settings_dict["OPTIONS"]["timeout"] = settings.KB_DATABASE_TIMEOUT_SECONDS

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
