import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.models import Job, Source
from datasets.sources.services import SyncRunning, source_sync_request

TERMINAL = (Job.Status.SUCCEEDED, Job.Status.FAILED)


class Command(BaseCommand):
    help = ("Sync a source now (a job on the indexing queue, as the API's and the admin's "
            "Sync now) and wait until it ends; prints its log.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source_id", type=int)
        parser.add_argument("--background", action="store_true",
                            help="enqueue the sync and print the job id")
        parser.add_argument("--timeout", type=float, default=3600,
                            help="seconds to wait for the sync (default 3600)")

    def handle(self, *args: Any, **options: Any) -> None:
        source = Source.objects.filter(pk=options["source_id"]).first()
        if source is None:
            raise CommandError(f"source {options['source_id']} does not exist")
        try:
            job = source_sync_request(source=source)
        except SyncRunning as exc:
            raise CommandError(str(exc.detail)) from exc
        self.stdout.write(f"sync of {source} queued as job {job.pk}")
        if options["background"]:
            return
        deadline = time.monotonic() + options["timeout"]
        job.refresh_from_db()
        while job.status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.5)  # run by a worker (in-process tasks: it has run already)
            job.refresh_from_db()
        for line in job.log:
            self.stdout.write(f"{line['at']} {line['message']}")
        if job.status not in TERMINAL:
            raise CommandError(f"job {job.pk} has not ended after {options['timeout']:.0f} s: "
                               "is a worker running on the indexing queue?")
        if job.status == Job.Status.FAILED:
            raise CommandError(f"the sync failed: {job.error}")
