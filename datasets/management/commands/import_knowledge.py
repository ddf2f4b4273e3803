from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.importer import knowledge_import


class Command(BaseCommand):
    help = "Import a folder of markdown (default: knowledge_base/) into a dataset; skips README.md."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", default=str(settings.KB_KNOWLEDGE_DIR))
        parser.add_argument("--tenant", default="default")
        parser.add_argument("--dataset", default="knowledge-base")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["path"])
        if not root.is_dir():
            raise CommandError(f"{root} is not a directory")

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
