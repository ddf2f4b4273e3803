"""The knowledge gaps page: a dataset's EMPTY and low-relevance lookups grouped into topics by
the terms each call kept, open until later lookups of the topic are READY; its CSV; the
tenant scope of its staff; the retention of raw queries its examples come from."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.gaps import CLOSE_AFTER, Gap, csv_cell, knowledge_gaps
from audit.models import InvocationDataset, Outcome, ToolInvocation
from audit.services import raw_queries_erase
from datasets.documents.services import dataset_create
from datasets.models import Dataset, Tenant

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def call(dataset: Dataset, terms: list[str], outcome: str = Outcome.EMPTY, level: str = "NONE",
         *, ago: timedelta = timedelta(hours=1), query: str = "") -> ToolInvocation:
    """One audited lookup of `dataset` `ago` before now, as invocation_record writes it."""
    row = ToolInvocation.objects.create(
        created_at=NOW - ago, tenant=dataset.tenant, outcome=outcome, latency_ms=1.0,
        evidence_status="READY" if outcome == Outcome.OK else "EMPTY", relevance_level=level,
        query_text=query, query_kept=bool(query), dataset_ids=[dataset.pk])
    InvocationDataset.of(row, dataset.pk, terms).save()
    return row


def ready(dataset: Dataset, terms: list[str], *, ago: timedelta = timedelta(minutes=1),
          level: str = "PRECISE") -> ToolInvocation:
    return call(dataset, terms, Outcome.OK, level, ago=ago)


@pytest.fixture
def ops() -> Dataset:
    return dataset_create(tenant=Tenant.objects.create(slug="acme"), name="ops")


def by_topic(dataset: Dataset, **kwargs: Any) -> dict[str, Gap]:
    return {g.topic: g for g in knowledge_gaps(dataset_id=dataset.pk, now=NOW, **kwargs).gaps}


def kafka(dataset: Dataset) -> Gap:
    """The one gap whose terms name kafka."""
    [gap] = [g for g in by_topic(dataset).values() if "kafka" in g.terms]
    return gap


def test_failing_lookups_group_into_topics_by_their_terms(ops: Dataset) -> None:
    hours = timedelta(hours=1)
    call(ops, ["redis", "memory", "eviction"], ago=5 * hours)
    call(ops, ["redis", "evicting", "memory", "keys"], ago=4 * hours)  # the same words, stemmed
    call(ops, ["memory", "redis", "eviction"], ago=3 * hours)  # in another order
    call(ops, ["redis", "eviction", "memory"], Outcome.OK, "REFERENCE", ago=2 * hours)  # low
    call(ops, ["kafka", "rebalance"], ago=hours)
    call(ops, [], ago=hours)  # no word of the knowledge base: off-topic
    call(ops, [], ago=hours)
    ready(ops, ["nginx", "502"])  # READY and precise: no gap
    call(ops, ["redis"], Outcome.UNAVAILABLE)  # the platform failed: no gap either
    call(ops, ["zebra"], ago=timedelta(days=40))  # outside the window

    gaps = by_topic(ops)

    assert set(gaps) == {"redis memory eviction", "kafka rebalance",
                         "(no term of the knowledge base)"}
    redis = gaps["redis memory eviction"]
    assert (redis.failing, redis.empty, redis.low) == (4, 3, 1)
    assert redis.first_seen == NOW - 5 * hours and redis.last_seen == NOW - 2 * hours
    assert set(redis.terms) == {"redis", "memory", "eviction", "evicting", "keys"}
    assert gaps["(no term of the knowledge base)"].failing == 2
    assert gaps["kafka rebalance"].failing == 1 and not gaps["kafka rebalance"].closed
    # The window is the caller's: 60 days reach the zebra call.
    assert "zebra" in by_topic(ops, days=60)
    # Another dataset's calls are not this one's gaps.
    other = dataset_create(tenant=ops.tenant, name="other")
    assert knowledge_gaps(dataset_id=other.pk, now=NOW).gaps == []


def test_a_call_its_own_filters_narrowed_fails_no_gap_but_closes_one(ops: Dataset) -> None:
    hours = timedelta(hours=1)
    for narrowed in (call(ops, ["kafka", "rebalance"], ago=5 * hours),
                     call(ops, ["kafka", "rebalance"], Outcome.OK, "REFERENCE", ago=4 * hours)):
        InvocationDataset.objects.filter(invocation=narrowed).update(narrowed=True)
    assert by_topic(ops) == {}
    call(ops, ["kafka", "rebalance"], ago=3 * hours)  # over the whole dataset: a gap
    assert kafka(ops).failing == 1 and not kafka(ops).closed
    for ago in (2 * hours, hours):  # PRECISE answers close it, narrowed or not
        closer = ready(ops, ["kafka", "rebalance"], ago=ago)
        InvocationDataset.objects.filter(invocation=closer).update(narrowed=True)
    assert kafka(ops).closed


def test_a_gap_closes_after_later_ready_lookups_and_opens_again(ops: Dataset) -> None:
    minutes = timedelta(minutes=1)
    ready(ops, ["kafka", "lag"], ago=60 * minutes)  # before the failure: closes nothing
    call(ops, ["kafka", "lag"], ago=50 * minutes)
    ready(ops, ["kafka", "consumer", "lag"], ago=40 * minutes)
    assert not kafka(ops).closed  # one READY lookup is not enough
    assert kafka(ops).ready_after == 1
    ready(ops, ["kafka", "lag"], ago=30 * minutes, level="REFERENCE")  # low: fails again
    assert kafka(ops).ready_after == 0
    for n in range(CLOSE_AFTER):
        ready(ops, ["lag", "kafka"], ago=(20 - n) * minutes)

    gap = kafka(ops)

    assert gap.closed and gap.closed_at == NOW - (20 - CLOSE_AFTER + 1) * minutes
    assert (gap.empty, gap.low) == (1, 1)
    # A READY call with no term closes nothing, and the open gaps are listed first.
    call(ops, [], ago=10 * minutes)
    ready(ops, [])
    ready(ops, [])
    report = knowledge_gaps(dataset_id=ops.pk, now=NOW)
    assert [(g.topic, g.closed) for g in report.gaps] == [
        ("(no term of the knowledge base)", False), ("kafka lag consumer", True)]
    assert report.open == 1
    # A new failure opens it again.
    call(ops, ["kafka", "lag"], ago=minutes)
    assert not kafka(ops).closed


def test_rows_from_before_the_levels_were_recorded_are_neither(ops: Dataset) -> None:
    call(ops, ["kafka"])
    for _ in range(CLOSE_AFTER):
        ready(ops, ["kafka"], level="")
    assert not by_topic(ops)["kafka"].closed


def staff_client(client: Client, *tenants: Tenant) -> Client:
    user = User.objects.create_user(f"staff-{len(tenants)}", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_dataset", "view_toolinvocation"]))
    for tenant in tenants:
        tenant.staff.add(user)
    client.force_login(user)
    return client


def gaps_page(client: Client, dataset: Dataset, query: str = "") -> Any:
    return client.get(reverse("admin:audit_knowledge_gaps", args=[dataset.pk]) + query)


def gaps_csv(client: Client, dataset: Dataset) -> list[dict[str, str]]:
    response = client.get(reverse("admin:audit_knowledge_gaps_csv", args=[dataset.pk]))
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_the_page_shows_the_topics_and_is_reachable_from_the_glance(
        admin_client: Client, ops: Dataset) -> None:
    call(ops, ["redis", "memory"])
    call(ops, ["kafka", "lag"])
    for _ in range(CLOSE_AFTER):
        ready(ops, ["kafka", "lag"])
    glance = admin_client.get(reverse("admin:audit_datasets_glance")).content.decode()
    assert reverse("admin:audit_knowledge_gaps", args=[ops.pk]) in glance

    page = gaps_page(admin_client, ops)

    assert page.status_code == 200
    html = page.content.decode()
    rows = html.split('<tr class="gap-row"')[1:]
    assert len(rows) == 2
    assert 'data-status="open"' in rows[0] and '<td class="gap-topic">redis memory<' in rows[0]
    assert 'data-status="closed"' in rows[1] and "kafka lag" in rows[1]
    assert "2 topics, 1 open" in html
    # A bar per day of the window, the page's for both topics, each topic's for its own.
    day = timezone.localtime(NOW - timedelta(hours=1)).date().isoformat()
    assert f"<title>{day}: 2</title>" in html and rows[0].count(f"<title>{day}: 1</title>") == 1
    assert rows[0].count("<rect") == 30
    assert "Example queries" not in html  # none are kept by default
    # Any window is bounded; a window that is no number is the default one.
    assert gaps_page(admin_client, ops, "?days=99999").status_code == 200
    assert gaps_page(admin_client, ops, "?days=x%00").status_code == 200


def test_the_csv_is_safe_to_open_in_a_spreadsheet(admin_client: Client, ops: Dataset,
                                                   settings: Any) -> None:
    call(ops, ["=cmd|' /c calc'!a0", "+sum", "@now"], query="=HYPERLINK(\"http://x\")")
    call(ops, ["-2+3", "redis"])

    rows = gaps_csv(admin_client, ops)

    assert [r["status"] for r in rows] == ["open", "open"]
    assert "example_queries" not in rows[0]  # raw queries are not kept: no examples
    cells = [v for r in rows for v in r.values()]
    assert not any(v.startswith(("=", "+", "-", "@")) for v in cells), cells
    assert "'=cmd|' /c calc'!a0 +sum @now" in cells  # kept, but as text
    assert {r["failing_lookups"] for r in rows} == {"1"}
    assert csv_cell(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02T00:00:00+00:00"

    settings.KB_AUDIT_STORE_RAW_QUERY = True
    rows = gaps_csv(admin_client, ops)
    assert "'=HYPERLINK(\"http://x\")" in [r["example_queries"] for r in rows]
    assert "Example queries" in gaps_page(admin_client, ops).content.decode()


def test_staff_see_the_gaps_of_their_own_tenants_only(client: Client, ops: Dataset) -> None:
    theirs = dataset_create(tenant=Tenant.objects.create(slug="globex"), name="ops")
    call(ops, ["redis"])
    call(theirs, ["coolant"])
    staff = staff_client(client, ops.tenant)

    assert "redis" in gaps_page(staff, ops).content.decode()
    assert len(gaps_csv(staff, ops)) == 1
    # Another tenant's dataset is missing, as one that does not exist is.
    assert gaps_page(staff, theirs).status_code == 404
    assert staff.get(reverse("admin:audit_knowledge_gaps_csv",
                             args=[theirs.pk])).status_code == 404
    assert gaps_page(staff, ops).status_code == 200
    missing = Dataset.objects.order_by("-pk").first().pk + 1  # type: ignore[union-attr]
    assert staff.get(f"/admin/audit/toolinvocation/datasets/{missing}/gaps/").status_code == 404


def test_the_page_needs_the_audit_and_the_datasets(client: Client, ops: Dataset) -> None:
    user = User.objects.create_user("viewer", is_staff=True)
    ops.tenant.staff.add(user)
    client.force_login(user)
    user.user_permissions.add(Permission.objects.get(codename="view_dataset"))
    assert gaps_page(client, ops).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_toolinvocation"))
    assert gaps_page(client, ops).status_code == 200


def test_raw_queries_are_erased_after_their_retention(ops: Dataset, settings: Any) -> None:
    settings.KB_AUDIT_STORE_RAW_QUERY = True
    settings.KB_AUDIT_RAW_QUERY_RETENTION_DAYS = 7
    old = call(ops, ["redis"], query="old question", ago=timedelta(days=8))
    recent = call(ops, ["redis"], query="recent question", ago=timedelta(days=6))

    # The periodic pass the recovery loop sends with the recovery (kbplatform/tasks.py).
    from kbplatform.tasks import PERIODIC_TASKS

    assert "audit.tasks.raw_queries_erase_task" in PERIODIC_TASKS
    from kbplatform.celery import app

    app.loader.import_default_modules()
    assert set(PERIODIC_TASKS) <= set(app.tasks)
    app.tasks["audit.tasks.raw_queries_erase_task"].apply()

    old.refresh_from_db()
    recent.refresh_from_db()
    assert (old.query_text, recent.query_text) == ("", "recent question")
    assert old.relevance_level == "NONE" and not old.query_kept  # the rest of the row stays
    # A later pass reads the rows that still hold text, from their index: none of the erased.
    late = call(ops, ["redis"], query="late question", ago=timedelta(days=7, hours=12))
    assert raw_queries_erase() == 1
    late.refresh_from_db()
    assert late.query_text == ""
    # The command does the same.
    stray = call(ops, ["redis"], query="stray", ago=timedelta(days=30))
    call_command("prune_tool_invocations", "--days", "90", stdout=io.StringIO())
    stray.refresh_from_db()
    assert stray.query_text == ""


POOL = """---
title: 数据库连接池耗尽
domain: database
keywords: [mysql]
category: database
---
# 数据库连接池耗尽

## 现象

应用日志报连接超时，数据库连接池的活跃连接数一直停在上限。

## 处理

调大连接池上限，排查慢查询和没有归还的连接。
"""


def test_a_chinese_gap_is_named_by_words(store: Any, tmp_path: Any, make_key: Any,
                                         admin_client: Client) -> None:
    """Issue 36 item 17: the topic of a Chinese question the runbooks do not answer reads
    "数据库", as jieba cuts it, not the bigrams "数据, 据库"."""
    from tests.retrieval.conftest import client_for, import_runbooks, lookup

    data = import_runbooks(tmp_path / "zh", tenant="acme", dataset="ops",
                           files={"pool.md": POOL})
    _, secret = make_key("acme")
    answer = lookup(client_for(secret), "数据库主从复制延迟怎么排查").json()
    assert answer["relevance_level"] != "PRECISE", answer  # a gap: EMPTY or REFERENCE

    [terms] = InvocationDataset.objects.values_list("terms", flat=True)
    assert "数据库" in terms and "据库" not in terms, terms
    html = gaps_page(admin_client, data.dataset).content.decode()
    assert '<td class="gap-terms">数据库, 排查</td>' in html
