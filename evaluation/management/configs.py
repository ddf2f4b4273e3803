"""The config a command names by tenant slug and dataset name."""

from django.core.management.base import CommandError

from datasets.models import Dataset, Tenant
from retrieval.ragconfig.models import RagConfig


def config_named(tenant_slug: str, dataset_name: str | None) -> RagConfig:
    """The config of (tenant, dataset) as a command names it; exit code 2 when there is none."""
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise CommandError(f"no tenant {tenant_slug!r}", returncode=2)
    dataset = None
    if dataset_name is not None:
        dataset = Dataset.objects.filter(tenant=tenant, name=dataset_name).first()
        if dataset is None:
            raise CommandError(f"tenant {tenant_slug} has no dataset {dataset_name!r}",
                               returncode=2)
    config = (RagConfig.objects.select_related("tenant", "dataset")
              .filter(tenant=tenant, dataset=dataset).first())
    if config is None:
        raise CommandError(f"{tenant_slug}/{dataset_name or 'default'} has no config yet: "
                           "create it (as the config that serves) before gating a change",
                           returncode=2)
    return config
