"""The admin's hit-testing page (RagConfigAdmin.hit_test): a question for one tenant's lookups,
under the serving config, an earlier version of it or a draft not saved yet, the tool's answer
and the lookup's trace; two of them side by side, the differences marked. Nothing is audited."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings as django_settings
from django.http import HttpRequest
from django.urls import reverse

from audit.admin_display import trace_tables
from retrieval.admin_forms import TenantVersionForm
from retrieval.config import RagConfigConverter, RagConfigError
from retrieval.hit_test import HitTest, compared, hit_test_question
from retrieval.models import RagConfig, RagConfigChange
from retrieval.selectors import draft_settings

MAX_DRAFT_CHARS = 20_000


class HitTestForm(TenantVersionForm):
    """A question for one tenant's lookups, with the serving config, an earlier version or a
    draft."""

    compare = forms.IntegerField(
        min_value=1, required=False, label="Compare with version",
        help_text="Another version: the same question under both, side by side, the "
                  "differences marked. Empty: no comparison.")
    draft = forms.CharField(
        required=False, max_length=MAX_DRAFT_CHARS, label="Draft settings",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Settings not saved yet, as JSON over the version above (a config's “Hit "
                  "test this draft” button fills it in): the question runs under the draft "
                  "and under that version, side by side.")
    question = forms.CharField(max_length=django_settings.KB_MAX_QUERY_CHARS,
                               widget=forms.TextInput(attrs={"size": 80}))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        tenant = cleaned.get("tenant")
        cleaned["compared"] = self.version_of(tenant, "compare") if tenant else None
        cleaned["draft_settings"] = None
        if tenant is not None and cleaned.get("draft"):
            try:
                cleaned["draft_settings"] = draft_settings(
                    tenant=tenant, dataset_ids=cleaned["dataset_ids"],
                    version=cleaned["change"], draft=cleaned["draft"])
            except RagConfigError as exc:
                self.add_error("draft", "; ".join(f"{k}: {v}" for k, v in exc.errors.items()))
        return cleaned


def _label(change: RagConfigChange | None) -> str:
    return f"version {change.version}" if change is not None else "the serving config"


def hit_test_page(request: HttpRequest) -> dict[str, Any]:
    """The page's context: the form, and once it is valid the answer, its trace and the
    side-by-side columns."""
    form = HitTestForm(request.GET or None, request=request)
    if not form.is_valid():
        return {"form": form}
    data = form.cleaned_data
    tenant = data["tenant"]

    def run(overrides: dict[str, Any] | None, version: int | None = None) -> HitTest:
        return hit_test_question(tenant_id=tenant.pk, dataset_ids=data["dataset_ids"],
                                 query=data["question"], overrides=overrides, version=version)

    change = data["change"]
    base = run(change.settings() if change else None, change.version if change else None)
    sides = [(_label(change), base)]
    if data["draft_settings"] is not None:
        sides.insert(0, ("the draft", run(data["draft_settings"])))
    elif data["compared"] is not None:
        other = data["compared"]
        sides.append((_label(other), run(other.settings(), other.version)))
    comparison = compared(*sides) if len(sides) > 1 else None
    shown = sides[0][1]
    details = shown.details
    if data["draft_settings"] is not None:
        details = {**details, "config_version": "a draft, not saved"}
    return {"form": form, "answer": json.dumps(shown.body, indent=2, ensure_ascii=False),
            "rd": details, "trace": trace_tables(details, tenant.pk), "comparison": comparison}


def draft_url(*, config: RagConfig | None, form_data: dict[str, Any], values: dict[str, Any],
              question: str) -> str:
    """The hit-testing page for a config form's values, not saved (a new config's too)."""
    tenant = config.tenant if config is not None else form_data["tenant"]
    dataset = config.dataset if config is not None else form_data.get("dataset")
    draft = RagConfigConverter.to_dict(RagConfigConverter.to_settings(values))
    params: list[tuple[str, Any]] = [("tenant", tenant.pk), ("draft", json.dumps(draft))]
    if dataset is not None:
        params.append(("datasets", dataset.pk))
    if question.strip():
        params.append(("question", question.strip()))
    return f"{reverse('admin:retrieval_ragconfig_hit_test')}?{urlencode(params)}"
