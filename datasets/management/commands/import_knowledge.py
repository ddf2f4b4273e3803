from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.documents.services import tenant_get_or_create
from datasets.ingestion.importer import IndexingState, Stored, documents_wait, knowledge_import
from datasets.jobs.progress import JOB_ID, job_create
from datasets.models import Document, Job
from datasets.tasks import import_knowledge_task
from kbplatform.progress import ProgressBar


class Command(BaseCommand):
    help = ("Import a folder of documents (default: knowledge_base/) into a dataset and wait "
            "until it is indexed; skips README.md.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", default=str(settings.KB_KNOWLEDGE_DIR))
        parser.add_argument("--tenant", default="default")
        parser.add_argument("--dataset", default="knowledge-base")
        parser.add_argument("--background", action="store_true",
                            help="enqueue the import on the indexing queue and print the job "
                                 "id (follow it with GET /api/jobs/ID or in the admin)")
        parser.add_argument("--timeout", type=float, default=3600,
                            help="seconds to wait for the indexing (default 3600)")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["path"])
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory")

        if options["background"]:
            job = job_create(kind=Job.Kind.IMPORT, task=import_knowledge_task.name,
                             args=(JOB_ID, str(root.resolve()), options["tenant"],
                                   options["dataset"]),
                             tenant_id=tenant_get_or_create(slug=options["tenant"]).pk)
            self.stdout.write(f"import queued as job {job.pk}")
            return

        progress = _Progress(lambda text: self.stdout.write(text, ending=""),
                             tty=self.stdout.isatty())
        summary = knowledge_import(root=root, tenant_slug=options["tenant"],
                                   dataset_name=options["dataset"], progress=progress.stored)
        state = documents_wait(summary.queued, timeout=options["timeout"],
                               progress=progress.indexed)
        failed = summary.failed + state.failed
        self.stdout.write(
            f"done: {summary.found} files, {state.done - len(state.failed)} indexed, "
            f"{summary.unchanged} unchanged, {len(failed)} failed, {state.chunks} chunks in "
            f"{options['tenant']}/{options['dataset']}")
        for path, error in failed:
            self.stderr.write(f"failed: {path}: {error}")
        if state.done < state.total:
            raise CommandError(f"{state.total - state.done} document(s) still indexing after "
                               f"{options['timeout']:.0f} s: is a worker running on the "
                               f"'{settings.KB_INDEXING_QUEUE}' queue?")
        if failed:
            raise CommandError(f"{len(failed)} file(s) could not be imported")


class _Progress:
    """One bar over the files: a file counts when it is indexed, unchanged or refused. Tasks
    in-process index each file as it is stored; a worker indexes them after."""

    def __init__(self, write: Callable[[str], object], *, tty: bool) -> None:
        self.write, self.tty = write, tty
        self.bar: ProgressBar | None = None
        self.settled = 0  # unchanged or refused: nothing to wait for
        self.chunks = 0  # of the files indexed in-process or unchanged

    def stored(self, step: Stored) -> None:
        if self.bar is None:
            self.bar = ProgressBar(self.write, tty=self.tty, total=step.total,
                                   unit="documents")
        if step.outcome != "queued" or step.document_id is None:
            self.settled += 1
        elif not settings.CELERY_TASK_ALWAYS_EAGER:
            return  # indexed by a worker: `indexed` follows it
        if step.document_id is not None:  # indexed in-process, or unchanged: its chunks
            self.chunks += Document.objects.filter(pk=step.document_id).values_list(
                "chunk_count", flat=True).first() or 0
        self.bar.update(step.number if settings.CELERY_TASK_ALWAYS_EAGER else self.settled,
                        f"{self.chunks} chunks", rate_of=(self.chunks, "chunks"))

    def indexed(self, state: IndexingState) -> None:
        if self.bar is None or settings.CELERY_TASK_ALWAYS_EAGER:
            return
        self.bar.update(self.settled + state.done, f"{self.chunks + state.chunks} chunks",
                        rate_of=(state.chunks, "chunks"))
