from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.index.operations import IndexOperationRunning
from retrieval.index.rebuild import CONFIRM_WORD, rebuild_hybrid_knowledge
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Re-index every document into a new collection and serve it. Lookups keep working "
            "meanwhile; a failure leaves the old index serving; the old one is kept for "
            "`rollback_index` until `drop_index_version` drops it.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--confirm", default="", help=f"must be {CONFIRM_WORD}")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["confirm"] != CONFIRM_WORD:
            raise CommandError(f"a rebuild re-indexes everything: pass --confirm {CONFIRM_WORD}")

        def progress(number: int, total: int, path: str) -> None:
            self.stdout.write(f"[{number}/{total}] {path}")

        try:
            version = rebuild_hybrid_knowledge(progress=progress)
        except IndexOperationRunning as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"rebuilt: {version.collection_name} now serves "
                          f"({version.embedder}, {version.dimension}d)")
