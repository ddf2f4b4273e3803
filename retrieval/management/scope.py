"""The search scope of a command run for a tenant, as an API key of that tenant would have it."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.management.base import CommandError

from datasets.models import Dataset, Tenant
from retrieval.types import SearchFilters


def command_filters(*, tenant_slug: str, dataset_names: Sequence[str]) -> SearchFilters:
    """The tenant's active datasets, or only the named ones (each must exist and be active)."""
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
                         dataset_ids=tuple(datasets.values_list("pk", flat=True)))
