"""How fast the admin's pages answer over a large audit (`manage.py bench_admin_pages`).

It adds a tenant of its own (BENCH_TENANT) with a few datasets and documents and N audited
calls spread over the last 14 days, each with a trace like a real lookup's and the datasets it
searched; then it requests each page in this process (Django's test client, logged in as a
temporary superuser: the time of the view, its queries and its template, not of a network)
and removes all it added unless told to keep it.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.models import InvocationDataset, Outcome, ToolInvocation
from datasets.models import Dataset, Document, Tenant

BENCH_TENANT = "bench-admin-pages"
BENCH_USER = "bench-admin-pages"
BATCH = 2000
DATASETS = 5
OUTCOMES = [Outcome.OK] * 16 + [Outcome.EMPTY] * 3 + [Outcome.UNAVAILABLE]  # 80/15/5 %


@dataclass(frozen=True)
class PageTiming:
    page: str
    path: str
    p50_ms: float
    max_ms: float
    queries: int


def _trace(rng: random.Random, dataset_ids: list[int]) -> dict[str, object]:
    keys = [f"{rng.randrange(10**12)}#chunk-{n}" for n in range(8)]
    return {"retrievalDetails": {
        "evidence_status": "READY", "relevance_level": "PRECISE", "mode": "hybrid",
        "filters": {"tenant": 0, "datasets": dataset_ids, "category": None,
                    "excluded_documents": 0, "metadata": ""},
        "hints": {"domains": ["cache"], "keywords": ["redis"], "category_filter": None},
        "retry": {"ran": False, "reason": ""},
        "stages": [{"stage": stage, "elapsed_ms": round(rng.uniform(1, 20), 2), "note": "",
                    "candidates": [{"evidence_key": k, "score": round(rng.random(), 4)}
                                   for k in keys]} for stage in ("dense", "bm25", "fusion")],
        "pack": {"evidence_keys": keys[:5]}}}


def seed(rows: int, *, progress: Callable[[int, int], object] | None = None) -> Tenant:
    """The bench tenant with `rows` audited calls (topped up if it has fewer)."""
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT, defaults={"name": BENCH_TENANT})
    datasets = [Dataset.objects.get_or_create(tenant=tenant, name=f"bench-{n}")[0]
                for n in range(DATASETS)]
    for dataset in datasets:
        if not dataset.documents.exists():
            Document.objects.bulk_create(Document(
                dataset=dataset, source_path=f"doc-{n}.md", file_name=f"doc-{n}.md",
                source_text="# bench", content_hash=f"{n:064d}",
                status=Document.Status.READY if n % 10 else Document.Status.FAILED,
                error="" if n % 10 else "bench: no heading") for n in range(50))
    rng, now = random.Random(7), timezone.now()
    have = ToolInvocation.objects.filter(tenant=tenant).count()
    for start in range(have, rows, BATCH):
        batch = []
        for n in range(start, min(start + BATCH, rows)):
            searched = sorted(rng.sample([d.pk for d in datasets], rng.randint(1, 2)))
            batch.append((ToolInvocation(
                created_at=now - timedelta(seconds=rng.uniform(0, 14 * 86400)), tenant=tenant,
                tool_call_id=f"bench-{n}", session_id=f"bench-session-{n // 10}",
                outcome=rng.choice(OUTCOMES), evidence_status="READY", relevance_level="PRECISE",
                returned_count=5, latency_ms=rng.uniform(10, 60), config_version=1,
                details=_trace(rng, searched)), searched))
        ToolInvocation.objects.bulk_create([row for row, _ in batch])
        if batch and batch[0][0].pk is None:  # no RETURNING (MySQL, MariaDB < 10.5)
            ids = dict(ToolInvocation.objects.filter(
                tool_call_id__in=[row.tool_call_id for row, _ in batch], tenant=tenant)
                .values_list("tool_call_id", "pk"))
            for row, _ in batch:
                row.pk = ids[row.tool_call_id]
        InvocationDataset.objects.bulk_create(
            InvocationDataset(invocation_id=row.pk, dataset_id=pk, created_at=row.created_at,
                              outcome=row.outcome) for row, searched in batch for pk in searched)
        if progress:
            progress(min(start + BATCH, rows), rows)
    return tenant


def pages(tenant: Tenant) -> list[tuple[str, str]]:
    invocations = reverse("admin:audit_toolinvocation_changelist")
    middle = ToolInvocation.objects.count() // 100 // 2  # 100 per page; ?p= counts from 0
    one = ToolInvocation.objects.filter(tenant=tenant).order_by("-pk").first()
    return [
        ("admin index", reverse("admin:index")),
        ("tool invocations", invocations),
        (f"tool invocations, page {middle + 1}", f"{invocations}?p={middle}"),
        ("tool invocations of a tenant", f"{invocations}?tenant__id__exact={tenant.pk}"),
        ("tool invocations EMPTY", f"{invocations}?outcome__exact=empty"),
        ("tool invocations of a session", f"{invocations}?q=bench-session-42"),
        ("a tool invocation", reverse("admin:audit_toolinvocation_change",
                                      args=[one.pk if one else 0])),
        ("datasets at a glance", reverse("admin:audit_datasets_glance")),
        ("datasets", reverse("admin:datasets_dataset_changelist")),
        ("documents", reverse("admin:datasets_document_changelist")),
        ("jobs", reverse("admin:datasets_job_changelist")),
        ("index operations", reverse("admin:retrieval_indexversion_operations")),
        ("RAG configs", reverse("admin:retrieval_ragconfig_changelist")),
    ]


def measure(tenant: Tenant, *, rounds: int) -> list[PageTiming]:
    user, _ = User.objects.get_or_create(username=BENCH_USER)
    user.is_staff = user.is_superuser = True
    user.save()
    host = next((h for h in settings.ALLOWED_HOSTS if h and h[0] not in ".*"), "localhost")
    client = Client(SERVER_NAME=host)
    client.force_login(user)
    timings = []
    for name, path in pages(tenant):
        client.get(path, secure=settings.SECURE_SSL_REDIRECT)  # warm: caches, query plans
        samples, queries = [], 0
        for _ in range(rounds):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(path, secure=settings.SECURE_SSL_REDIRECT)
                samples.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{name} ({path}) answered {response.status_code}")
            queries = len(captured)
        timings.append(PageTiming(name, path, round(statistics.median(samples), 1),
                                  round(max(samples), 1), queries))
    return timings


def cleanup() -> None:
    """Remove the bench tenant (its datasets, documents, calls) and the bench user."""
    tenant = Tenant.objects.filter(slug=BENCH_TENANT).first()
    if tenant is not None:
        InvocationDataset.objects.filter(invocation__tenant=tenant).delete()
        while ids := list(ToolInvocation.objects.filter(tenant=tenant)
                          .values_list("pk", flat=True)[:BATCH]):
            ToolInvocation.objects.filter(pk__in=ids).delete()
        Dataset.objects.filter(tenant=tenant).delete()  # never indexed: nothing in Milvus
        tenant.delete()
    User.objects.filter(username=BENCH_USER).delete()
