"""The models and their migrations agree: a model change without its migration fails here."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


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
