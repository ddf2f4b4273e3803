"""What the console's pages ask first: a tenant of the user's admin scope, some of its datasets,
and a config version chosen from the versions that exist of any of its configs (hit testing,
batch hit testing, suite evaluations)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.db.models import F
from django.http import HttpRequest

from datasets.admin.scope import admin_datasets, admin_tenants, scoped
from datasets.documents.selectors import db_id
from datasets.models import Dataset, Tenant
from retrieval.ragconfig.models import RagConfigChange

MAX_VERSIONS_OFFERED = 100  # of each config, the latest


class ConfigVersionForm(forms.Form):
    """A tenant of the user's scope, some of its datasets and a version, one of those that
    exist of any of its configs (a tenant default or a dataset's own), offered by config.
    cleaned_data gains `dataset_ids` (the chosen ones; none chosen: the chosen version's
    dataset when it is a dataset's config, else every activated dataset of the tenant, as its
    tool keys search) and `change` (the version; None: the config that serves)."""

    tenant: forms.ModelChoiceField[Tenant] = forms.ModelChoiceField(queryset=None)
    datasets: forms.ModelMultipleChoiceField[Dataset] | None = forms.ModelMultipleChoiceField(
        queryset=None, required=False, help_text="Empty: every activated dataset of the "
                                                 "tenant, as a tool key of the tenant searches.")
    version = forms.ChoiceField(
        required=False, choices=(),
        help_text="A version of one of the tenant's RAG configs (its history; the latest "
                  f"{MAX_VERSIONS_OFFERED} of each). Empty: the config that serves the datasets "
                  "searched (a dataset's own config when only that dataset is searched).")

    def __init__(self, data: Any = None, files: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data, files)
        # The tenants, datasets and versions of the user's admin scope only.
        cast("forms.ModelChoiceField[Any]", self.fields["tenant"]).queryset = admin_tenants(request)
        if "datasets" in self.fields:
            cast("forms.ModelMultipleChoiceField[Any]", self.fields["datasets"]).queryset = (
                admin_datasets(request).filter(activated=True).order_by("tenant__slug", "name"))
        cast(forms.ChoiceField, self.fields["version"]).choices = version_choices(request)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant")
        cleaned["change"] = None
        if tenant is None:
            return cleaned
        chosen = cleaned.get("datasets") or []
        if any(d.tenant_id != tenant.pk for d in chosen):
            self.add_error("datasets", f"pick datasets of {tenant.slug} only")
        change = cleaned["change"] = self.tenant_change(tenant, "version")
        if not chosen and change is not None and change.config.dataset_id is not None:
            cleaned["dataset_ids"] = [change.config.dataset_id]
        else:
            cleaned["dataset_ids"] = [d.pk for d in chosen] or list(
                tenant.datasets.filter(activated=True).values_list("pk", flat=True))
        return cleaned

    def tenant_change(self, tenant: Tenant, field: str) -> RagConfigChange | None:
        """The version chosen in `field`, when it is one of a config of `tenant` (else the
        field's error)."""
        chosen = db_id(self.cleaned_data.get(field) or "")
        if chosen is None:
            return None
        change = RagConfigChange.objects.select_related(
            "config__tenant", "config__dataset").filter(pk=chosen).first()
        if change is None:  # deleted with its config since the form was shown
            self.add_error(field, "that config is gone: choose again")
            return None
        config = change.config
        if config.tenant_id != tenant.pk:
            self.add_error(field, f"version {change.version} is a version of "
                                  f"{config.scope_label}, not of a config of {tenant.slug}")
            return None
        return change


def version_choices(request: HttpRequest) -> list[tuple[str, Any]]:
    """"" (the config that serves), then each config of the user's tenants with its versions,
    newest first: the choices of ConfigVersionForm.version."""
    # The latest MAX_VERSIONS_OFFERED of each config in the query itself (a config's
    # versions are numbered 1, 2, … as it changes), not every version ever made; added to the
    # version, not taken from the config's (MariaDB's versions are unsigned).
    changes = scoped(RagConfigChange.objects.defer("before", "after"), request,
                     "config__tenant").select_related("config__tenant", "config__dataset") \
        .filter(config__version__lt=F("version") + MAX_VERSIONS_OFFERED)
    grouped: dict[int, tuple[str, list[tuple[str, str]]]] = {}
    for change in changes.order_by("config__tenant__slug", "config__dataset_id", "-version"):
        config = change.config
        label, options = grouped.setdefault(config.pk, (config.scope_label, []))
        serving = " (serving)" if change.version == config.version else ""
        options.append((str(change.pk), f"{label} version {change.version}{serving}, "
                                        f"{change.changed_at:%Y-%m-%d %H:%M} by "
                                        f"{change.changed_by or '?'}"))
    return [("", "the config that serves"), *grouped.values()]
