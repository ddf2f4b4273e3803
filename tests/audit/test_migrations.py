"""The audit's data migrations fill new fields for the calls already kept."""

from __future__ import annotations

import importlib

import pytest
from django.core.management import call_command


@pytest.mark.django_db(transaction=True)
def test_the_searched_datasets_are_backfilled_from_the_traces(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    migration = importlib.import_module("audit.migrations.0007_invocation_dataset_ids")
    monkeypatch.setattr(migration, "BATCH", 2)  # several batches
    before, after = [("audit", "0006_invocation_dataset_day")], [
        ("audit", "0007_invocation_dataset_ids")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    calls = executor.loader.project_state(before).apps.get_model(
        "audit", "ToolInvocation").objects
    traces = [{"retrievalDetails": {"filters": {"datasets": [3, 1, 3]}}},
              {"retrievalDetails": None, "failure": {"status": 400}},  # a failed call
              {},
              {"retrievalDetails": {"filters": {"datasets": [7]}}, "answer": {}},
              {"retrievalDetails": {"filters": {"datasets": []}}}]
    pks = [calls.create(outcome="ok", latency_ms=1, details=d).pk for d in traces]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("audit", "ToolInvocation")
    searched = dict(new.objects.values_list("pk", "dataset_ids"))
    assert [searched[pk] for pk in pks] == [[1, 3], [], [], [7], []]
    call_command("migrate", verbosity=0)  # leave the schema as the other tests expect it
