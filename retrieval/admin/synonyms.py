"""Admin of the tenants' synonym groups: one line of equivalent terms a group, validated and
written by the service (which tells every lookup process to read them again)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from datasets.admin.scope import TenantScopedAdmin, tenant_filter
from kbplatform.admin_columns import cut, stacked, when
from retrieval.ragconfig.models import SYNONYM_SEPARATOR, SynonymGroup
from retrieval.ragconfig.synonyms import (
    SynonymError,
    synonym_group_check,
    synonym_group_delete,
    synonym_group_save,
)


class SynonymGroupForm(forms.ModelForm[SynonymGroup]):
    class Meta:
        model = SynonymGroup
        fields = ["tenant", "terms"]
        widgets = {"terms": forms.TextInput(attrs={"size": 80})}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant") or (self.instance.tenant if self.instance.pk else None)
        if tenant is not None and "terms" in cleaned:
            try:
                terms = synonym_group_check(tenant=tenant, terms=cleaned["terms"],
                                            group=self.instance)
            except SynonymError as exc:
                self.add_error("terms", str(exc))
            else:  # as it will be stored: what the model's constraints check
                cleaned["terms"] = SYNONYM_SEPARATOR.join(terms)
        return cleaned


@admin.register(SynonymGroup)
class SynonymGroupAdmin(TenantScopedAdmin[SynonymGroup]):
    """A tenant's synonyms: a question naming one term of a group also searches BM25 for the
    others (docs/retrieval-graph.md)."""

    form = SynonymGroupForm
    list_display = ["group", "updated"]
    list_select_related = ["tenant"]
    list_filter = [tenant_filter("tenant")]
    search_fields = ["terms"]
    readonly_fields = ["updated_by", "updated_at", "created_at"]

    @admin.display(description="terms", ordering="terms")
    def group(self, synonyms: SynonymGroup) -> str:
        """Its terms, and below its tenant."""
        return stacked(cut(synonyms.terms, 30), cut(synonyms.tenant, 30))

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, synonyms: SynonymGroup) -> str:
        return stacked(when(synonyms.updated_at), f"by {synonyms.updated_by or '-'}")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A group is its tenant's: another tenant makes a group of its own.
        return ["tenant", *self.readonly_fields] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: SynonymGroup, form: Any,
                   change: bool) -> None:
        saved = synonym_group_save(
            tenant=obj.tenant, terms=form.cleaned_data["terms"], group=obj if change else None,
            changed_by=request.user.get_username() if request.user.is_authenticated else "")
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: SynonymGroup) -> None:
        synonym_group_delete(group=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[SynonymGroup]) -> None:
        for group in queryset:
            synonym_group_delete(group=group)
