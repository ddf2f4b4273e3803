"""Evaluation runs of a tenant's config versions, as jobs (the admin's batch hit testing and
evaluation runs).

A **batch** asks its questions through the tool's own lookup on the tenant's serving index,
with the version's settings, and scores the evidence an agent gets: hit (an expected document
is handed out; off-topic: EMPTY), and the reciprocal rank and nDCG@10 of the documents handed
out (at most return_n). A
**suite** is a BEIR-format folder of KB_EVAL_SUITES_DIR, loaded into a collection of its own
and ranked as `manage.py evaluate` ranks it (100 deep, no relevance gate). Every query's
outcome is stored, with the trace of the first misses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from datasets.jobs.progress import GOING, JOB_ID, job_create, job_update
from datasets.models import Job, Tenant
from datasets.tenancy.permissions import PLATFORM
from evaluation.benchmarks import Timing
from evaluation.models import EvaluationQuery, EvaluationRun
from evaluation.question_sets import BatchQuestion
from evaluation.suites import (
    document_scores,
    embedder_for,
    eval_index_load,
    evaluation_overrides,
    judged_queries,
    load_suite,
    suite_scores,
)
from retrieval.index.versions import IndexNotReady, serving_index
from retrieval.lookup.project import trace_details
from retrieval.lookup.service import lookup_knowledge
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.models import RagConfig, RagConfigChange
from retrieval.ragconfig.selectors import rag_config_for
from retrieval.types import EvidenceStatus, LookupResult, SearchFilters

SUITE_DEPTH = 100  # as `manage.py evaluate`: ranking is measured, not the agent's top 5
MAX_TRACED_MISSES = 100  # a run keeps the traces of its first misses, not of thousands
RANKING_KEPT = 10
PROGRESS_STEPS = 50  # progress is written about this many times per run
MAX_SUITE_QUERIES = 10_000  # a run's outcomes are read whole by its comparisons


class RunUnavailable(RuntimeError):
    """A lookup answered UNAVAILABLE: the run's figures would not be the config's."""


class RunRefused(ValueError):
    """A run cannot start: `run` is the tenant's run still going."""

    def __init__(self, run: EvaluationRun) -> None:
        self.run = run
        super().__init__(f"run {run.pk} of this tenant is still going: one run at a time")


def eval_suites() -> list[str]:
    """The BEIR-format suites a run may use: the folders of KB_EVAL_SUITES_DIR with a corpus,
    queries and test qrels."""
    root = Path(django_settings.KB_EVAL_SUITES_DIR)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "corpus.jsonl").is_file()
                  and (p / "queries.jsonl").is_file() and (p / "qrels" / "test.tsv").is_file())


@dataclass(frozen=True)
class EvaluatedConfig:
    """What a run evaluates: a config (its scope label, "" for the built-in defaults), its
    version and every setting."""

    scope: str
    version: int | None
    settings: dict[str, Any]


def evaluated_config(*, tenant: Tenant, dataset_ids: Sequence[int],
                     version: RagConfigChange | None) -> EvaluatedConfig:
    """`version` (of any config of the tenant, a dataset's own too), else exactly what serves
    the lookups of `dataset_ids` now: a dataset's own config when that one dataset is
    searched, else the tenant default, else the built-in defaults. Raises RagConfigError when
    the serving row does not validate, or the version is another tenant's."""
    if version is not None:
        if version.config.tenant_id != tenant.pk:
            raise RagConfigError({"version": f"a version of {version.config.scope_label}, not "
                                             f"of a config of {tenant.slug}"})
        return EvaluatedConfig(version.config.scope_label, version.version, version.settings())
    serving = rag_config_for(tenant_id=tenant.pk, dataset_ids=dataset_ids)
    settings = RagConfigConverter.to_dict(serving.settings)
    if serving.config_id is None:
        return EvaluatedConfig("", None, settings)
    row = RagConfig.objects.select_related("tenant", "dataset").get(pk=serving.config_id)
    return EvaluatedConfig(row.scope_label, serving.version, settings)


def evaluation_run_start(*, tenant: Tenant, kind: str, name: str,
                         version: RagConfigChange | None, created_by: str,
                         questions: Sequence[BatchQuestion] = (),
                         dataset_ids: Sequence[int] = (), max_queries: int | None = None
                         ) -> EvaluationRun:
    """Store the run and queue its job (it starts once this transaction commits). One run per
    tenant at a time (RunRefused): runs queue behind each other on the worker."""
    config = evaluated_config(tenant=tenant, dataset_ids=dataset_ids, version=version)
    with transaction.atomic():
        Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
        going = EvaluationRun.objects.filter(tenant=tenant, job__status__in=GOING).first()
        if going is not None:
            raise RunRefused(going)
        run = EvaluationRun.objects.create(
            tenant=tenant, kind=kind, name=name, config_scope=config.scope,
            config_version=config.version, settings=config.settings,
            dataset_ids=list(dataset_ids), questions=[q.as_json() for q in questions],
            max_queries=max_queries, created_by=created_by)
        run.job = job_create(kind=Job.Kind.EVALUATE, task="evaluation.tasks.evaluation_task",
                             args=(JOB_ID, run.pk), tenant_id=tenant.pk, total=len(questions),
                             detail={"name": name, "run": run.pk})
        run.save(update_fields=["job"])
        job_update(run.job, log=f"queued: {name}, {run.config_label}")
    return run


class _Recorder:
    """Stores each query's outcome and the job's progress; counts the hits."""

    def __init__(self, run: EvaluationRun, job: Job | None, total: int,
                 progress: Callable[[int], None] | None = None) -> None:
        self.run, self.job, self.total, self.progress = run, job, total, progress
        self.rows: list[EvaluationQuery] = []
        self.latencies: list[float] = []
        self.traced = self.hits = 0
        self.step = max(1, total // PROGRESS_STEPS)
        job_update(job, total=total, done=0, log=f"{total} queries")

    def add(self, *, query_id: str, query: str, expected: Sequence[str], ranking: list[str],
            result: LookupResult, hit: bool, reciprocal_rank: float, ndcg: float,
            latency_ms: float) -> None:
        keep_trace = not hit and self.traced < MAX_TRACED_MISSES
        self.traced += keep_trace
        self.hits += hit
        self.rows.append(EvaluationQuery(
            run=self.run, position=len(self.latencies) + 1, query_id=query_id, query=query,
            expected=list(expected), ranking=ranking[:RANKING_KEPT],
            status=result.evidence_status, hit=hit, reciprocal_rank=round(reciprocal_rank, 4),
            ndcg=round(ndcg, 4), latency_ms=round(latency_ms, 1),
            trace=trace_details(result) if keep_trace else None))
        self.latencies.append(latency_ms)
        done = len(self.latencies)
        if done % self.step == 0 or done == self.total:
            EvaluationQuery.objects.bulk_create(self.rows)
            self.rows = []
            job_update(self.job, done=done, log=None if done < self.total else
                       f"all {done} queries asked")
            if self.progress is not None:  # a gate's job counts the queries of its runs
                self.progress(done)

    def finish(self, metrics: dict[str, float], **fields: Any) -> None:
        timing = Timing.of(self.latencies)
        EvaluationRun.objects.filter(pk=self.run.pk).update(
            queries=len(self.latencies), metrics={k: round(v, 4) for k, v in metrics.items()},
            latency_ms={"p50": timing.p50, "p95": timing.p95}, finished_at=timezone.now(),
            **fields)
        summary = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
        job_update(self.job, status=Job.Status.SUCCEEDED, log=f"done: {summary}")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ranking(result: LookupResult, expected: Sequence[str]) -> list[str]:
    """The documents handed out, best first, each named as the set names it: by its source
    path, or by its document id when that is what the set expects."""
    ranking: list[str] = []
    # As the agent sees it (RagToolResult): only READY hands out evidence.
    items = result.pack.items if result.evidence_status is EvidenceStatus.READY else ()
    for item in items:
        name = item.chunk.doc_id if item.chunk.doc_id in expected else item.chunk.source
        if name not in ranking:
            ranking.append(name)
    return ranking


@dataclass(frozen=True)
class Answered:
    """One batch question's answer as a batch's metrics read it."""

    ranking: list[str]
    hit: bool  # an expected document handed out; off-topic: EMPTY
    reciprocal_rank: float  # off-topic: 1 when EMPTY
    ndcg: float  # off-topic: 1 when EMPTY
    scores: dict[str, float] | None  # on-topic: document_scores; off-topic: None

    @classmethod
    def of(cls, question: BatchQuestion, result: LookupResult) -> Answered:
        ranking = _ranking(result, question.expected)
        if not question.expected:
            empty = result.evidence_status == EvidenceStatus.EMPTY
            return cls(ranking, empty, float(empty), float(empty), None)
        scores = document_scores(ranking, dict.fromkeys(question.expected, 1))
        return cls(ranking, any(name in question.expected for name in ranking),
                   scores["mrr@10"], scores["ndcg@10"],
                   {**scores, "first": float(bool(ranking) and ranking[0] in question.expected)})


def batch_metrics(answers: Sequence[Answered]) -> dict[str, float]:
    """A batch's metrics: the hit rate over every question; right first, MRR@10, nDCG@10 and
    recall@10 over the on-topic ones; off-topic EMPTY over the off-topic ones, if any."""
    on_topic = [a.scores for a in answers if a.scores is not None]
    off_topic = [float(a.hit) for a in answers if a.scores is None]
    metrics = {"hit_rate": sum(a.hit for a in answers) / max(len(answers), 1),
               **{name: _mean([s[name] for s in on_topic])
                  for name in ("first", "mrr@10", "ndcg@10", "recall@10")}}
    if off_topic:
        metrics["off_topic_empty"] = _mean(off_topic)
    return metrics


def run_batch(run: EvaluationRun, job: Job | None,
               progress: Callable[[int], None] | None = None) -> None:
    questions = [BatchQuestion.of_json(q) for q in run.questions]
    filters = SearchFilters(tenant_id=run.tenant_id, dataset_ids=tuple(run.dataset_ids),
                            access=PLATFORM)
    try:
        index = serving_index()
        collection, embedder = index.collection, index.embedder.name
    except IndexNotReady:
        collection, embedder = "", ""  # nothing indexed yet: every answer is EMPTY
    recorder = _Recorder(run, job, len(questions), progress)
    answers: list[Answered] = []
    for question in questions:
        started = time.perf_counter()
        result = lookup_knowledge(filters=replace(filters, call=question.narrowed),
                                  query=question.query, overrides=run.settings)
        latency = (time.perf_counter() - started) * 1000
        if result.evidence_status == "UNAVAILABLE":
            raise RunUnavailable(f"question {question.id}: {result.error}")
        answer = Answered.of(question, result)
        answers.append(answer)
        recorder.add(query_id=question.id, query=question.query, expected=question.expected,
                     ranking=answer.ranking, result=result, hit=answer.hit,
                     reciprocal_rank=answer.reciprocal_rank, ndcg=answer.ndcg,
                     latency_ms=latency)
    recorder.finish(batch_metrics(answers), collection=collection, embedder=embedder)


def _run_suite(run: EvaluationRun, job: Job) -> None:
    folder = Path(django_settings.KB_EVAL_SUITES_DIR) / run.name
    suite = load_suite(folder)
    embedder = embedder_for(None)

    def progress(message: str) -> None:
        job_update(job, log=message)

    job_update(job, log=f"loading {len(suite.corpus)} documents with {embedder.name} "
                        "(what is indexed already is skipped)")
    index = eval_index_load(suite=suite, embedder=embedder, progress=progress)
    queries = judged_queries(suite, min(run.max_queries or MAX_SUITE_QUERIES,
                                        MAX_SUITE_QUERIES))
    recorder = _Recorder(run, job, len(queries))
    overrides = {**run.settings, **evaluation_overrides(SUITE_DEPTH, None)}
    sums = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    for score in suite_scores(suite=suite, index=index, embedder=embedder, queries=queries,
                              overrides=overrides):
        for name in sums:
            sums[name] += score.scores[name]
        recorder.add(query_id=score.query_id, query=suite.queries[score.query_id],
                     expected=sorted(suite.qrels[score.query_id]), ranking=score.ranking,
                     result=score.result, hit=score.scores["recall@10"] > 0,
                     reciprocal_rank=score.scores["mrr@10"], ndcg=score.scores["ndcg@10"],
                     latency_ms=score.latency_ms)
    count = max(len(queries), 1)
    recorder.finish({"hit_rate": recorder.hits / count,
                     **{k: v / count for k, v in sums.items()}},
                    collection=index.collection, embedder=embedder.name)


def evaluation_run_execute(*, run: EvaluationRun, job: Job) -> None:
    """Ask every query of the run and store the outcomes (the task's work)."""
    if run.kind == EvaluationRun.Kind.BATCH:
        run_batch(run, job)
    else:
        _run_suite(run, job)
