"""The audit admin: read-only, readable details, and no COUNT(*) on the large list."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework import exceptions

from audit.admin import EstimatedCountPaginator
from audit.models import ToolInvocation
from audit.services import invocation_record
from datasets.models import ApiKey, Dataset, Document, Tenant
from retrieval.lookup.project import invocation_of
from retrieval.types import EvidenceStatus, RelevanceLevel, StageTrace
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.admin.test_pages import assert_flat
from tests.retrieval.builders import audit_record, lookup_result

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


def cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def traced(key: ApiKey, keys: list[str]) -> ToolInvocation:
    """A call whose trace ends with a pack stage of `keys` (excerpt lengths 14, 15, ...)."""
    result = lookup_result()
    pack = StageTrace("pack", 0.2, tuple((k, float(14 + n)) for n, k in enumerate(keys)))
    invocation_record(api_key=key, result=invocation_of(replace(
        result, traces=(*result.traces, pack))), latency_ms=10.0)
    return ToolInvocation.objects.latest("pk")


def a_document(tenant: Tenant, doc_id: int, path: str, title: str) -> Document:
    dataset, _ = Dataset.objects.get_or_create(tenant=tenant, name="ops")
    return Document.objects.create(dataset=dataset, doc_id=doc_id, source_path=path,
                                   file_name=path, title=title, source_text="# x", content_hash="x")


@BOTH_RUNTIMES
def test_trace_keys_name_their_documents_and_pack_shows_chars(runtime: str, staff: Client,
                                                              make_key: MakeKey) -> None:
    key, _ = make_key("acme")
    redis = a_document(key.tenant, 42, "ops/redis-ttl.md", "Redis TTL")
    a_document(make_key("other")[0].tenant, 9, "other/plan.md", "Another tenant's plan")
    row = traced(key, ["42#chunk-0", "42#chunk-1"])

    html = staff.get(f"{LIST}{row.pk}/change/").content.decode()
    stages = html.split('id="retrieval-stages"')[1].split("</table>")[0]
    label = (f'<a href="/admin/datasets/document/{redis.pk}/change/">Redis TTL</a> '
             '<span class="quiet">ops/redis-ttl.md</span>')
    assert label in stages
    assert "other/plan.md" not in html and "Another tenant" not in html  # 9#chunk-2 is not ours
    rows = [cells(r) for r in re.findall(r"<tr>(.*?)</tr>", stages, re.S)]
    assert "<th>score</th>" in stages and "excerpt chars</th>" in stages
    # (evidence key, document, score, chars): search scores, then the pack's excerpt lengths.
    assert [r[-4:] for r in rows if r] == [
        ["42#chunk-0", "Redis TTL ops/redis-ttl.md", "0.0328", "–"],
        ["9#chunk-2", "–", "–", "–"],  # NaN is stored as null
        ["42#chunk-0", "Redis TTL ops/redis-ttl.md", "0.91", "–"],
        ["42#chunk-0", "Redis TTL ops/redis-ttl.md", "–", "14"],
        ["42#chunk-1", "Redis TTL ops/redis-ttl.md", "–", "15"]]
    pack = html.split('id="pack-evidence"')[1].split("</ul>")[0]
    assert pack.count(label) == 2


def test_trace_documents_are_read_in_one_query(staff: Client, make_key: MakeKey) -> None:
    key, _ = make_key("acme")

    def page_with(n: int) -> int:
        keys = [f"{1000 * n + i}#chunk-0" for i in range(n)]
        for i in range(n):
            a_document(key.tenant, 1000 * n + i, f"doc{n}-{i}.md", f"Doc {i}")
        url = f"{LIST}{traced(key, keys).pk}/change/"
        assert f"Doc {n - 1}" in staff.get(url).content.decode()
        with CaptureQueriesContext(connection) as queries:
            staff.get(url)
        return len(queries)

    assert page_with(2) == page_with(20)


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


def test_the_gates_reasons_read_as_words() -> None:
    from audit.admin_display import dropped_reason

    assert dropped_reason("below:0.120") == "below the reference threshold: quality 0.120"
    assert dropped_reason("below:0.400/0.300") == ("below the reference threshold: quality "
                                                   "0.400, 0.300 with the query's words")
    assert dropped_reason("duplicate") == "a copy of a better-ranked hit"
    assert dropped_reason("something new") == "something new"
    # Every code the gate can record has its words.
    from audit.types import DropReason
    assert all(dropped_reason(code) != code for code in DropReason if code != DropReason.BELOW)


def test_the_list_names_the_datasets_each_call_searched_in_one_query(
        staff: Client, make_key: MakeKey) -> None:
    """Its columns say what each call was: the datasets are named, not numbered, and a page
    of calls that searched many datasets reads their names in one query."""
    key, _ = make_key("acme")

    def add_row(n: int) -> None:
        dataset = Dataset.objects.create(tenant=key.tenant, name=f"runbooks-{n}")
        ToolInvocation.objects.create(tenant=key.tenant, outcome="ok", latency_ms=12.0,
                                      tool_name="lookup_knowledge", dataset_ids=[dataset.pk])

    assert_flat(staff, LIST, add_row)
    row = re.search(r'<tr>.*?</tr>', staff.get(LIST).content.decode().split("<tbody>")[1], re.S)
    assert row is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", row.group(0)).split())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d lookup_knowledge REST API ok - 0 items "
                        r"12 ms acme runbooks-19", text), text  # the newest call first
