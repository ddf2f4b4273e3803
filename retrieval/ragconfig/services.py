"""Writes of RagConfig (validated, versioned, with a change record) and the end of its A/B tests.
A change an operator makes, and the start of an A/B test, go through the regression gate first
(ragconfig/drafts.py)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction
from django.utils import timezone

from datasets.models import Dataset, Tenant
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.models import (
    DRAFT_HELD,
    ConfigExperiment,
    RagConfig,
    RagConfigChange,
    RagConfigDraft,
)
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
        # A test the gate still held ends with its admission: nothing is left to decide.
        RagConfigDraft.objects.filter(experiment=experiment, status__in=DRAFT_HELD).update(
            status=RagConfigDraft.Status.SUPERSEDED, decided_at=timezone.now(),
            decided_by=stopped_by, verdict=f"A/B test {experiment.pk} ended: {outcome}"[:1000])


def rag_config_ensure_default(*, tenant: Tenant, changed_by: str = "") -> RagConfig:
    """The tenant's default RagConfig, created from the built-in defaults if it has none.

    The row lookups already behave as when no config exists, made visible: an operator sees
    (and edits) what is serving. An existing default is returned unchanged.
    """
    return rag_config_update(config=None, tenant=tenant, values={}, changed_by=changed_by)
