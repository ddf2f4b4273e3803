from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.index.models import IndexVersion
from retrieval.index.operations import IndexOperationRunning
from retrieval.index.rebuild import ROLLBACK_WORD, index_rollback
from retrieval.index.versions import IndexNotReady
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = ("Serve a retired index version again (default: the one serving before the last "
            "switch), after bringing it up to date with the database.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", type=int, metavar="VERSION_ID",
                            help="the index version id (see the admin); default: the last retired")
        parser.add_argument("--confirm", default="", help=f"must be {ROLLBACK_WORD}")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["confirm"] != ROLLBACK_WORD:
            raise CommandError(f"a rollback switches every tenant's index: pass --confirm "
                               f"{ROLLBACK_WORD}")
        target = None
        if options["to"] is not None:
            target = IndexVersion.objects.filter(pk=options["to"]).first()
            if target is None:
                raise CommandError(f"there is no index version {options['to']}")
        try:
            version = index_rollback(to=target)
        except (IndexNotReady, IndexOperationRunning) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"rolled back: {version.collection_name} now serves "
                          f"({version.embedder}, {version.dimension}d)")
