"""What the console's pages ask first: a tenant of the user's admin scope, some of its datasets,
and a version of its default config (hit testing, batch hit testing, suite evaluations)."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.http import HttpRequest

from datasets.admin_scope import admin_datasets, admin_tenants
from datasets.models import Dataset, Tenant
from retrieval.selectors import default_config_version


class TenantVersionForm(forms.Form):
    """cleaned_data gains `dataset_ids` (the chosen ones, else every activated dataset of the
    tenant, as its tool keys search) and `change` (the version, None: the one serving)."""

    tenant: forms.ModelChoiceField[Tenant] = forms.ModelChoiceField(queryset=None)
    datasets: forms.ModelMultipleChoiceField[Dataset] | None = forms.ModelMultipleChoiceField(
        queryset=None, required=False, help_text="Empty: every activated dataset of the "
                                                 "tenant, as a tool key of the tenant searches.")
    version = forms.IntegerField(
        min_value=1, required=False, help_text="A version of the tenant's default RAG config "
                                               "(its history). Empty: the config that serves.")

    def __init__(self, data: Any = None, files: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data, files)
        # The tenants and datasets of the user's admin scope only.
        cast(forms.ModelChoiceField, self.fields["tenant"]).queryset = admin_tenants(request)
        if "datasets" in self.fields:
            cast(forms.ModelMultipleChoiceField, self.fields["datasets"]).queryset = (
                admin_datasets(request).filter(activated=True).order_by("tenant__slug", "name"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant")
        cleaned["change"] = None
        if tenant is None:
            return cleaned
        chosen = cleaned.get("datasets") or []
        if any(d.tenant_id != tenant.pk for d in chosen):
            self.add_error("datasets", f"pick datasets of {tenant.slug} only")
        cleaned["dataset_ids"] = [d.pk for d in chosen] or list(
            tenant.datasets.filter(activated=True).values_list("pk", flat=True))
        cleaned["change"] = self.version_of(tenant, "version")
        return cleaned

    def version_of(self, tenant: Tenant, field: str) -> Any:
        number = self.cleaned_data.get(field)
        if not number:
            return None
        change = default_config_version(tenant=tenant, version=number)
        if change is None:
            self.add_error(field, f"{tenant.slug}/default has no version {number}")
        return change
