"""Admin for RagConfig: validated by the converter, saved through the service, history read-only."""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from datasets.admin.scope import (
    ReadOnlyAdmin,
    TenantScopedAdmin,
    scoped,
    tenant_filter,
)
from kbplatform.admin_columns import cut, stacked, when
from retrieval.admin.experiments import experiment_started
from retrieval.admin.hit_test import draft_data, hit_test_page
from retrieval.ragconfig import config as cfg
from retrieval.ragconfig.drafts import Proposal, rag_config_propose, rag_config_rollback
from retrieval.ragconfig.gate import registered_gate
from retrieval.ragconfig.models import DRAFT_HELD, RagAgent, RagConfig, RagConfigChange
from retrieval.ragconfig.selectors import checked_settings
from retrieval.ragconfig.settings import RETRIEVERS, SETTING_NAMES, RagSettings


class RagConfigForm(forms.ModelForm[RagConfig]):
    # The JSON list column is edited as checkboxes; the converter says "choose at least one".
    # A declared field does not take the model default as its initial value: give it, so the
    # add form starts from the built-in defaults like every other field.
    enabled_retrievers = forms.MultipleChoiceField(
        choices=[(r, r) for r in RETRIEVERS], required=False,
        initial=list(RagSettings().enabled_retrievers),
        help_text=RagConfig._meta.get_field("enabled_retrievers").help_text,
        widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = RagConfig
        fields = ["tenant", "dataset", *SETTING_NAMES]

    def setting_values(self) -> dict[str, Any]:
        values = {n: self.cleaned_data[n] for n in SETTING_NAMES if n in self.cleaned_data}
        if values.get("metadata_filters") is None and "metadata_filters" in values:
            values["metadata_filters"] = {}  # an emptied JSON box means "no filters"
        return values

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:  # cross-field rules on fields that failed to parse only confuse
            return cleaned
        tenant, dataset = cleaned.get("tenant"), cleaned.get("dataset")
        if tenant is not None and dataset is not None and dataset.tenant_id != tenant.pk:
            self.add_error("dataset", "This dataset belongs to another tenant.")
        if tenant is not None and dataset is None and RagConfig.objects.filter(
                tenant=tenant, dataset__isnull=True).exclude(pk=self.instance.pk).exists():
            self.add_error("dataset", "This tenant already has a default config; edit that one.")
        try:
            if tenant is not None:
                checked_settings(tenant=tenant, values=self.setting_values())
            else:  # no tenant chosen (its own error): the values are still checked
                cfg.RagConfigConverter.to_settings(self.setting_values())
        except cfg.RagConfigError as exc:
            for name, message in exc.errors.items():
                self.add_error(name if name in self.fields else None, message)
        return cleaned


class RagConfigChangeInline(ReadOnlyAdmin, admin.TabularInline[RagConfigChange, RagConfig]):
    model = RagConfigChange
    extra = 0
    ordering = ["-version"]
    fields = ("version", "changed_by", "changed_at", "diff", "open")
    readonly_fields = fields

    @admin.display(description="changed (before → after)")
    def diff(self, change: RagConfigChange) -> str:
        return change_summary(change)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("config")  # `open` reads it

    @admin.display(description="")
    def open(self, change: RagConfigChange) -> str:
        url = reverse("admin:retrieval_ragconfigchange_change", args=[change.pk])
        if change.version == change.config.version:  # nothing to roll back to
            return format_html('<a href="{}">view (serves now)</a>', url)
        return format_html('<a href="{}">view, roll back to it</a>', url)


def change_summary(change: RagConfigChange) -> str:
    if change.before is None:
        return "created"
    fields = "; ".join(f"{name}: {json.dumps(old)} → {json.dumps(new)}"
                       for name, (old, new) in change.changed_fields().items())
    return f"{change.note}: {fields}" if change.note else fields


@admin.register(RagConfig)
class RagConfigAdmin(TenantScopedAdmin[RagConfig]):
    form = RagConfigForm
    # The config's tenant and dataset are its name (scope); its stages are on its page.
    list_display = ["scope", "retrievers", "sizes", "version", "updated"]
    list_filter = ["retrieval_execution_mode", "enable_rerank", "enable_query_transform"]
    list_select_related = ["tenant", "dataset__tenant"]
    search_fields = ["tenant__slug", "dataset__name"]
    readonly_fields = ["version", "updated_by", "updated_at", "ab_test", "gate"]
    inlines = [RagConfigChangeInline]
    # One group per stage of the retrieval graph, in the order a lookup runs them.
    fieldsets = [
        (None, {"fields": ["tenant", "dataset", "version", "updated_by", "updated_at",
                           "ab_test", "gate"]}),
        ("1. Scope and filters", {"fields": ["kb_scope", "metadata_filters"]}),
        ("2. Query transformation", {"fields": ["enable_query_transform",
                                                "query_transform_strategy",
                                                "bilingual_bm25", "translate_query",
                                                "translation_budget_ms",
                                                "judge_translation"]}),
        ("3. Retrievers", {"fields": ["enabled_retrievers", "retrieval_execution_mode",
                                      "max_results", "min_score", "fusion_method", "rrf_k",
                                      "dense_weight", "bm25_weight"]}),
        ("4. Aggregation and rerank", {"fields": ["aggregation_strategy", "retrieve_k",
                                                  "enable_rerank", "rerank_top_n",
                                                  "recency_half_life_days",
                                                  "relevance_order"]}),
        ("5. Relevance gate", {"fields": ["relevance_gate", "model_reference_threshold",
                                          "model_precise_threshold", "reference_threshold",
                                          "precise_threshold", "max_l2_distance",
                                          "max_chunks_per_document", "return_n"]}),
        ("6. Quality and correction", {"fields": ["enable_quality_assessment",
                                                  "quality_threshold", "enable_correction",
                                                  "max_retry_count"]}),
        ("7. Neighbours and packing", {"fields": ["neighbour_expansion", "neighbour_window",
                                                  "max_context_chars", "max_excerpt_chars"]}),
        ("8. Deadline and fallback", {"fields": ["timeout_millis", "enable_fallback"]}),
        ("9. Agentic RAG", {"fields": ["agentic_graph", "agentic_quality_threshold",
                                       "agentic_max_retry_count"]}),
        ("10. Chat model", {"fields": ["chat_base_url", "chat_model", "chat_api_key_env",
                                       "chat_timeout_seconds", "chat_max_tokens"]}),
    ]

    change_list_template = "admin/retrieval/ragconfig/change_list.html"
    change_form_template = "admin/retrieval/ragconfig/change_form.html"  # a draft's hit test

    def get_urls(self) -> list[Any]:
        hit_test = path("hit-test/", self.admin_site.admin_view(self.hit_test),
                        name="retrieval_ragconfig_hit_test")
        return [hit_test, *super().get_urls()]

    def hit_test(self, request: HttpRequest,
                 data: dict[str, Any] | None = None) -> HttpResponse:
        """Hit testing: a question, the tool's answer and the lookup's whole trace. A run is a
        POST (CSRF-checked by admin_view; a GET shows the form), a draft's (`data`, from a
        config's form) for users who may change configs only."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {**self.admin_site.each_context(request), "title": "Hit testing",
                   "opts": self.model._meta, **hit_test_page(
                       request, data=data, may_draft=self.has_change_permission(request))}
        return TemplateResponse(request, "admin/retrieval/hit_test.html", context)

    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "", extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        # "Hit test this draft": the form's values, validated, run by the hit-testing page
        # instead of being saved (by a user who may save them).
        if request.method == "POST" and "_hit_test_draft" in request.POST:
            obj = self.get_object(request, unquote(object_id)) if object_id else None
            if not (self.has_change_permission(request, obj) if object_id
                    else self.has_add_permission(request)):
                raise PermissionDenied
            form = cast(RagConfigForm, self.get_form(request, obj, change=obj is not None)(
                request.POST, request.FILES, instance=obj))
            if form.is_valid():
                return self.hit_test(request, draft_data(
                    config=obj, form_data=form.cleaned_data, values=form.setting_values(),
                    question=request.POST.get("_hit_test_question", "")))
        return super().changeform_view(request, object_id, form_url, extra_context)

    @admin.display(description="A/B test")
    def ab_test(self, config: RagConfig) -> str:
        experiment = config.experiment
        if experiment is None:
            return "none running (start one from a version of the history below)"
        url = reverse("admin:retrieval_configexperiment_change", args=[experiment.pk])
        return format_html('<a href="{}" id="running-ab-test">A/B test {}</a>: version {} for '
                           '{} % of the lookups', url, experiment.pk,
                           experiment.candidate.version, experiment.share)

    @admin.display(description="regression gate")
    def gate(self, config: RagConfig) -> str:
        """Whether a change waits for the gate, and the change it holds now."""
        if config.pk is None:
            return ("decided when it is saved: held until the gate passes it when the "
                    "tenant's gate question sets cover it")
        held = config.drafts.filter(status__in=DRAFT_HELD).first()
        if held is not None:
            url = reverse("admin:retrieval_ragconfigdraft_change", args=[held.pk])
            return format_html('<a href="{}" id="held-change">held change {}</a> ({}): not '
                               "served until the gate passes it", url, held.pk,
                               held.get_status_display())
        gate = registered_gate()
        if gate is not None and gate.covers(tenant_id=config.tenant_id,
                                            dataset_id=config.dataset_id):
            return ("a change is held, not served, until the tenant's gate question sets "
                    "pass it")
        return ("no gate question set covers this config: a change serves at once (name "
                "question sets as the gate under Evaluation)")

    @admin.display(description="retrievers")
    def retrievers(self, config: RagConfig) -> str:
        """The retrievers it runs, and below how."""
        return stacked(", ".join(config.enabled_retrievers or []),
                       config.retrieval_execution_mode)

    @admin.display(description="retrieve → return")
    def sizes(self, config: RagConfig) -> str:
        return f"{config.retrieve_k} → {config.return_n}"

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, config: RagConfig) -> str:
        return stacked(when(config.updated_at), f"by {config.updated_by or '-'}")

    @admin.display(description="config", ordering="tenant__slug")
    def scope(self, config: RagConfig) -> str:
        return cut(config.scope_label, 18)  # its version has a column of its own

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A config's scope is its identity (and the history's subject): create another
        # config instead of moving this one.
        scope = ["tenant", "dataset"] if obj is not None else []
        return [*scope, *self.readonly_fields]

    def save_model(self, request: HttpRequest, obj: RagConfig, form: Any, change: bool) -> None:
        # Through the gate, so the admin gets the same locking, versioning, history and
        # regression gate as every change. `obj` already holds the new values in memory; the
        # service reads the stored row for "before".
        proposal = rag_config_propose(
            config=obj if change else None, tenant=obj.tenant, dataset=obj.dataset,
            values=form.setting_values(),
            changed_by=request.user.get_username() if request.user.is_authenticated else "",
        )
        request._kb_proposal = proposal  # type: ignore[attr-defined]  # for the response
        obj.pk = proposal.config.pk
        obj.refresh_from_db()

    def _held_response(self, request: HttpRequest) -> HttpResponse | None:
        proposal: Proposal | None = getattr(request, "_kb_proposal", None)
        if proposal is None or proposal.draft is None:
            return None
        messages.warning(request, held_message(proposal))
        return redirect("admin:retrieval_ragconfigdraft_change", proposal.draft.pk)

    def response_change(self, request: HttpRequest, obj: RagConfig) -> HttpResponse:
        return self._held_response(request) or super().response_change(request, obj)

    def response_add(self, request: HttpRequest, obj: RagConfig,
                     post_url_continue: str | None = None) -> HttpResponse:
        return (self._held_response(request)
                or super().response_add(request, obj, post_url_continue))


def held_message(proposal: Proposal) -> str:
    assert proposal.draft is not None
    return (f"The change of {proposal.config.scope_label} is held (held change "
            f"{proposal.draft.pk}): the gate checks it against version "
            f"{proposal.draft.base_version}, which serves until it passes.")


@admin.register(RagConfigChange)
class RagConfigChangeAdmin(ReadOnlyAdmin, TenantScopedAdmin[RagConfigChange]):
    # Each row is one version of a config: name the config without the version it has now
    # (its __str__), which would label every row of its history with the latest one.
    tenant_path = "config__tenant"
    list_display = ["config_scope", "version", "changed_by", "changed_at", "why"]
    list_display_links = ["config_scope", "version"]
    list_select_related = ["config__tenant", "config__dataset__tenant"]
    search_fields = ["changed_by", "config__tenant__slug"]
    fields = ("config_link", "version", "changed_by", "changed_at", "summary", "before_json",
              "after_json")
    readonly_fields = fields
    change_form_template = "admin/retrieval/ragconfigchange/change_form.html"

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [path("<int:change_id>/rollback/", view(self.rollback),
                     name="retrieval_ragconfigchange_rollback"),
                path("<int:change_id>/ab-test/", view(self.ab_test),
                     name="retrieval_ragconfigchange_ab_test"),
                *super().get_urls()]

    def _posted(self, request: HttpRequest, change_id: int) -> RagConfigChange:
        """The version a POST of its page acts on: the right to change configs first (a 403
        tells nothing), then a version of the user's tenants (404)."""
        if request.method != "POST" or not request.user.has_perm("retrieval.change_ragconfig"):
            raise PermissionDenied
        return get_object_or_404(scoped(RagConfigChange.objects.select_related(
            "config__tenant"), request, self.tenant_path), pk=change_id)

    def ab_test(self, request: HttpRequest, change_id: int) -> HttpResponse:
        """POST: an A/B test of this version (the second button of the page)."""
        return experiment_started(request, self._posted(request, change_id))

    def rollback(self, request: HttpRequest, change_id: int) -> HttpResponse:
        """POST: a new version of the config equal to this change's (the button of the page)."""
        change = self._posted(request, change_id)
        before = change.config.version
        try:
            proposal = rag_config_rollback(change=change,
                                           changed_by=request.user.get_username())
        except cfg.RagConfigError as exc:
            messages.error(request, f"Version {change.version} cannot be restored as it was: "
                           + "; ".join(f"{k}: {v}" for k, v in exc.errors.items()))
            return redirect("admin:retrieval_ragconfigchange_change", change.pk)
        config = proposal.config
        if proposal.draft is not None:
            messages.warning(request, held_message(proposal))
            return redirect("admin:retrieval_ragconfigdraft_change", proposal.draft.pk)
        if config.version == before:
            messages.info(request, f"The config {config.scope_label} is already equal to version "
                          f"{change.version}: nothing changed.")
        else:
            messages.success(request, f"The config {config.scope_label} is at version "
                             f"{config.version}, equal to version {change.version}.")
        return redirect("admin:retrieval_ragconfig_change", config.pk)

    def render_change_form(self, request: HttpRequest, context: dict[str, Any],
                           add: bool = False, change: bool = False, form_url: str = "",
                           obj: RagConfigChange | None = None) -> HttpResponse:
        # A version with the settings that serve now (that version, or one equal to it) has
        # nothing to roll back to: the button would only say "nothing changed".
        serving = (obj.config.changes.filter(version=obj.config.version).first()
                   if obj is not None else None)
        context["serves"] = serving is not None and obj is not None and (
            serving.settings() == obj.settings())
        context["can_roll_back"] = obj is not None and not context["serves"] and (
            request.user.has_perm("retrieval.change_ragconfig"))
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="changed")
    def summary(self, change: RagConfigChange) -> str:
        """The fields this version changed, one row each: before, after."""
        if change.before is None:
            return "created with the settings below"
        rows = format_html_join("", "<tr><th>{}</th><td><code>{}</code></td>"
                                    "<td><code>{}</code></td></tr>",
                                ((name, json.dumps(old, ensure_ascii=False),
                                  json.dumps(new, ensure_ascii=False))
                                 for name, (old, new) in change.changed_fields().items()))
        note = format_html("<p>{}</p>", change.note) if change.note else ""
        return format_html('{}<table id="version-diff"><thead><tr><th>setting</th>'
                           "<th>before</th><th>after</th></tr></thead><tbody>{}</tbody></table>",
                           note, rows)

    @admin.display(description="config", ordering="config")
    def config_scope(self, change: RagConfigChange) -> str:
        return cut(change.config.scope_label, 18)

    @admin.display(description="note", ordering="note")
    def why(self, change: RagConfigChange) -> str:
        return cut(change.note, 24)

    @admin.display(description="config")
    def config_link(self, change: RagConfigChange) -> str:
        url = reverse("admin:retrieval_ragconfig_change", args=[change.config_id])
        return format_html('<a href="{}">{}</a> (now at version {})', url,
                           change.config.scope_label, change.config.version)

    @admin.display(description="before")
    def before_json(self, change: RagConfigChange) -> str:
        return format_html("<pre>{}</pre>", json.dumps(change.before, indent=2,
                                                       ensure_ascii=False))

    @admin.display(description="after")
    def after_json(self, change: RagConfigChange) -> str:
        return format_html("<pre>{}</pre>", json.dumps(change.after, indent=2,
                                                       ensure_ascii=False))


class RagAgentForm(forms.ModelForm[RagAgent]):
    class Meta:
        model = RagAgent
        fields = ["tenant", "name", "description", "agentic_graph", "max_retry_count",
                  "chat_model"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        agent = RagAgent(**{k: v for k, v in cleaned.items() if k != "tenant"})
        try:  # the same converter as every config: what is saved can be run
            cfg.RagConfigConverter.to_settings(agent.overrides())
        except cfg.RagConfigError as exc:
            for name, message in exc.errors.items():
                field = RagAgent.SETTING_FIELDS.get(name, name)
                self.add_error(field if field in self.fields else None, message)
        return cleaned


@admin.register(RagAgent)
class RagAgentAdmin(TenantScopedAdmin[RagAgent]):
    """The agentic-RAG agents a RAG node (/api/rag/node) delegates to by name."""

    form = RagAgentForm
    list_display = ["agent_name", "agentic_graph", "retries", "chat"]
    list_select_related = ["tenant"]
    list_filter = [tenant_filter("tenant")]
    search_fields = ["name"]

    @admin.display(description="agent", ordering="name")
    def agent_name(self, agent: RagAgent) -> str:
        """Its name, and below its tenant."""
        return stacked(cut(agent.name, 16), cut(agent.tenant, 16))

    @admin.display(description="retries", ordering="max_retry_count")
    def retries(self, agent: RagAgent) -> int | None:
        return agent.max_retry_count

    @admin.display(description="chat model", ordering="chat_model")
    def chat(self, agent: RagAgent) -> str:
        return cut(agent.chat_model, 12)
