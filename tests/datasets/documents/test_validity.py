"""Freshness and validity (issue 40 item 6): a runbook's frontmatter says when it was reviewed,
until when it holds and who owns it; evidence carries them with the date its content last
changed, and `stale: true` once it is served past its `valid_until`."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from datasets.documents.validity import Validity
from datasets.ingestion.parse import DocumentParseError, parse_markdown
from tests.conftest import Kb
from tests.datasets.builders import lookup, upload

BODY = ("# Kafka consumer lag\n\nReset the consumer group's offsets with kafka-consumer-groups, "
        "then watch the lag fall.\n")


def runbook(**fields: str) -> bytes:
    front = "".join(f"{key}: {value}\n" for key, value in fields.items())
    return f"---\n{front}---\n\n{BODY}".encode()


@pytest.mark.pure
def test_the_frontmatter_dates_and_owner_are_read_and_checked() -> None:
    parsed = parse_markdown(runbook(reviewed_at="2026-03-01", valid_until="'2027-03-01'",
                                    owner="sre-team"), file_name="k.md", max_bytes=10_000)
    assert (parsed.reviewed_at, parsed.valid_until, parsed.owner) == (
        dt.date(2026, 3, 1), dt.date(2027, 3, 1), "sre-team")
    assert "owner" not in parsed.fields  # a field of its own, not free metadata
    for bad in ("next spring", "'2026-13-01'", "[2026]"):
        with pytest.raises(DocumentParseError, match="valid_until.*must be a date"):
            parse_markdown(runbook(valid_until=bad), file_name="k.md", max_bytes=10_000)


@pytest.mark.pure
def test_stored_text_with_a_field_checked_later_still_indexes() -> None:
    """A document taken before the dates were checked is indexed again (a rebuild) with the
    field left out, never refused."""
    raw = runbook(valid_until="next quarter", owner="x" * 300)
    with pytest.raises(DocumentParseError):
        parse_markdown(raw, file_name="k.md", max_bytes=10_000)
    parsed = parse_markdown(raw, file_name="k.md", max_bytes=10_000, stored=True)
    assert (parsed.valid_until, parsed.owner) == (None, "")


@pytest.mark.django_db
def test_documents_stored_before_get_their_dates_from_their_frontmatter(
        kb: Kb, ingest: Any) -> None:
    import importlib

    from django.apps import apps

    from datasets.models import Document

    document = ingest(kb.dataset, "kafka/old.md", runbook(valid_until="2025-01-01",
                                                          owner="sre-team"))
    Document.objects.filter(pk=document.pk).update(valid_until=None, owner="")
    migration = importlib.import_module("datasets.migrations.0020_document_validity")
    migration.fill_validity(apps, None)
    document.refresh_from_db()
    assert (document.valid_until, document.owner) == (dt.date(2025, 1, 1), "sre-team")


@pytest.mark.pure
def test_stale_is_past_the_day_it_holds_until() -> None:
    now = timezone.now()
    today = now.date()
    assert not Validity(now).stale(today)
    assert not Validity(now, valid_until=today).stale(today)  # it holds that day
    assert Validity(now, valid_until=today - dt.timedelta(days=1)).stale(today)


@pytest.mark.django_db
def test_evidence_says_how_current_its_runbook_is(kb: Kb, ingest: Any) -> None:
    yesterday = timezone.localdate() - dt.timedelta(days=1)
    ingest(kb.dataset, "kafka/old.md", runbook(reviewed_at="2024-01-15",
                                               valid_until=yesterday.isoformat(),
                                               owner="sre-team"))
    [first] = lookup(kb.tool, "kafka consumer group offsets lag")["evidence"][:1]
    assert (first["reviewed_at"], first["valid_until"], first["owner"], first["stale"]) == (
        "2024-01-15", yesterday.isoformat(), "sre-team", True)
    assert dt.datetime.fromisoformat(first["updated_at"]) <= timezone.now()
    fetched = kb.tool.post("/api/tools/fetch_evidence", {"document_id": first["document_id"]},
                           format="json").json()
    assert (fetched["stale"], fetched["owner"]) == (True, "sre-team")

    ingest(kb.dataset, "kafka/old.md", runbook(valid_until="2999-01-01"))
    [again] = lookup(kb.tool, "kafka consumer group offsets lag")["evidence"][:1]
    assert (again["stale"], again["reviewed_at"], again["owner"]) == (False, None, "")


@pytest.mark.django_db
def test_a_date_that_is_no_date_is_refused_at_upload(kb: Kb) -> None:
    response = upload(kb.admin, kb.dataset.pk, "bad.md", runbook(reviewed_at="yesterday"))
    assert response.status_code == 400
    assert "reviewed_at" in response.json()["message"]


@pytest.mark.django_db
def test_the_console_lists_stale_runbooks_served_and_cited_to_their_tenants_staff(
        kb: Kb, ingest: Any) -> None:
    from django.test import Client

    from datasets.models import Tenant
    from tests.datasets.admin.test_scope import staff_of

    yesterday = timezone.localdate() - dt.timedelta(days=1)
    old = ingest(kb.dataset, "kafka/old.md", runbook(valid_until=yesterday.isoformat(),
                                                     owner="sre-team"))
    ingest(kb.dataset, "kafka/fresh.md", runbook(valid_until="2999-01-01").replace(
        b"Kafka consumer lag", b"Kafka consumer lag, fresh"))
    answer = lookup(kb.tool, "kafka consumer group offsets lag", tool_call_id="call-stale")
    served = [e["document_id"] for e in answer["evidence"] if e["source"] == "kafka/old.md"]
    assert served
    kb.tool.post("/api/tools/evidence_guard", {"tool_call_id": "call-stale",
                                               "document_ids": served}, format="json")

    staff = Client()
    staff_of(staff, kb.tenant)
    page = staff.get("/admin/audit/toolinvocation/stale/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "kafka/old.md" in html and "sre-team" in html and "kafka/fresh.md" not in html
    assert f">{len(served)}</td>" in html  # served, and as many cited
    assert f"/admin/datasets/document/{old.pk}/change/" in html
    glance = staff.get("/admin/audit/toolinvocation/datasets/").content.decode()
    assert "/admin/audit/toolinvocation/stale/" in glance
    assert staff.get("/admin/audit/toolinvocation/stale/?days=1000000").status_code == 200

    # Served before it lapsed: no stale serving, not listed.
    from audit.models import ServedEvidence
    ServedEvidence.objects.update(day=yesterday - dt.timedelta(days=1))
    assert "kafka/old.md" not in staff.get("/admin/audit/toolinvocation/stale/").content.decode()

    other = Client()
    staff_of(other, Tenant.objects.create(slug="globex"), name="other")
    assert "kafka/old.md" not in other.get("/admin/audit/toolinvocation/stale/").content.decode()
