"""The admin's hit-testing page (RagConfigAdmin.hit_test): a question for one tenant's lookups,
under the serving config, an earlier version of it or a draft not saved yet, the tool's answer
and the lookup's trace; two of them side by side, the differences marked. Nothing is audited.

A run may call the tenant's chat model (a query transform, a judge) with the tenant's key, so
it is a POST only, which the admin checks for its CSRF token: a GET — a link someone was sent —
shows the empty form and runs nothing, and the question never appears in a URL (nor in a
server's request log). A draft runs only for users who may change RAG configs."""

from __future__ import annotations

import copy
import json
from typing import Any

from django import forms
from django.conf import settings as django_settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from audit.admin_display import trace_tables
from retrieval.admin.forms import ConfigVersionForm
from retrieval.lookup.hit_test import HitTest, compared, hit_test_question
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.filters import filters_from, undeclared_refusal
from retrieval.ragconfig.models import RagConfig, RagConfigChange
from retrieval.ragconfig.selectors import draft_settings
from retrieval.types import CallFilters

MAX_DRAFT_CHARS = 20_000
MAX_FILTERS_CHARS = 8_000


class HitTestForm(ConfigVersionForm):
    """A question for one tenant's lookups, with the serving config, a version of one of its
    configs (chosen from those that exist) or a draft."""

    draft = forms.CharField(
        required=False, max_length=MAX_DRAFT_CHARS, label="Draft settings",
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Settings not saved yet, as JSON over the version above (a config's “Hit "
                  "test this draft” button fills it in): the question runs under the draft "
                  "and under that version, side by side.")
    question = forms.CharField(max_length=django_settings.KB_MAX_QUERY_CHARS,
                               widget=forms.TextInput(attrs={"size": 80}))
    filters = forms.CharField(
        required=False, max_length=MAX_FILTERS_CHARS, label="Call filters",
        widget=forms.TextInput(attrs={"size": 80}),
        help_text='What an agent\'s call narrows to, as its `filters` (docs/api.md), e.g. '
                  '{"domain": ["database"], "updated_after": "2026-01-01"}. Empty: none.')

    def __init__(self, data: Any = None, files: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data, files, request=request)
        # The second version is chosen as the first is, from the same versions.
        compare = copy.deepcopy(self.fields["version"])
        compare.label = "Compare with version"
        compare.help_text = ("Another version: the same question under both, side by side, "
                             "the differences marked. Empty: no comparison.")
        self.fields["compare"] = compare
        self.order_fields(["tenant", "datasets", "version", "compare", "draft", "question",
                           "filters"])

    def clean_filters(self) -> CallFilters:
        try:
            return filters_from(self.cleaned_data.get("filters", ""))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        tenant = cleaned.get("tenant")
        cleaned["compared"] = self.tenant_change(tenant, "compare") if tenant else None
        narrowed = cleaned.get("filters")
        refusal = undeclared_refusal(narrowed, tenant.filterable_fields) if (
            tenant is not None and narrowed is not None) else None
        if refusal:
            self.add_error("filters", refusal)
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
    return (f"{change.config.scope_label} version {change.version}" if change is not None
            else "the serving config")


def hit_test_page(request: HttpRequest, *, may_draft: bool,
                  data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The page's context: the form, and once a POST's (or `data`'s, a config form's draft)
    form is valid the answer, its trace and the side-by-side columns. `may_draft`: the user
    may change RAG configs; a draft of anyone else is refused (403)."""
    if data is None and request.method == "POST":
        data = request.POST
    if data is None:
        return {"form": HitTestForm(request=request)}
    if data.get("draft") and not may_draft:
        raise PermissionDenied("a draft runs only for users who may change RAG configs")
    form = HitTestForm(data, request=request)
    if not form.is_valid():
        return {"form": form}
    data = form.cleaned_data
    tenant = data["tenant"]

    def run(overrides: dict[str, Any] | None, version: int | None = None) -> HitTest:
        return hit_test_question(tenant_id=tenant.pk, dataset_ids=data["dataset_ids"],
                                 query=data["question"], overrides=overrides, version=version,
                                 narrowed=data["filters"])

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


def draft_data(*, config: RagConfig | None, form_data: dict[str, Any], values: dict[str, Any],
               question: str) -> dict[str, Any]:
    """The hit-testing form's data for a config form's values, not saved (a new config's
    too)."""
    tenant = config.tenant if config is not None else form_data["tenant"]
    dataset = config.dataset if config is not None else form_data.get("dataset")
    draft = RagConfigConverter.to_dict(RagConfigConverter.to_settings(values))
    return {"tenant": tenant.pk, "draft": json.dumps(draft), "question": question.strip(),
            "datasets": [dataset.pk] if dataset is not None else []}
