import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.models import Dataset, Tenant
from retrieval.lookup_service import lookup_knowledge
from retrieval.project import RagResultProjector
from retrieval.types import SearchFilters


class Command(BaseCommand):
    help = "Run lookup_knowledge as an agent would and print the agent-facing JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--dataset", action="append", default=[])
        parser.add_argument("--mode", choices=["dense", "hybrid", "bm25"])
        parser.add_argument("--trace", action="store_true",
                            help="print the internal LookupResult (scores, traces) instead")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        datasets = Dataset.objects.filter(tenant=tenant, activated=True)
        if options["dataset"]:
            datasets = datasets.filter(name__in=options["dataset"])
            missing = set(options["dataset"]) - set(datasets.values_list("name", flat=True))
            if missing:
                raise CommandError(f"tenant {tenant.slug} has no active dataset {sorted(missing)}")
        filters = SearchFilters(tenant_id=tenant.pk,
                                dataset_ids=tuple(datasets.values_list("pk", flat=True)))
        result = lookup_knowledge(filters=filters, query=options["query"].strip(),
                                  mode=options["mode"])
        body = asdict(result) if options["trace"] else RagResultProjector().project(result)
        self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2, default=str))
        if result.error:
            raise CommandError(result.error)
