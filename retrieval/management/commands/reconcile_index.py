import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.index.operations import IndexOperationRunning
from retrieval.index.recovery import reconcile_serving
from retrieval.index.versions import IndexNotReady
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Compare the serving index with the database (chunks, content, activation, "
            "deleted documents) and report drift; --repair makes Milvus and the Chunk rows "
            "follow the database. Exits 1 when drift was found and not repaired.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repair", action="store_true")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = reconcile_serving(repair=options["repair"])
        except (IndexNotReady, IndexOperationRunning) as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report.summary(), ensure_ascii=False))
        else:
            self.stdout.write(f"{report.collection}: {report.documents} documents, "
                              f"{report.rows} rows")
            for kind, count in report.drift.items():
                examples = ", ".join(report.examples.get(kind, []))
                self.stdout.write(f"  {kind:<11} {count}" + (f"  e.g. {examples}" if count else ""))
            self.stdout.write("repaired" if report.repaired else
                              "clean" if report.clean else "drift found: run with --repair")
        if not report.clean and not report.repaired:
            raise CommandError("drift found")
