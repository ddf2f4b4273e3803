"""Evaluation runs in the admin: a batch hit test of pasted or uploaded questions and a BEIR
suite, each run as a job against a config version; the run's figures, misses with their traces,
downloads, the chart over versions, and two runs compared query by query."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from datasets.documents.services import tenant_fields_declare
from datasets.models import Job
from evaluation.models import EvaluationQuery, EvaluationRun
from retrieval.models import RagConfig
from retrieval.ragconfig.services import rag_config_update
from tests.conftest import wait_until
from tests.retrieval.conftest import Imported

pytestmark = pytest.mark.django_db

ADD = "admin:evaluation_evaluationrun_add"
QUESTIONS = "\n".join(json.dumps(q) for q in [
    {"id": "nginx", "query": "nginx 502 bad gateway upstream connection refused",
     "expected": "nginx.md"},
    {"id": "lag", "query": "Kafka consumer lag alerting", "expected": ["kafka.md"]},
    {"id": "wrong", "query": "Kafka consumer lag measuring", "expected": "zebra.md"},
    {"id": "off", "query": "quarterly sales tax filing deadline", "expected": None},
])


def start_batch(client: Client, applied: Any, tenant: Any, **fields: Any) -> Any:
    with applied():  # the worker's part, in this process
        return client.post(reverse(ADD), {"tenant": tenant.pk, "questions_text": QUESTIONS,
                                          **fields})


def the_run(response: Any) -> EvaluationRun:
    assert response.status_code == 302, response.content.decode()[:2000]
    run = EvaluationRun.objects.latest("pk")
    assert response["Location"] == reverse("admin:evaluation_evaluationrun_change",
                                           args=[run.pk])
    return run


def test_a_batch_run_scores_every_question_and_keeps_the_misses_traces(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    listed = admin_client.get(reverse("admin:evaluation_evaluationrun_changelist"))
    assert 'id="new-batch-link"' in listed.content.decode()  # reachable from the runs' list

    run = the_run(start_batch(admin_client, applied, acme.tenant))

    assert run.job.status == Job.Status.SUCCEEDED and run.job.done == run.job.total == 4
    assert (run.queries, run.kind, run.name) == (4, "batch", "pasted questions")
    assert run.config_version is None and run.settings["return_n"] == 5  # built-in defaults
    assert run.embedder and run.collection  # the serving index it searched
    results = {r.query_id: r for r in run.results.all()}
    assert [results[q].hit for q in ("nginx", "lag", "wrong", "off")] == [True, True, False, True]
    assert results["nginx"].ranking[0] == "nginx.md" and results["nginx"].reciprocal_rank == 1
    assert results["off"].status == "EMPTY" and results["off"].expected == []
    assert results["wrong"].trace and not results["nginx"].trace  # misses keep their trace
    assert run.metrics["hit_rate"] == 0.75 and run.metrics["off_topic_empty"] == 1
    assert run.metrics["mrr@10"] == pytest.approx(2 / 3, abs=1e-3)

    page = admin_client.get(reverse("admin:evaluation_evaluationrun_change", args=[run.pk]))
    html = page.content.decode()
    assert 'data-metric="hit_rate">0.750<' in html and "Misses (1)" in html
    miss = admin_client.get(reverse("admin:evaluation_evaluationrun_query",
                                    args=[run.pk, results["wrong"].position])).content.decode()
    assert 'id="retrieval-stages"' in miss and "kafka.md" in miss

    download = reverse("admin:evaluation_evaluationrun_download", args=[run.pk])
    rows = list(csv.DictReader(io.StringIO(b"".join(
        admin_client.get(download, {"format": "csv"}).streaming_content).decode())))
    assert [r["query_id"] for r in rows] == ["nginx", "lag", "wrong", "off"]
    assert rows[2]["hit"] == "0" and rows[0]["ranking"].startswith("nginx.md")
    exported = json.loads(b"".join(admin_client.get(download).streaming_content))
    assert exported["metrics"] == run.metrics and len(exported["results"]) == 4


def test_runs_of_two_versions_are_charted_and_compared_query_by_query(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    # Version 1 searches no dataset at all (kb_scope matches none): every answer is EMPTY.
    config = rag_config_update(config=None, tenant=acme.tenant, values={"kb_scope": "none"},
                               changed_by="a")
    rag_config_update(config=config, tenant=acme.tenant, values={"kb_scope": ""},
                      changed_by="b")
    first = the_run(start_batch(admin_client, applied, acme.tenant, name="ops",
                                version=config.changes.get(version=1).pk))
    second = the_run(start_batch(admin_client, applied, acme.tenant, name="ops"))
    assert (first.config_version, second.config_version) == (1, 2)
    assert first.metrics["hit_rate"] == 0.25  # the off-topic question only

    listed = admin_client.get(reverse("admin:evaluation_evaluationrun_changelist"))
    html = listed.content.decode()
    assert html.count('class="runs-series"') == 1 and ">v1</text>" in html and ">v2</text>" in html

    response = admin_client.post(reverse("admin:evaluation_evaluationrun_changelist"), {
        "action": "compare", "_selected_action": [first.pk, second.pk]})
    compared = admin_client.get(response["Location"]).content.decode()
    assert compared.count('data-change="now a hit"') == 2  # nginx, lag
    assert 'data-change="same"' not in compared  # the changed ones only, by default
    everything = admin_client.get(response["Location"] + "&all=1").content.decode()
    assert everything.count('class="compare-row"') == 4


def test_each_question_narrows_its_lookup_by_its_own_filters(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    tenant_fields_declare(tenant=acme.tenant, names=["team"])
    narrowed = "\n".join(json.dumps(q) for q in [
        # Narrowed away from its runbook: a miss; narrowed to it: a hit.
        {"id": "away", "query": "nginx 502 bad gateway upstream connection refused",
         "expected": "nginx.md", "filters": {"domain": ["messaging"]}},
        {"id": "to", "query": "nginx 502 bad gateway upstream connection refused",
         "expected": "nginx.md", "filters": {"fields": {"team": ["web-platform"]}}},
        {"id": "plain", "query": "Kafka consumer lag alerting", "expected": "kafka.md"}])
    with applied():
        run = the_run(admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                                       "questions_text": narrowed}))
    results = {r.query_id: r for r in run.results.all()}
    assert [results[q].hit for q in ("away", "to", "plain")] == [False, True, True]
    assert run.questions[1]["filters"] == {"fields": {"team": ["web-platform"]}}
    # A field the tenant does not declare is refused before anything runs.
    tenant_fields_declare(tenant=acme.tenant, names=[])
    page = admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                            "questions_text": narrowed})
    assert page.status_code == 200
    assert "question to: not a filterable field of this tenant" in page.content.decode()


def test_a_bad_question_set_or_version_is_refused_with_the_reason(
        admin_client: Client, acme: Imported) -> None:
    def refused(**fields: Any) -> str:
        response = admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk, **fields})
        assert response.status_code == 200
        return response.content.decode()

    assert "line 2: not JSON" in refused(questions_text='{"query": "a"}\n{oops\n')
    assert "one of the three" in refused(
        questions_text=QUESTIONS, questions_file=SimpleUploadedFile("q.csv", b"query\nhello\n"))
    # The versions are offered, not typed: one that does not exist is no choice.
    assert "Select a valid choice" in refused(questions_text=QUESTIONS, version=7)
    assert not EvaluationRun.objects.exists()


def test_an_uploaded_csv_runs_under_its_file_name(admin_client: Client, acme: Imported,
                                                  applied: Any) -> None:
    upload = SimpleUploadedFile("ops-questions.csv",
                                b"id,query,expected\nk,Kafka consumer lag alerting,kafka.md\n")
    with applied():
        response = admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                                    "questions_file": upload})
    run = the_run(response)
    assert run.name == "ops-questions.csv" and run.metrics["hit_rate"] == 1


def test_a_lookup_that_fails_fails_the_run_with_a_reason(admin_client: Client, acme: Imported,
                                                         applied: Any) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={}, changed_by="a")
    # A hand edit the converter refuses: every lookup of the tenant answers UNAVAILABLE.
    RagConfig.objects.filter(pk=config.pk).update(max_context_chars=300, max_excerpt_chars=900)
    refused = start_batch(admin_client, applied, acme.tenant)  # the serving config
    assert "does not validate: max_excerpt_chars" in refused.content.decode()
    run = the_run(start_batch(admin_client, applied, acme.tenant,
                              version=config.changes.get(version=1).pk))
    run.job.refresh_from_db()
    assert run.job.status == Job.Status.FAILED and "UNAVAILABLE" in run.job.error
    assert run.finished_at is None and "max_excerpt_chars" in run.job.error_detail


def beir_suite(root: Path) -> Path:
    folder = root / "tiny"
    (folder / "qrels").mkdir(parents=True)
    corpus = {"d1": ("Zebra stripes", "Zebras have black and white stripes for cooling."),
              "d2": ("Nginx 502", "A 502 bad gateway means the upstream refused the "
                                  "connection."),
              "d3": ("Kafka lag", "Consumer lag grows when consumers fall behind producers.")}
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in corpus.items()))
    queries = {"q1": "why do zebras have stripes", "q2": "nginx upstream 502 bad gateway",
               "q3": "kafka consumers falling behind"}
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": k, "text": t}) + "\n" for k, t in queries.items()))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    return root


def test_a_suite_run_ranks_the_suite_with_the_versions_settings(
        admin_client: Client, client: Client, acme: Imported, applied: Any, settings: Any,
        tmp_path: Path) -> None:
    settings.KB_EVAL_SUITES_DIR = beir_suite(tmp_path / "suites")
    form = admin_client.get(reverse(ADD), {"kind": "suite"}).content.decode()
    assert '<option value="tiny">' in form
    with applied():
        response = admin_client.post(reverse(ADD) + "?kind=suite",
                                     {"tenant": acme.tenant.pk, "suite": "tiny"})
    run = the_run(response)
    assert run.job.status == Job.Status.SUCCEEDED, run.job.error_detail
    assert (run.kind, run.name, run.queries) == ("suite", "tiny", 3)
    assert run.collection.startswith("eval_tiny_") and run.settings["return_n"] == 5
    assert run.metrics["ndcg@10"] > 0.9 and run.metrics["hit_rate"] == 1
    assert EvaluationQuery.objects.get(run=run, query_id="q2").ranking[0] == "d2"

    # Suites load a corpus into a collection of their own: the platform's operators only.
    staff = User.objects.create_user("staffer", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=[
        "add_evaluationrun", "view_evaluationrun"]))
    acme.tenant.staff.add(staff)
    client.force_login(staff)
    assert client.get(reverse(ADD)).status_code == 200  # a batch, yes
    assert client.get(reverse(ADD), {"kind": "suite"}).status_code == 403


@pytest.mark.integration  # a real worker runs the job; the page polls its progress
@pytest.mark.django_db(transaction=True)
def test_a_batch_run_on_the_worker_reports_its_progress_to_the_end(
        celery_worker: Any, admin_user: Any, acme: Imported) -> None:
    client = Client()
    client.force_login(admin_user)
    run = the_run(client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                             "questions_text": QUESTIONS}))
    progress = reverse("admin:evaluation_evaluationrun_progress", args=[run.pk])

    def finished() -> bool:
        return bool(client.get(progress).json()["finished"])

    wait_until(finished, timeout=120, what="the run's job")
    shown = client.get(progress).json()
    assert shown["status"] == "succeeded", shown
    assert shown["done"] == shown["total"] == 4
    assert shown["log"][-1]["message"].startswith("done: hit_rate 0.750")


def test_one_run_per_tenant_at_a_time_and_a_going_run_stays(admin_client: Client,
                                                             acme: Imported) -> None:
    # Without a worker here, the first run stays queued.
    first = the_run(admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                                     "questions_text": QUESTIONS}))
    refused = admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                               "questions_text": QUESTIONS})
    assert refused.status_code == 200
    assert f"run {first.pk} of this tenant is still going" in refused.content.decode()
    admin_client.post(reverse("admin:evaluation_evaluationrun_changelist"), {
        "action": "delete_selected", "_selected_action": [first.pk], "post": "yes"})
    assert EvaluationRun.objects.filter(pk=first.pk).exists()


def test_a_run_whose_worker_died_fails_at_the_next_recovery(acme: Imported, admin_client: Client,
                                                            settings: Any) -> None:
    from django.utils import timezone

    from retrieval.index.recovery import recover

    run = the_run(admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                                   "questions_text": QUESTIONS}))
    Job.objects.filter(pk=run.job.pk).update(status=Job.Status.RUNNING)
    recover()
    assert Job.objects.get(pk=run.job.pk).status == Job.Status.RUNNING  # still writing
    silent = timedelta(seconds=settings.KB_EVALUATION_STALE_SECONDS + 1)
    Job.objects.filter(pk=run.job.pk).update(updated_at=timezone.now() - silent)
    recover()
    job = Job.objects.get(pk=run.job.pk)
    assert job.status == Job.Status.FAILED and "worker stopped" in job.error


def test_runs_of_different_sets_pair_only_the_questions_both_asked(
        admin_client: Client, acme: Imported, applied: Any) -> None:
    def run(text: str) -> EvaluationRun:
        with applied():
            return the_run(admin_client.post(reverse(ADD), {"tenant": acme.tenant.pk,
                                                            "questions_text": text}))

    first = run('{"query": "Kafka consumer lag alerting", "expected": "kafka.md"}\n')
    second = run('{"query": "nginx 502 bad gateway", "expected": "nginx.md"}\n')  # also q1
    page = admin_client.get(reverse("admin:evaluation_evaluationrun_compare"),
                            {"a": first.pk, "b": second.pk, "all": "1"}).content.decode()
    assert page.count('class="compare-row"') == 2 and "not asked" in page
