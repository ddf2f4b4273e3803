"""A job's progress as its owner and the operators read it (datasets/jobs/progress.py): lines
appended to the stored log and the last LOG_LINES kept, only the fields a writer changed
written, one delivery of a job's message running it, a failure worded for the owner with the
exception kept for operators."""

from __future__ import annotations

import logging

import pytest

from datasets.jobs.progress import (
    GENERIC_ERROR,
    LOG_LINES,
    job_claim,
    job_fail,
    job_update,
)
from datasets.models import Job

pytestmark = pytest.mark.django_db


def _job() -> Job:
    return Job.objects.create(kind=Job.Kind.INDEX_DOCUMENT)


def test_a_log_keeps_its_last_lines_and_a_writer_only_its_fields() -> None:
    job = _job()
    other = Job.objects.get(pk=job.pk)  # another process holding the same job
    job_update(other, total=10)
    for n in range(LOG_LINES + 5):
        job_update(job, done=n, log=f"line {n}", detail={"at": n})
    job_update(other, log="from the other process")
    job.refresh_from_db()
    assert (job.done, job.total, job.detail) == (LOG_LINES + 4, 10, {"at": LOG_LINES + 4})
    assert len(job.log) == LOG_LINES and job.log[0]["message"] == "line 6"
    assert job.log[-1]["message"] == "from the other process"
    job_update(job, log="x" * 10_000)
    job.refresh_from_db()
    assert len(job.log[-1]["message"]) == 500


def test_one_delivery_runs_a_job() -> None:
    job = _job()
    assert job_claim(job.pk) is not None
    assert job_claim(job.pk) is None  # the message delivered again does nothing
    assert Job.objects.get(pk=job.pk).status == Job.Status.RUNNING


def test_a_failure_tells_the_owner_what_is_theirs_and_the_operators_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    job = _job()
    job_fail(job, RuntimeError("password=hunter2 at /srv/kb"), subject="document 7")
    job.refresh_from_db()
    assert (job.status, job.error) == (Job.Status.FAILED, GENERIC_ERROR)
    assert "hunter2" in job.error_detail
    assert not any("hunter2" in line["message"] for line in job.log)
    with caplog.at_level(logging.ERROR, logger="datasets.jobs.progress"):
        job_fail(None, ValueError("no job"), subject="source 3")  # work without a job
    assert "source 3 failed: ValueError: no job" in caplog.text
