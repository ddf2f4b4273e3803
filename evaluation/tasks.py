"""The evaluation app's task: one evaluation run, on the `celery` queue (it only reads, but for a
suite's own collection)."""

from __future__ import annotations

from celery import shared_task

from datasets.jobs import job_claim, job_fail, job_update
from datasets.models import Job
from evaluation.models import EvaluationRun
from evaluation.runs import RunUnavailable, evaluation_run_execute
from evaluation.suites import SuiteError


@shared_task(acks_late=True)
def evaluation_task(job_id: int, run_id: int) -> None:
    job = job_claim(job_id)
    if job is None:
        return
    run = EvaluationRun.objects.filter(pk=run_id).first()
    if run is None:
        job_update(job, status=Job.Status.FAILED, error="the run was deleted before it started",
                   log="failed: the run was deleted before it started")
        return
    try:
        evaluation_run_execute(run=run, job=job)
    except SuiteError as exc:
        job_fail(job, exc, public=str(exc))
    except RunUnavailable as exc:
        job_fail(job, exc, public="a lookup answered UNAVAILABLE: a platform service failed; "
                                  "start the run again once it is back")
    except Exception as exc:
        job_fail(job, exc)
