from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from datasets.documents.services import tenant_get_or_create
from datasets.models import ApiKey, Dataset
from datasets.tenancy.keys import api_key_create


class Command(BaseCommand):
    help = "Create an API key; the key is printed once, at the end of the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug (created if missing)")
        parser.add_argument("--role", choices=[r.value for r in ApiKey.Role], default="tool")
        parser.add_argument("--dataset", action="append", default=[],
                            help="limit the key to this dataset (repeatable)")
        parser.add_argument("--name", default="")
        parser.add_argument("--acts-for-people", action="store_true",
                            help="its calls may name the person they are made for "
                                 "(on_behalf_of) and read the documents restricted to them")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_get_or_create(slug=options["tenant"])
        datasets = []
        for name in options["dataset"]:
            dataset = Dataset.objects.filter(tenant=tenant, name=name).first()
            if dataset is None:
                raise CommandError(f"tenant {tenant.slug!r} has no dataset {name!r}")
            datasets.append(dataset)
        key, plaintext = api_key_create(tenant=tenant, role=options["role"],
                                        name=options["name"], datasets=datasets,
                                        acts_for_people=options["acts_for_people"])
        scope = ", ".join(d.name for d in datasets) or "all datasets"
        people = ", acts for people" if key.acts_for_people else ""
        self.stdout.write(f"created {key.role} key {key.prefix} for tenant {tenant.slug} "
                          f"({scope}{people})")
        self.stdout.write("store it now, it is not shown again: " + plaintext)
