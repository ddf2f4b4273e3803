"""What a restarted worker picks up: documents whose last change Milvus has not followed, and
index operations that a dead process left half done.

It runs when a worker starts and then every KB_RECOVERY_INTERVAL_SECONDS (kbplatform/celery.py),
so a lost message or a killed worker delays a change, never loses it. Running it twice is
harmless: a sync is idempotent and a job runs only from `queued`. An evaluation run or an
import whose process died is failed (started again by hand, not re-run behind the operator's
back); an indexing job whose task is gone ends as its document is: a job always ends.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from datasets.documents.services import documents_sync_due
from datasets.jobs.progress import GENERIC_ERROR, GOING, job_indexed, job_update
from datasets.models import Document, Job
from kbplatform.tasks import send
from retrieval.index.models import IndexVersion
from retrieval.index.operations import INDEX_TASKS, IndexOperationRunning
from retrieval.index.rebuild import abandon, index_lock
from retrieval.index.reconcile import ReconcileReport, reconcile
from retrieval.index.versions import serving_index
from retrieval.index.writer_lock import WriterBusy

logger = logging.getLogger(__name__)



def recover(*, grace_seconds: float | None = None) -> dict[str, int]:
    grace = settings.KB_RECOVERY_GRACE_SECONDS if grace_seconds is None else grace_seconds
    restarted = _interrupted_operations()
    _lost_runs()
    due = documents_sync_due(older_than_seconds=grace)
    for pk in due:
        job = (Job.objects.filter(document_id=pk, kind=Job.Kind.INDEX_DOCUMENT,
                                  status__in=GOING)
               .order_by("-pk").first())
        send("retrieval.tasks.sync_document", pk, job.pk if job else None)
    ended = _lost_index_jobs(grace)
    if due or restarted or ended:
        logger.warning("recovery: %d document(s) re-synced, %d index operation(s) restarted, "
                       "%d job(s) of lost tasks ended", len(due), restarted, ended)
    return {"documents": len(due), "operations": restarted, "jobs": ended}


def _lost_index_jobs(grace_seconds: float) -> int:
    """An indexing job still going, silent for the grace, whose document Milvus follows
    already (another batch wrote it, or a later sync), or that is gone: its task failed
    before it could end it, or was lost. Nothing is left for it to do; it ends as the
    document is (a document still due is re-synced above, with its latest job)."""
    stale = timezone.now() - timedelta(seconds=grace_seconds)
    jobs = (Job.objects.filter(kind=Job.Kind.INDEX_DOCUMENT, status__in=GOING,
                               updated_at__lte=stale)
            .filter(Q(document__isnull=True) | Q(document__synced_revision=F("document__revision")))
            .select_related("document"))
    for job in jobs:
        _end_as_its_document(job, job.document)
    return len(jobs)


def _end_as_its_document(job: Job, document: Document | None) -> None:
    if document is None or document.deleted or document.status == Document.Status.READY:
        job_indexed(job, document, note=" (written by another sync)")
    else:
        job_update(job, status=Job.Status.FAILED, error=document.error or GENERIC_ERROR,
                   log="failed: its task stopped before the end")


# Jobs that write their progress often while they run (an evaluation's queries, an import's
# files), and what their owner reads when one fell silent.
SILENT = {Job.Kind.EVALUATE: ("its worker stopped during the run; start the run again",
                              "failed: its worker stopped during the run"),
          Job.Kind.IMPORT: ("its process stopped during the import; import again",
                            "failed: its process stopped during the import"),
          Job.Kind.SYNC_SOURCE: ("its worker stopped during the sync; sync again",
                                 "failed: its worker stopped during the sync"),
          Job.Kind.GATE: ("its worker stopped during the gate; check the held change again",
                          "failed: its worker stopped during the gate"),
          Job.Kind.CALIBRATE: ("its worker stopped during the calibration; start it again",
                               "failed: its worker stopped during the calibration")}


def _lost_runs() -> None:
    """A running job of SILENT silent for longer than KB_EVALUATION_STALE_SECONDS lost its
    process (its message is dropped when redelivered: the job is not queued any more). It
    fails, so that its page ends and it can be started again."""
    stale = timezone.now() - timedelta(seconds=settings.KB_EVALUATION_STALE_SECONDS)
    for job in Job.objects.filter(kind__in=list(SILENT), status=Job.Status.RUNNING,
                                  updated_at__lt=stale):
        error, log = SILENT[Job.Kind(job.kind)]
        job_update(job, status=Job.Status.FAILED, error=error, log=log)


def _interrupted_operations() -> int:
    """With nobody holding the index lock, a running index job has lost its process."""
    try:
        with index_lock():
            for version in IndexVersion.objects.filter(status=IndexVersion.Status.BUILDING):
                abandon(version, RuntimeError("interrupted: its process died"))
            jobs = list(Job.objects.filter(kind__in=list(INDEX_TASKS),
                                           status=Job.Status.RUNNING))
            for job in jobs:
                job_update(job, status=Job.Status.QUEUED, done=0,
                           log="its worker died; queued again")
                send(INDEX_TASKS[Job.Kind(job.kind)], job.pk, *_arguments(job))
            return len(jobs)
    except WriterBusy:
        return 0  # an index operation is running in a live process


def _arguments(job: Job) -> tuple[object, ...]:
    if job.kind == Job.Kind.ROLLBACK:
        return (job.detail.get("version_id"),)
    if job.kind == Job.Kind.RECONCILE:
        return (bool(job.detail.get("repair")),)
    return ()


def reconcile_serving(*, repair: bool) -> ReconcileReport:
    """Reconcile the serving index; a repair first re-sends what is due, and never runs
    beside a rebuild or rollback (IndexOperationRunning)."""
    version = serving_index().version
    if not repair:
        return reconcile(version=version)
    try:
        with index_lock():
            recover(grace_seconds=0)
            return reconcile(version=version, repair=True)
    except WriterBusy as exc:
        raise IndexOperationRunning("a rebuild or rollback is running; try again when it is "
                                    "done") from exc
