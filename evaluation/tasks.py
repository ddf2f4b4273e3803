"""The evaluation app's tasks: one evaluation run, and the regression gate of one held config
change, on the `celery` queue (they only read, but for a suite's own collection)."""

from __future__ import annotations

from celery import shared_task

from datasets.jobs.progress import job_claim, job_fail, job_update
from datasets.models import Job
from evaluation.calibration import CalibrationError, calibration_execute
from evaluation.gate import gate_check_execute
from evaluation.models import EvaluationRun
from evaluation.runs import RunUnavailable, evaluation_run_execute
from evaluation.suites import SuiteError
from retrieval.ragconfig.drafts import rag_config_draft_decide
from retrieval.ragconfig.models import RagConfigDraft


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


@shared_task(acks_late=True)
def gate_task(job_id: int, draft_id: int) -> None:
    """The regression gate of one held config change (evaluation/gate.py)."""
    job = job_claim(job_id)
    if job is None:
        return
    draft = RagConfigDraft.objects.filter(pk=draft_id).first()
    if draft is None:
        job_update(job, status=Job.Status.FAILED, error="the held change was deleted",
                   log="failed: the held change was deleted")
        return
    try:
        gate_check_execute(draft=draft, job=job)
    except Exception as exc:
        # Not measured is not passed: the change stays held, with the reason.
        public = ("a lookup answered UNAVAILABLE: a platform service failed; check the change "
                  "again once it is back" if isinstance(exc, RunUnavailable)
                  else "the gate failed on the platform's side")
        rag_config_draft_decide(draft_id=draft_id, passed=False,
                                verdict=f"the gate could not run: {public}")
        job_fail(job, exc, public=public)


@shared_task(acks_late=True)
def calibrate_task(job_id: int, config_id: int) -> None:
    """The relevance gate of one config calibrated on its gate sets (evaluation/calibration.py);
    a better pair is proposed through the gate."""
    job = job_claim(job_id)
    if job is None:
        return
    try:
        calibration_execute(job=job, config_id=config_id)
    except CalibrationError as exc:
        job_fail(job, exc, public=str(exc))
    except RunUnavailable as exc:
        job_fail(job, exc, public="a lookup answered UNAVAILABLE: a platform service failed; "
                                  "start the calibration again once it is back")
    except Exception as exc:
        job_fail(job, exc)
