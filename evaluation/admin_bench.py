"""How fast the admin's pages answer over a large audit (`manage.py bench_admin_pages`).

It adds a tenant of its own (BENCH_TENANT) with a few datasets and documents, a RAG config of
two versions running an A/B test, N audited calls spread over the last 14 days (each with a
trace like a real lookup's, the datasets it searched and its arm of the test) and a series of
evaluation runs; then it requests each page in this process (Django's test client, logged in
as a temporary superuser: the time of the view, its queries and its template, not of a
network) and removes all it added unless told to keep it.
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
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.models import InvocationDataset, Outcome, ToolInvocation
from datasets.documents.evidence import EvidenceKey
from datasets.models import Dataset, Document, Tenant
from evaluation.benchmarks import in_process_client
from evaluation.models import EvaluationQuery, EvaluationRun
from retrieval.ragconfig.drafts import experiment_start
from retrieval.ragconfig.models import ConfigExperiment, RagConfig
from retrieval.ragconfig.services import rag_config_update

BENCH_TENANT = "bench-admin-pages"
BENCH_USER = "bench-admin-pages"
BATCH = 2000
DATASETS = 5
OUTCOMES = [Outcome.OK] * 16 + [Outcome.EMPTY] * 3 + [Outcome.UNAVAILABLE]  # 80/15/5 %
RUNS, RUN_QUERIES = 20, 300  # a series of evaluation runs over the config's versions


@dataclass(frozen=True)
class PageTiming:
    page: str
    path: str
    p50_ms: float
    max_ms: float
    queries: int


def _trace(rng: random.Random, dataset_ids: list[int]) -> dict[str, object]:
    keys = [str(EvidenceKey(str(rng.randrange(10**12)), n)) for n in range(8)]
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


def _experiment(tenant: Tenant) -> ConfigExperiment:
    config = RagConfig.objects.filter(tenant=tenant, dataset__isnull=True).first()
    if config is None:
        config = rag_config_update(config=None, tenant=tenant, values={"return_n": 3},
                                   changed_by=BENCH_USER)
        config = rag_config_update(config=config, tenant=tenant, values={"return_n": 5},
                                   changed_by=BENCH_USER)
    return config.experiment or experiment_start(change=config.changes.get(version=1),
                                                 share=50, started_by=BENCH_USER)


def _runs(tenant: Tenant, rng: random.Random) -> None:
    if EvaluationRun.objects.filter(tenant=tenant).exists():
        return
    for n in range(RUNS):
        run = EvaluationRun.objects.create(
            tenant=tenant, kind=EvaluationRun.Kind.BATCH, name="bench questions",
            config_version=1 + n % 2, settings={}, queries=RUN_QUERIES,
            metrics={"hit_rate": rng.random(), "mrr@10": rng.random(), "ndcg@10": rng.random()},
            latency_ms={"p50": 20.0, "p95": 40.0}, finished_at=timezone.now())
        EvaluationQuery.objects.bulk_create(EvaluationQuery(
            run=run, position=q, query_id=f"q{q}", query=f"bench question {q}",
            expected=[f"doc-{q % 50}.md"], ranking=[f"doc-{(q + n) % 50}.md"],
            status="READY", hit=(q + n) % 3 != 0, reciprocal_rank=rng.random(),
            ndcg=rng.random(), latency_ms=20.0, trace=None if (q + n) % 3 else _trace(rng, []))
            for q in range(1, RUN_QUERIES + 1))


# The knowledge gaps page's input: each call's topic terms, a few of a vocabulary of 300 words
# (and a tenth of the calls with none, as off-topic questions have).
VOCABULARY = [f"term{n}" for n in range(300)]


def _topic(rng: random.Random) -> list[str]:
    if rng.random() < 0.1:
        return []
    first = rng.randrange(0, len(VOCABULARY) - 5)
    return rng.sample(VOCABULARY[first:first + 5], rng.randint(1, 4))


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
    experiment = _experiment(tenant)
    rng, now = random.Random(7), timezone.now()
    _runs(tenant, rng)
    have = ToolInvocation.objects.filter(tenant=tenant).count()
    for start in range(have, rows, BATCH):
        batch = []
        for n in range(start, min(start + BATCH, rows)):
            searched = sorted(rng.sample([d.pk for d in datasets], rng.randint(1, 2)))
            arm = ConfigExperiment.Arm.CANDIDATE if n % 2 else ConfigExperiment.Arm.CONTROL
            batch.append((ToolInvocation(
                created_at=now - timedelta(seconds=rng.uniform(0, 14 * 86400)), tenant=tenant,
                tool_call_id=f"bench-{n}", session_id=f"bench-session-{n // 10}",
                outcome=rng.choice(OUTCOMES), evidence_status="READY", relevance_level="PRECISE",
                returned_count=5, latency_ms=rng.uniform(10, 60), config_version=1 + n % 2,
                experiment_id=experiment.pk, experiment_arm=arm,
                details=_trace(rng, searched), dataset_ids=searched), searched))
        ToolInvocation.objects.bulk_create([row for row, _ in batch])
        if batch and batch[0][0].pk is None:  # no RETURNING (MySQL, MariaDB < 10.5)
            ids = dict(ToolInvocation.objects.filter(
                tool_call_id__in=[row.tool_call_id for row, _ in batch], tenant=tenant)
                .values_list("tool_call_id", "pk"))
            for row, _ in batch:
                row.pk = ids[row.tool_call_id]
        InvocationDataset.objects.bulk_create(
            InvocationDataset.of(row, pk, _topic(rng)) for row, searched in batch
            for pk in searched)
        if progress:
            progress(min(start + BATCH, rows), rows)
    return tenant


def pages(tenant: Tenant) -> list[tuple[str, str]]:
    invocations = reverse("admin:audit_toolinvocation_changelist")
    middle = ToolInvocation.objects.count() // 100 // 2  # 100 per page; ?p= counts from 0
    one = ToolInvocation.objects.filter(tenant=tenant).order_by("-pk").first()
    config = RagConfig.objects.get(tenant=tenant, dataset__isnull=True)
    runs = list(EvaluationRun.objects.filter(tenant=tenant).order_by("pk")
                .values_list("pk", flat=True)[:2])
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
        ("knowledge gaps of a dataset", reverse(
            "admin:audit_knowledge_gaps",
            args=[Dataset.objects.filter(tenant=tenant).order_by("pk").values_list(
                "pk", flat=True)[0]])),
        ("datasets", reverse("admin:datasets_dataset_changelist")),
        ("documents", reverse("admin:datasets_document_changelist")),
        ("jobs", reverse("admin:datasets_job_changelist")),
        ("index operations", reverse("admin:retrieval_indexversion_operations")),
        ("RAG configs", reverse("admin:retrieval_ragconfig_changelist")),
        ("a RAG config", reverse("admin:retrieval_ragconfig_change", args=[config.pk])),
        ("a config version", reverse("admin:retrieval_ragconfigchange_change",
                                     args=[config.changes.get(version=1).pk])),
        ("hit testing (the form)", reverse("admin:retrieval_ragconfig_hit_test")),
        ("an A/B test over every call", reverse("admin:retrieval_configexperiment_change",
                                                args=[config.experiment_id])),
        ("evaluation runs", reverse("admin:evaluation_evaluationrun_changelist")),
        ("an evaluation run", reverse("admin:evaluation_evaluationrun_change",
                                      args=[runs[0]])),
        ("two runs compared", f"{reverse('admin:evaluation_evaluationrun_compare')}"
                              f"?a={runs[0]}&b={runs[1]}"),
        ("a new batch hit test (the form)", reverse("admin:evaluation_evaluationrun_add")),
    ]


def measure(tenant: Tenant, *, rounds: int) -> list[PageTiming]:
    user, _ = User.objects.get_or_create(username=BENCH_USER)
    user.is_staff = user.is_superuser = True
    user.save()
    client = in_process_client()
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
    """Remove the bench tenant (its datasets, documents, calls, runs, config) and the user."""
    tenant = Tenant.objects.filter(slug=BENCH_TENANT).first()
    if tenant is not None:
        InvocationDataset.objects.filter(invocation__tenant=tenant).delete()
        while ids := list(ToolInvocation.objects.filter(tenant=tenant)
                          .values_list("pk", flat=True)[:BATCH]):
            ToolInvocation.objects.filter(pk__in=ids).delete()
        EvaluationRun.objects.filter(tenant=tenant).delete()
        RagConfig.objects.filter(tenant=tenant).update(experiment=None)
        RagConfig.objects.filter(tenant=tenant).delete()
        Dataset.objects.filter(tenant=tenant).delete()  # never indexed: nothing in Milvus
        tenant.delete()
    User.objects.filter(username=BENCH_USER).delete()
