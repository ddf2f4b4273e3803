"""The models and their migrations agree: a model change without its migration fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from kbplatform.processes import ROOT


@pytest.mark.django_db
def test_no_model_change_lacks_its_migration() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit as exit_:  # --check exits 1 when a migration is missing
        pytest.fail(f"makemigrations would write migrations ({exit_.code}):\n{out.getvalue()}")


@pytest.mark.django_db(transaction=True)
def test_a_config_stored_before_convex_fusion_keeps_rrf() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("retrieval", "0007_aggregation_rank_by_default")], [
        ("retrieval", "0008_convex_fusion")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    tenant = old.get_model("datasets", "Tenant").objects.create(slug="old", name="old")
    old.get_model("retrieval", "RagConfig").objects.create(tenant=tenant, dense_weight=0.7,
                                                           bm25_weight=1.0)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    stored = new.get_model("retrieval", "RagConfig").objects.get(tenant__slug="old")
    assert (stored.fusion_method, stored.dense_weight, stored.bm25_weight) == ("RRF", 0.7, 1.0)
    created = new.get_model("retrieval", "RagConfig").objects.create(
        tenant=new.get_model("datasets", "Tenant").objects.create(slug="new", name="new"))
    assert (created.fusion_method, created.dense_weight) == ("CONVEX", 0.3)
    call_command("migrate", verbosity=0)  # leave the schema as the other tests expect it


@pytest.mark.embedded
def test_migrate_alone_gives_a_database_without_redis_its_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Only the demo ran `createcachetable`: a process on a database only migrated had no
    cache (its health check failed; canonical records and query vectors were not kept)."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}",
           "KB_VAR_DIR": str(tmp_path), "REDIS_URL": ""}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                   check=True, timeout=300)
    check = ("import django; django.setup()\n"
             "from django.core.cache import cache\n"
             "cache.set('k', 1, 10); print(cache.get('k'))")
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**env, "DJANGO_SETTINGS_MODULE": "kbplatform.settings"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]
