"""Writes of RagConfig (validated, versioned, with a change record) and its A/B tests. A change
an operator makes goes through the regression gate first (ragconfig/drafts.py)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction
from django.utils import timezone

from datasets.models import Dataset, Tenant
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.models import ConfigExperiment, RagConfig, RagConfigChange
from retrieval.ragconfig.selectors import checked_settings
from retrieval.ragconfig.settings import RagSettings


def rag_config_update(*, config: RagConfig | None, tenant: Tenant, dataset: Dataset | None = None,
                      values: Mapping[str, object], changed_by: str, note: str = ""
                      ) -> RagConfig:
    """Create or update the config of (tenant, dataset); `values` may be partial.

    With `config=None` the existing row of (tenant, dataset) is updated, or one is created
    from the built-in defaults. An unchanged result writes nothing and keeps the version.
    Raises RagConfigError (field → message) on invalid values. `note` goes to the change
    record (a rollback says so).
    """
    if dataset is not None and dataset.tenant_id != tenant.pk:
        raise RagConfigError({"dataset": "belongs to another tenant"})
    if config is not None and (config.tenant_id != tenant.pk
                               or config.dataset_id != (dataset.pk if dataset else None)):
        raise RagConfigError({"dataset": "does not match the config being edited"})

    with transaction.atomic():
        # Locking the tenant row serialises every config write of the tenant; this is what
        # keeps "one default per tenant" (dataset IS NULL) without a partial unique index.
        Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
        rows = RagConfig.objects.select_for_update()
        current = (rows.filter(pk=config.pk) if config is not None
                   else rows.filter(tenant=tenant, dataset=dataset)).first()
        if config is not None and current is None:
            raise RagConfig.DoesNotExist(f"RagConfig {config.pk} was deleted")

        # The stored row, not the caller's in-memory object (the admin has already
        # assigned the new values to it), is what "before" means.
        base = current.to_settings() if current is not None else RagSettings()
        settings = checked_settings(tenant=tenant, values=values, base=base)
        before = RagConfigConverter.to_dict(base) if current is not None else None
        after = RagConfigConverter.to_dict(settings)
        if current is not None and before == after:
            return current

        row = current or RagConfig(tenant=tenant, dataset=dataset)
        for name, value in after.items():
            setattr(row, name, value)
        row.version += 1
        row.updated_by = changed_by
        row.save()
        RagConfigChange.objects.create(config=row, version=row.version, changed_by=changed_by,
                                       before=before, after=after, note=note)
    return row


def experiment_start(*, change: RagConfigChange, share: int, started_by: str
                     ) -> ConfigExperiment:
    """An A/B test of the change's config: `share` per cent of its lookups run with version
    `change`. Refused (RagConfigError) while another test runs on it, for the version that
    serves, for a share outside 1–99 and for a version today's rules refuse."""
    errors: dict[str, str] = {}
    if not 1 <= share <= 99:
        errors["share"] = "a share of lookups between 1 and 99 per cent"
    config = change.config
    with transaction.atomic():
        Tenant.objects.select_for_update().only("pk").get(pk=config.tenant_id)
        config = RagConfig.objects.select_related("experiment").get(pk=config.pk)
        if config.experiment is not None:
            errors["experiment"] = (f"A/B test {config.experiment.pk} runs on this config: "
                                    "stop it first")
        if change.version == config.version:
            errors["version"] = f"version {change.version} is the one serving"
        try:
            checked_settings(tenant=config.tenant, values=change.settings())
        except RagConfigError as exc:
            errors.update(exc.errors)
        if errors:
            raise RagConfigError(errors)
        experiment = ConfigExperiment.objects.create(config=config, candidate=change,
                                                     share=share, started_by=started_by)
        RagConfig.objects.filter(pk=config.pk).update(experiment=experiment)
    return experiment


def experiment_stop(*, experiment: ConfigExperiment, stopped_by: str, outcome: str = "stopped"
                    ) -> None:
    """End an A/B test: every lookup runs with the config again (a promotion is
    ragconfig/drafts.py `experiment_promote`, which ends it this way first)."""
    with transaction.atomic():
        config = experiment.config
        Tenant.objects.select_for_update().only("pk").get(pk=config.tenant_id)
        stopped = ConfigExperiment.objects.filter(pk=experiment.pk, stopped_at__isnull=True)
        if not stopped.update(stopped_at=timezone.now(), stopped_by=stopped_by,
                              outcome=outcome[:200]):
            raise RagConfigError({"experiment": f"A/B test {experiment.pk} has ended already"})
        RagConfig.objects.filter(pk=config.pk, experiment=experiment).update(experiment=None)


def rag_config_ensure_default(*, tenant: Tenant, changed_by: str = "") -> RagConfig:
    """The tenant's default RagConfig, created from the built-in defaults if it has none.

    The row lookups already behave as when no config exists, made visible: an operator sees
    (and edits) what is serving. An existing default is returned unchanged.
    """
    return rag_config_update(config=None, tenant=tenant, values={}, changed_by=changed_by)
