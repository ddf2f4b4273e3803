import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from retrieval.lookup.project import RagToolResult
from retrieval.lookup.service import lookup_knowledge
from retrieval.management.scope import add_filters_argument, command_filters
from retrieval.ragconfig.config import MODE_OVERRIDES


class Command(BaseCommand):
    help = "Run lookup_knowledge as an agent would and print the agent-facing JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--dataset", action="append", default=[])
        parser.add_argument("--mode", choices=list(MODE_OVERRIDES),
                            help="the retrievers and how they run (default: the RagConfig's)")
        parser.add_argument("--trace", action="store_true",
                            help="print the internal LookupResult (scores, traces) instead")
        add_filters_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        filters = command_filters(tenant_slug=options["tenant"],
                                  dataset_names=options["dataset"], narrowed=options["filters"])
        result = lookup_knowledge(filters=filters, query=options["query"].strip(),
                                  mode=options["mode"])
        body = asdict(result) if options["trace"] else RagToolResult.of(result).as_dict()
        self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2, default=str))
        if result.error:
            raise CommandError(result.error)
