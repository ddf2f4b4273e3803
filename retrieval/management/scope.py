"""The search scope of a command run for a tenant, as an API key of that tenant would have it."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError, CommandParser

from datasets.models import Dataset, Tenant
from datasets.tenancy.permissions import PLATFORM
from retrieval.ragconfig.filters import filters_from, undeclared_refusal
from retrieval.types import CallFilters, SearchFilters


def add_filters_argument(parser: CommandParser) -> None:
    parser.add_argument("--filters", default="", metavar="JSON",
                        help="narrow every lookup as a call's `filters` do (docs/api.md), e.g. "
                             "'{\"domain\": [\"database\"]}'")


def command_filters(*, tenant_slug: str, dataset_names: Sequence[str],
                    narrowed: str = "") -> SearchFilters:
    """The tenant's active datasets, or only the named ones (each must exist and be active),
    narrowed by `narrowed`: a call's `filters` as JSON ("" for none)."""
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise CommandError(f"no tenant {tenant_slug!r}")
    datasets = Dataset.objects.filter(tenant=tenant, activated=True)
    if dataset_names:
        datasets = datasets.filter(name__in=dataset_names)
        missing = set(dataset_names) - set(datasets.values_list("name", flat=True))
        if missing:
            raise CommandError(f"tenant {tenant.slug} has no active dataset {sorted(missing)}")
    return SearchFilters(tenant_id=tenant.pk,
                         dataset_ids=tuple(datasets.values_list("pk", flat=True)),
                         call=_call_filters(narrowed, tenant), access=PLATFORM)


def _call_filters(text: str, tenant: Tenant) -> CallFilters:
    try:
        filters = filters_from(text)
    except ValueError as exc:
        raise CommandError(f"--filters: {exc}") from exc
    refusal = undeclared_refusal(filters, tenant.filterable_fields)
    if refusal:
        raise CommandError(f"--filters: {refusal}")
    return filters
