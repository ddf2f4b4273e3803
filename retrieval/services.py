"""Writes of RagConfig (validated, versioned, with a change record) and the start of index
operations."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from datasets.models import Dataset, Job, Tenant
from kbplatform.errors import ApiError
from kbplatform.tasks import enqueue_on_commit
from retrieval.config import RagConfigConverter, RagConfigError, RagSettings
from retrieval.models import RagConfig, RagConfigChange
from retrieval.selectors import chat_key_env_error


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
        settings = RagConfigConverter.to_settings(values, base=base)
        errors = chat_key_env_error(tenant, settings.chat_api_key_env)
        if errors:
            raise RagConfigError(errors)
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


def rag_config_rollback(*, change: RagConfigChange, changed_by: str) -> RagConfig:
    """A new version of the change's config equal to the version `change` made.

    Fields added since that version take their built-in defaults, as they did then; values
    the rules refuse today raise RagConfigError, as an edit would. Equal to the config as it
    is: nothing is written and the version stays.
    """
    config = change.config
    return rag_config_update(config=config, tenant=config.tenant, dataset=config.dataset,
                             values=change.settings(), changed_by=changed_by,
                             note=f"rollback to version {change.version}")


def rag_config_ensure_default(*, tenant: Tenant, changed_by: str = "") -> RagConfig:
    """The tenant's default RagConfig, created from the built-in defaults if it has none.

    The row lookups already behave as when no config exists, made visible: an operator sees
    (and edits) what is serving. An existing default is returned unchanged.
    """
    return rag_config_update(config=None, tenant=tenant, values={}, changed_by=changed_by)


# --- index operations (platform operators) -------------------------------------------------

INDEX_TASKS = {Job.Kind.REBUILD: "retrieval.tasks.rebuild_task",
               Job.Kind.ROLLBACK: "retrieval.tasks.rollback_task",
               Job.Kind.RECONCILE: "retrieval.tasks.reconcile_task"}


class OperationRunning(ApiError):
    status_code = 409
    default_code = "operation_running"


def index_operation_start(*, kind: str, args: tuple[object, ...] = (),
                          detail: dict[str, object] | None = None) -> Job:
    """Queue a platform-wide index operation (no tenant: only platform keys see it)."""
    with transaction.atomic():
        running = Job.objects.select_for_update().filter(
            tenant__isnull=True, kind__in=list(INDEX_TASKS),
            status__in=[Job.Status.QUEUED, Job.Status.RUNNING]).first()
        if running is not None:
            raise OperationRunning(f"job {running.pk} ({running.kind}) is still {running.status}",
                                   extra={"job_id": running.pk})
        job = Job.objects.create(kind=kind, detail=detail or {})
        enqueue_on_commit(INDEX_TASKS[Job.Kind(kind)], job.pk, *args)
    return job
