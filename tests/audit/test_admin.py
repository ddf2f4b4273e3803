"""The audit admin: read-only, readable details, and no COUNT(*) on the large list."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework import exceptions

from audit.admin import EstimatedCountPaginator
from audit.models import ToolInvocation
from audit.services import invocation_record
from datasets.models import ApiKey
from retrieval.types import EvidenceStatus, RelevanceLevel
from tests.datasets.test_admin import assert_flat
from tests.retrieval.builders import audit_record

pytestmark = pytest.mark.django_db

MakeKey = Callable[..., tuple[ApiKey, str]]
LIST = "/admin/audit/toolinvocation/"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw-123456"))
    return client


@pytest.fixture
def rows(make_key: MakeKey) -> list[ToolInvocation]:
    key, _ = make_key("acme")
    invocation_record(api_key=key, result=audit_record(), latency_ms=10.0)
    invocation_record(api_key=key, latency_ms=1.0, payload={"tool_call_id": "call-bad"},
                      error=exceptions.ValidationError({"query": ["blank"]}))
    invocation_record(api_key=key, latency_ms=1.0, result=audit_record(
        EvidenceStatus.EMPTY, relevance=RelevanceLevel.NONE))
    return list(ToolInvocation.objects.order_by("pk"))


def test_list_renders_with_filters_and_search(staff: Client, rows: list[ToolInvocation]) -> None:
    page = staff.get(LIST)
    assert page.status_code == 200
    assert page.content.decode().count("call-1") == 2 and "call-bad" in page.content.decode()
    for query in ["outcome=ok", "relevance_level=PRECISE", f"tenant__id__exact={rows[0].tenant_id}",
                  "created_at__gte=2000-01-01T00:00:00%2B00:00"]:
        assert staff.get(f"{LIST}?{query}").status_code == 200, query
    found = staff.get(f"{LIST}?q=call-bad").content.decode()
    assert "call-bad" in found and "call-1" not in found
    found = staff.get(f"{LIST}?outcome=invalid").content.decode()
    assert "call-bad" in found and "call-1" not in found


def test_list_runs_no_count_query(staff: Client, rows: list[ToolInvocation]) -> None:
    for url in [LIST, f"{LIST}?outcome=ok", f"{LIST}?q=s-1"]:
        with CaptureQueriesContext(connection) as queries:
            assert staff.get(url).status_code == 200
        counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()
                  and "tool_invocation" in q["sql"]]
        assert counts == [], url


def test_paginator_counts_without_count() -> None:
    ToolInvocation.objects.bulk_create(
        ToolInvocation(outcome="ok" if i % 3 else "error", latency_ms=1.0) for i in range(12))
    everything = ToolInvocation.objects.all()
    assert EstimatedCountPaginator(everything, 5).count == 12
    assert EstimatedCountPaginator(everything.filter(outcome="error"), 5).count == 4
    assert EstimatedCountPaginator(ToolInvocation.objects.none(), 5).count == 0


def test_detail_lays_out_stages_and_candidates(staff: Client,
                                               rows: list[ToolInvocation]) -> None:
    page = staff.get(f"{LIST}{rows[0].pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="retrieval-stages"' in html and "<th>evidence key</th>" in html
    assert "<strong>post_process</strong>" in html and "kept 1" in html
    assert "<code>42#chunk-0</code>" in html and "0.0328" in html
    assert "filtered search below reference" in html  # why the unfiltered retry ran
    assert "Redis TTL body" not in html and "how to set a redis ttl" not in html
    assert "&quot;stages&quot;" not in html  # tables, not the JSON blob


def test_detail_of_a_failure_and_read_only(staff: Client, rows: list[ToolInvocation]) -> None:
    html = staff.get(f"{LIST}{rows[1].pk}/change/").content.decode()
    assert 'id="failure-details"' in html and "ValidationError" in html
    assert 'name="_save"' not in html
    assert staff.get(f"{LIST}add/").status_code == 403
    assert staff.post(f"{LIST}{rows[1].pk}/delete/", {"post": "yes"}).status_code == 403
    assert ToolInvocation.objects.count() == 3


def test_list_does_not_query_per_row(staff: Client, make_key: MakeKey) -> None:
    def add_row(n: int) -> None:
        key, _ = make_key(f"t{n}")  # a tenant per row: the list names it
        invocation_record(api_key=key, result=audit_record(), latency_ms=1.0)

    assert_flat(staff, LIST, add_row)
