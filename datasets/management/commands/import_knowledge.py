from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.importer import knowledge_import
from datasets.models import Job
from datasets.services import tenant_get_or_create
from datasets.tasks import import_knowledge_task


class Command(BaseCommand):
    help = "Import a folder of markdown (default: knowledge_base/) into a dataset; skips README.md."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", default=str(settings.KB_KNOWLEDGE_DIR))
        parser.add_argument("--tenant", default="default")
        parser.add_argument("--dataset", default="knowledge-base")
        parser.add_argument("--background", action="store_true",
                            help="enqueue the import on the indexing queue and print the job "
                                 "id (follow it with GET /api/jobs/ID or in the admin)")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["path"])
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory")

        if options["background"]:
            job = Job.objects.create(tenant=tenant_get_or_create(slug=options["tenant"]),
                                     kind=Job.Kind.IMPORT)
            import_knowledge_task.delay(job.pk, str(root.resolve()), options["tenant"],
                                        options["dataset"])
            self.stdout.write(f"import queued as job {job.pk}")
            return

        def progress(number: int, total: int, path: str, outcome: str) -> None:
            self.stdout.write(f"[{number}/{total}] {path}: {outcome}")

        summary = knowledge_import(root=root, tenant_slug=options["tenant"],
                                   dataset_name=options["dataset"], progress=progress)
        self.stdout.write(
            f"done: {summary.found} files, {summary.indexed} indexed, {summary.unchanged} "
            f"unchanged, {len(summary.failed)} failed, {summary.chunks} chunks in "
            f"{options['tenant']}/{options['dataset']}")
        for path, error in summary.failed:
            self.stderr.write(f"failed: {path}: {error}")
        if summary.failed:
            raise CommandError(f"{len(summary.failed)} file(s) could not be imported")
