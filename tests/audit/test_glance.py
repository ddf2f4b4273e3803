"""Datasets at a glance: every audited lookup records the datasets it searched, and the admin
page shows per dataset its documents, chunks, last ingestion errors and lookups per day with
the EMPTY and UNAVAILABLE shares, in a constant number of queries."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.models import InvocationDataset, Outcome, ServedEvidence, ToolInvocation
from audit.selectors import lookups_per_day
from audit.services import tool_invocations_prune
from datasets.documents.services import dataset_create
from datasets.models import Dataset, Document, Tenant
from tests.datasets.builders import lookup, runbook

pytestmark = pytest.mark.django_db
GLANCE = "admin:audit_datasets_glance"


def glance_rows(client: Client) -> dict[str, str]:
    page = client.get(reverse(GLANCE))
    assert page.status_code == 200, page.content
    html = page.content.decode()
    rows = html.split('<tr class="glance-row"')[1:]
    return {row.split('data-dataset="')[1].split('"')[0]: row for row in rows}


def call_on(day: date, dataset: Dataset, outcome: str) -> None:
    at = timezone.make_aware(datetime.combine(day, datetime.min.time())) + timedelta(hours=12)
    row = ToolInvocation.objects.create(created_at=at, tenant=dataset.tenant, outcome=outcome,
                                        latency_ms=1.0)
    InvocationDataset.of(row, dataset.pk).save()


def test_a_lookup_records_each_dataset_it_searched(kb, ingest, store) -> None:
    other = dataset_create(tenant=kb.tenant, name="more")
    ingest(kb.dataset, "redis.md", runbook("redis"))

    assert lookup(kb.tool, "redis dashboard restart")["evidence_status"] == "READY"
    assert lookup(kb.tool, "zqxj wvvk plorf")["evidence_status"] == "EMPTY"

    searched = InvocationDataset.objects.order_by("invocation_id", "dataset_id")
    ready, empty = ToolInvocation.objects.order_by("pk")
    assert [(s.invocation_id, s.dataset_id, s.outcome) for s in searched] == [
        (ready.pk, kb.dataset.pk, "ok"), (ready.pk, other.pk, "ok"),
        (empty.pk, kb.dataset.pk, "empty"), (empty.pk, other.pk, "empty")]
    assert searched[0].created_at == ready.created_at
    # A refused call searched nothing.
    assert kb.tool.post("/api/tools/lookup_knowledge", {"query": ""},
                        format="json").status_code == 400
    assert InvocationDataset.objects.count() == 4
    # Pruning a call takes its rows with it.
    ToolInvocation.objects.update(created_at=timezone.now() - timedelta(days=100))
    served = ServedEvidence.objects.count()  # the READY call's evidence, pruned with it too
    assert served == ready.returned_count > 0
    assert tool_invocations_prune(older_than_days=30) == 3 + 4 + served
    assert not InvocationDataset.objects.exists()


def test_lookups_per_day_cover_the_window_and_nothing_older(kb) -> None:
    today = date(2026, 11, 30)
    for day, outcome in [(today, Outcome.OK), (today, Outcome.EMPTY),
                         (today, Outcome.UNAVAILABLE), (today - timedelta(days=13), Outcome.OK),
                         (today - timedelta(days=14), Outcome.OK)]:  # the last one: too old
        call_on(day, kb.dataset, outcome)

    days = lookups_per_day(dataset_ids=[kb.dataset.pk], days=14, today=today)[kb.dataset.pk]

    assert [d.day for d in days] == [today - timedelta(days=n) for n in range(13, -1, -1)]
    assert (days[-1].lookups, days[-1].empty, days[-1].unavailable) == (3, 1, 1)
    assert days[0].lookups == 1 and sum(d.lookups for d in days) == 4


def test_the_page_shows_each_datasets_figures(admin_client: Client, kb, ingest, store) -> None:
    ingest(kb.dataset, "redis.md", runbook("redis"))
    Document.objects.create(dataset=kb.dataset, source_path="broken.md", file_name="broken.md",
                            source_text="x", content_hash="0" * 64,
                            status=Document.Status.FAILED, error="no heading in the file")
    quiet = dataset_create(tenant=kb.tenant, name="quiet")
    today = timezone.localdate()
    for outcome in [Outcome.OK, Outcome.OK, Outcome.EMPTY, Outcome.UNAVAILABLE]:
        call_on(today, kb.dataset, outcome)
    listed = admin_client.get(reverse("admin:datasets_dataset_changelist")).content.decode()
    assert 'id="glance-link"' in listed  # reachable from the datasets

    rows = glance_rows(admin_client)

    busy = rows[str(kb.dataset.pk)]
    assert 'class="glance-lookups">4<' in busy
    assert 'class="glance-empty">25 %<' in busy and 'class="glance-unavailable">25 %<' in busy
    assert "broken.md</a>: no heading in the file" in busy
    assert f"<title>{today.isoformat()}: 4 lookups, 1 EMPTY, 1 UNAVAILABLE</title>" in busy
    assert busy.count("<rect") == 14 + 3  # a hover area per day, three parts today
    assert 'class="glance-lookups">0<' in rows[str(quiet.pk)]
    assert 'class="glance-empty">–<' in rows[str(quiet.pk)]


def test_the_page_does_not_query_per_dataset(admin_client: Client, kb) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            glance_rows(admin_client)
        return len(captured)

    few = queries()
    for n in range(6):
        dataset = dataset_create(tenant=kb.tenant, name=f"d{n}")
        call_on(timezone.localdate(), dataset, Outcome.OK)
    assert queries() == few


def test_the_page_needs_the_audit_and_the_datasets(client: Client) -> None:
    staff = User.objects.create_user("viewer", is_staff=True)
    client.force_login(staff)
    staff.user_permissions.add(Permission.objects.get(codename="view_dataset"))
    assert client.get(reverse(GLANCE)).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_toolinvocation"))
    assert client.get(reverse(GLANCE)).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_migrations_backfill_the_recent_calls_with_their_days() -> None:
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("audit", "0003_tool_invocation_channel")], [
        ("audit", "0006_invocation_dataset_day")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    # The datasets app is not migrated back: its current models are its rows' shape.
    dataset = Dataset.objects.create(name="ops", tenant=Tenant.objects.create(slug="acme"))
    calls = old.get_model("audit", "ToolInvocation").objects
    details = {"retrievalDetails": {"filters": {"datasets": [dataset.pk, 999_999]}}}
    at = timezone.now()
    recent = calls.create(created_at=at, outcome="ok", latency_ms=1, details=details)
    calls.create(created_at=at - timedelta(days=40), outcome="ok", latency_ms=1,
                 details=details)  # older than the backfill
    calls.create(created_at=at, outcome="invalid", latency_ms=1,
                 details={"retrievalDetails": None})
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    rows = new.get_model("audit", "InvocationDataset").objects.values_list(
        "invocation_id", "dataset_id", "outcome", "day")
    # A dataset that is gone is left out; the day is the call's local date.
    assert list(rows) == [(recent.pk, dataset.pk, "ok", timezone.localtime(at).date())]
    call_command("migrate", verbosity=0)  # leave the schema as the other tests expect it
