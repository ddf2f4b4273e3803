from typing import Any

from django.core.management.base import CommandError, CommandParser

from retrieval.index.models import IndexVersion
from retrieval.index.rebuild import DROP_WORD, index_version_drop
from retrieval.index.versions import IndexNotReady
from retrieval.management.store import StoreCommand


class Command(StoreCommand):
    help = "Drop the collection of a retired or failed index version (no rollback to it after)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("version", type=int, help="the index version id (see the admin)")
        parser.add_argument("--confirm", default="", help=f"must be {DROP_WORD}")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["confirm"] != DROP_WORD:
            raise CommandError(f"dropping deletes the collection for good: pass --confirm "
                               f"{DROP_WORD}")
        version = IndexVersion.objects.filter(pk=options["version"]).first()
        if version is None:
            raise CommandError(f"there is no index version {options['version']}")
        try:
            index_version_drop(version=version)
        except IndexNotReady as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"dropped {version.collection_name}")
