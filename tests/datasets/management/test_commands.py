"""The management commands people type: create_api_key and the rebuild CLI twins."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from datasets.documents.services import dataset_create, tenant_get_or_create
from datasets.models import ApiKey
from retrieval.index.embedders import get_embedder
from retrieval.index.milvus import reset_connection
from retrieval.models import IndexVersion
from tests.conftest import ROOT, database_url
from tests.datasets.builders import api_client, runbook

pytestmark = pytest.mark.django_db


def _create_key(*args: str) -> tuple[list[str], str]:
    out = io.StringIO()
    call_command("create_api_key", *args, stdout=out)
    lines = out.getvalue().splitlines()
    return lines, lines[-1].split()[-1]


def test_create_api_key_prints_a_working_key_at_the_end_of_the_last_line() -> None:
    lines, secret = _create_key("--tenant", "acme", "--role", "admin", "--name", "ci")

    assert "admin key" in lines[0] and "acme" in lines[0]
    assert "not shown again" in lines[-1]
    client = api_client(secret)
    assert client.get("/api/datasets").status_code == 200
    created = client.post("/api/datasets", {"name": "ops"}, format="json")
    assert created.status_code == 201, created.content  # an admin key may create datasets
    key = ApiKey.objects.get()
    assert key.name == "ci" and key.tenant.slug == "acme"
    assert secret not in (key.key_hash, key.prefix)  # only a hash is stored


def test_a_tool_key_reads_but_cannot_administer() -> None:
    _, secret = _create_key("--tenant", "acme")

    client = api_client(secret)
    assert client.get("/api/datasets").status_code == 200
    assert client.post("/api/datasets", {"name": "ops"}, format="json").status_code == 403
    assert client.post("/api/knowledge/rebuild-hybrid?confirm=REBUILD").status_code == 403


def test_a_dataset_scoped_key_may_only_read_its_datasets() -> None:
    tenant = tenant_get_or_create(slug="acme")
    ops = dataset_create(tenant=tenant, name="ops")
    hr = dataset_create(tenant=tenant, name="hr")
    lines, secret = _create_key("--tenant", "acme", "--dataset", "ops")

    assert "(ops)" in lines[0]
    response = api_client(secret).post("/api/tools/lookup_knowledge",
                                       {"query": "salaries", "dataset_ids": [hr.pk]},
                                       format="json")
    # Out of its scope is exactly like a dataset that does not exist.
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "unknown_dataset"
    assert list(ApiKey.objects.get().datasets.all()) == [ops]


def test_create_api_key_for_an_unknown_dataset_creates_no_key() -> None:
    with pytest.raises(CommandError, match="has no dataset 'nope'"):
        _create_key("--tenant", "acme", "--dataset", "nope")
    assert not ApiKey.objects.exists()


def test_a_revoked_key_stops_working() -> None:
    _, secret = _create_key("--tenant", "acme")
    ApiKey.objects.update(revoked=True)

    response = api_client(secret).get("/api/datasets")

    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_rebuild_command_refuses_without_confirm(store) -> None:
    with pytest.raises(CommandError, match="--confirm REBUILD"):
        call_command("rebuild_hybrid_knowledge", stdout=io.StringIO())
    with pytest.raises(CommandError):
        call_command("rebuild_hybrid_knowledge", "--confirm", "yes", stdout=io.StringIO())
    assert store.collections() == [] and not IndexVersion.objects.exists()


def _seed_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/rebuild_hybrid_knowledge.py", *args],
                          cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=120)


def test_seed_script_refuses_without_confirm() -> None:
    result = _seed_script()

    assert result.returncode == 1
    assert "error: a rebuild re-indexes everything: pass --confirm REBUILD" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_seed_script_rebuilds_the_test_database(store, kb, ingest) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    old = store.serving
    url = database_url()
    reset_connection()  # a Milvus Lite file serves one process at a time: the script's turn

    result = _seed_script("--confirm", "REBUILD", env={"DATABASE_URL": url,
                                                       "MILVUS_URI": settings.MILVUS_URI})

    assert result.returncode == 0, result.stderr
    new = store.serving
    assert new != old and store.serves(new)
    embedder = get_embedder()
    assert result.stdout.splitlines() == [
        "[1/1] redis.md", f"rebuilt: {new} now serves ({embedder.name}, {embedder.dimension}d)"]
    # The previous collection is kept, retired, for a rollback.
    assert sorted(store.collections()) == sorted([old, new]) and store.count() == 2
    assert IndexVersion.objects.get(collection_name=old).status == "retired"
