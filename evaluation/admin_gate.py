"""Admin of the regression gate: the tenant's stored question sets (some named as its gate, with
their tolerances; tenant staff may tighten a gate set, never loosen it), and the config changes
the gate holds — each with its job's progress, both versions' figures per set, the
query-by-query diff, and the buttons that discard the change, check it again, or (a superuser,
with a reason) serve it against the gate."""

from __future__ import annotations

from copy import copy
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from datasets.admin.display import job_progress
from datasets.admin.scope import ReadOnlyAdmin, TenantScopedAdmin, scoped, tenant_filter
from evaluation.calibration import (
    PRECISION,
    PRECISION_RANGE,
    CalibrationError,
    calibration_start,
)
from evaluation.display import runs_compared
from evaluation.gate import question_set_loosening
from evaluation.models import GATE_METRICS, QuestionSet
from evaluation.question_sets import (
    MAX_BYTES,
    MAX_QUESTIONS,
    QuestionSetError,
    question_set_parse,
    undeclared_question,
)
from kbplatform.admin_columns import cut, stacked, when
from retrieval.ragconfig.config import RagConfigError
from retrieval.ragconfig.drafts import (
    MAX_REASON_CHARS,
    rag_config_draft_discard,
    rag_config_draft_override,
    rag_config_draft_recheck,
)
from retrieval.ragconfig.models import RagConfig, RagConfigDraft

DIFF_ROWS = 50
# Every change of a config asks its gate sets twice: their questions together are bounded as
# one set's are, so that a change costs at most 2 × MAX_QUESTIONS lookups.
MAX_GATE_QUESTIONS = MAX_QUESTIONS


class QuestionSetForm(forms.ModelForm[QuestionSet]):
    questions_file = forms.FileField(
        required=False, label="Questions (file)",
        help_text="As a batch hit test takes them: JSON lines ({\"query\": …, \"expected\": "
                  "[source path or document id, …]}) or CSV with a header row (query, "
                  "expected, id). No expected document: off-topic, EMPTY is right. Empty "
                  "when editing: the questions stay.")
    questions_text = forms.CharField(required=False, label="… or paste them",
                                     widget=forms.Textarea(attrs={"rows": 8, "cols": 100}))
    may_loosen = False  # a superuser's form (QuestionSetAdmin.get_form)

    class Meta:
        model = QuestionSet
        fields = ["tenant", "name", "dataset", "gate", "max_drop_first", "max_drop_mrr",
                  "max_drop_ndcg", "max_drop_off_topic_empty"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload, text = cleaned.get("questions_file"), cleaned.get("questions_text") or ""
        tenant, dataset = cleaned.get("tenant"), cleaned.get("dataset")
        if tenant is not None and dataset is not None and dataset.tenant_id != tenant.pk:
            self.add_error("dataset", "This dataset belongs to another tenant.")
        for name in ("max_drop_first", "max_drop_mrr", "max_drop_ndcg",
                     "max_drop_off_topic_empty"):
            value = cleaned.get(name)
            if value is not None and not 0 <= value <= 1:
                self.add_error(name, "A tolerance lies between 0 and 1.")
        if upload and text.strip():
            raise forms.ValidationError("Upload a file of questions or paste them, not both.")
        if not (upload or text.strip()):
            if self.instance.pk is None:
                raise forms.ValidationError("Upload a file of questions or paste them.")
            self._gate_bounded(cleaned)
            self._not_loosened(cleaned)
            return cleaned
        try:
            raw = upload.read(MAX_BYTES + 1) if upload else text.encode("utf-8", "replace")
            questions = question_set_parse(raw)
            if tenant is not None and (refusal := undeclared_question(
                    questions, tenant.filterable_fields)):
                raise QuestionSetError(refusal)
            self.instance.questions = [q.as_json() for q in questions]
        except QuestionSetError as exc:
            self.add_error("questions_file" if upload else "questions_text", str(exc))
        else:
            self._gate_bounded(cleaned)
            self._not_loosened(cleaned)
        return cleaned

    def _not_loosened(self, cleaned: dict[str, Any]) -> None:
        """Staff may tighten a gate set, not loosen it: that is a superuser's decision."""
        stored = (QuestionSet.objects.filter(pk=self.instance.pk).first()
                  if self.instance.pk is not None and not self.may_loosen else None)
        if stored is None:
            return
        changed = copy(stored)
        for name in self.Meta.fields:
            if name in cleaned:
                setattr(changed, name, cleaned[name])
        changed.questions = self.instance.questions
        reasons = question_set_loosening(stored=stored, changed=changed)
        if reasons:
            raise forms.ValidationError(
                "Only a superuser loosens the regression gate, and this change would: "
                f"{'; '.join(reasons)}. Tighten it instead (a lower tolerance, another gate "
                "set), or ask a superuser.")

    def _gate_bounded(self, cleaned: dict[str, Any]) -> None:
        """The tenant's gate sets ask MAX_GATE_QUESTIONS at most, this one included."""
        tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
        if not cleaned.get("gate") or tenant is None:
            return
        others = QuestionSet.objects.filter(tenant=tenant, gate=True)
        if self.instance.pk is not None:
            others = others.exclude(pk=self.instance.pk)
        total = len(self.instance.questions or []) + sum(
            len(questions or []) for questions in others.values_list("questions", flat=True))
        if total > MAX_GATE_QUESTIONS:
            self.add_error("gate", f"The tenant's gate sets would ask {total} questions; "
                                   f"{MAX_GATE_QUESTIONS} at most (each change asks them "
                                   "twice).")


@admin.register(QuestionSet)
class QuestionSetAdmin(TenantScopedAdmin[QuestionSet]):
    form = QuestionSetForm
    list_display = ["set_name", "scope", "size", "gate", "drops"]
    list_filter = ["gate", tenant_filter("tenant")]
    list_select_related = ["tenant", "dataset__tenant"]
    search_fields = ["name"]
    readonly_fields = ["size", "created_by", "updated_at"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"may_loosen": request.user.is_superuser})

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A gate set deleted is the gate loosened: a superuser's decision. The per-object
        # answer also refuses staff the deletion of a dataset or tenant that would take a
        # gate set with it (the admin asks it of every object a deletion collects).
        if obj is not None and obj.gate and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: QuestionSet, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)

    @admin.display(description="questions")
    def size(self, question_set: QuestionSet) -> int:
        return len(question_set.questions or [])

    @admin.display(description="name", ordering="name")
    def set_name(self, question_set: QuestionSet) -> str:
        return cut(question_set.name, 14)

    @admin.display(description="tenant / dataset", ordering="tenant__slug")
    def scope(self, question_set: QuestionSet) -> str:
        return cut(question_set.dataset or f"{question_set.tenant}: every dataset", 12)

    @admin.display(description="tolerated drops")
    def drops(self, question_set: QuestionSet) -> str:
        """The largest drop of each figure the gate lets pass (a line breaks between two)."""
        tolerances = question_set.tolerances()
        return format_html_join(" · ", '<span style="white-space: nowrap">{} {}</span>',
                                ((label, f"{tolerances[metric]:g}")
                                 for metric, (label, _) in GATE_METRICS.items()))


class CalibrateForm(forms.Form):
    config = forms.ModelChoiceField(
        queryset=RagConfig.objects.none(), label="Config",
        help_text="Its relevance gate's two thresholds are refitted on the gate question sets "
                  "that cover it; the better pair, if any, is proposed as a change the "
                  "regression gate checks before it serves.")
    precision = forms.FloatField(
        initial=PRECISION, min_value=PRECISION_RANGE[0], max_value=PRECISION_RANGE[1],
        help_text="The share of PRECISE answers that must be right.")
    gate_sets_only = forms.BooleanField(
        required=False, label="Gate sets only",
        help_text="Leave out the questions whose evidence agents confirmed (read only where "
                  "the tenant keeps its callers' questions).")

    def __init__(self, data: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data)
        field = self.fields["config"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = scoped(RagConfig.objects.select_related("tenant", "dataset"), request,
                                "tenant").order_by("tenant__slug", "dataset__name")


class OverrideForm(forms.Form):
    reason = forms.CharField(max_length=MAX_REASON_CHARS, strip=True,
                             help_text="Goes to the config's history with the new version.")


@admin.register(RagConfigDraft)
class RagConfigDraftAdmin(ReadOnlyAdmin, TenantScopedAdmin[RagConfigDraft]):
    tenant_path = "config__tenant"
    list_display = ["id", "config_scope", "change", "state", "proposed"]
    list_filter = ["status", tenant_filter("config__tenant")]
    list_select_related = ["config__tenant", "config__dataset"]

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [path("calibrate/", view(self.calibrate),
                     name="retrieval_ragconfigdraft_calibrate"),
                path("<path:object_id>/progress/", view(self.progress),
                     name="retrieval_ragconfigdraft_progress"),
                path("<path:object_id>/decide/", view(self.decide),
                     name="retrieval_ragconfigdraft_decide"),
                *super().get_urls()]

    def _draft(self, request: HttpRequest, object_id: str) -> RagConfigDraft:
        draft = self.viewed_object(request, object_id)
        if draft is None:
            raise Http404("no such held change")
        return draft

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        draft = self.viewed_object(request, object_id)
        if draft is None:
            return self.not_found(request, object_id)
        checks = []
        for check in draft.gate_checks.select_related("baseline", "candidate"):
            rows = [(GATE_METRICS[m][0], check.baseline.metrics.get(m) if check.baseline else None,
                     check.candidate.metrics.get(m) if check.candidate else None, drop,
                     check.tolerances.get(m), drop > check.tolerances.get(m, 0) + 1e-9)
                    for m, drop in check.drops.items()]
            diff = (runs_compared(check.baseline, check.candidate, changed_only=True,
                                  limit=DIFF_ROWS) if check.baseline and check.candidate
                    else None)
            checks.append({"check": check, "metrics": rows, "cmp": diff})
        may_change = request.user.has_perm("retrieval.change_ragconfig")
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": str(draft), "draft": draft, "checks": checks,
                   "changed": draft.changed_fields(),
                   "may_decide": draft.held and may_change,
                   "may_override": draft.held and request.user.is_superuser,
                   "override_form": OverrideForm()}
        if draft.job is not None:
            context.update(progress=job_progress(draft.job), progress_url=reverse(
                "admin:retrieval_ragconfigdraft_progress", args=[draft.pk]))
        return TemplateResponse(request, "admin/retrieval/ragconfigdraft/draft.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        may_calibrate = request.user.has_perm("retrieval.change_ragconfig")
        return super().changelist_view(request, {**(extra_context or {}),
                                                 "may_calibrate": may_calibrate})

    def calibrate(self, request: HttpRequest) -> HttpResponse:
        """GET: the form; POST: the calibration of a config's relevance gate, as a job whose
        page follows it (users who may change RAG configs; configs of their tenants)."""
        if not request.user.has_perm("retrieval.change_ragconfig"):
            raise PermissionDenied
        form = CalibrateForm(request.POST if request.method == "POST" else None,
                             request=request)
        if form.is_valid():
            try:
                job = calibration_start(config=form.cleaned_data["config"],
                                        precision=form.cleaned_data["precision"],
                                        gate_sets_only=form.cleaned_data["gate_sets_only"],
                                        by=request.user.get_username())
            except CalibrationError as exc:
                form.add_error("config", str(exc))
            else:
                messages.success(request, f"The calibration runs as job {job.pk}; a better "
                                          "pair of thresholds comes back as a held change.")
                if request.user.has_perm("datasets.view_job"):
                    return redirect("admin:datasets_job_change", job.pk)
                return redirect("admin:retrieval_ragconfigdraft_changelist")
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": "Calibrate the relevance gate", "form": form}
        return TemplateResponse(request, "admin/retrieval/ragconfigdraft/calibrate.html",
                                context)

    def progress(self, request: HttpRequest, object_id: str) -> JsonResponse:
        draft = self._draft(request, object_id)
        if draft.job is None:
            raise Http404("the gate's job is gone")
        return JsonResponse(job_progress(draft.job))

    def decide(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: discard the held change, check it again, or override the gate (a superuser
        alone, with a reason: tenant staff act on their tenant's changes, never past the
        gate)."""
        if request.method != "POST" or not request.user.has_perm("retrieval.change_ragconfig"):
            raise PermissionDenied
        draft = self._draft(request, object_id)
        by = request.user.get_username()
        try:
            if "override" in request.POST:
                if not request.user.is_superuser:
                    raise PermissionDenied("only a superuser overrides the gate")
                form = OverrideForm(request.POST)
                if not form.is_valid():
                    raise RagConfigError({"reason": "; ".join(str(e) for e in
                                                              form.errors.get("reason", []))})
                config = rag_config_draft_override(draft=draft, overridden_by=by,
                                                   reason=form.cleaned_data["reason"])
                messages.success(request, f"The gate is overridden: {config.scope_label} is at "
                                          f"version {config.version}." if draft.experiment_id
                                 is None else f"The gate is overridden: A/B test "
                                              f"{draft.experiment_id} takes its share.")
            elif "recheck" in request.POST:
                rag_config_draft_recheck(draft=draft)
                messages.success(request, "The gate checks the change again.")
            else:
                rag_config_draft_discard(draft=draft, discarded_by=by)
                messages.success(request, f"Held change {draft.pk} discarded.")
        except RagConfigError as exc:
            messages.error(request, "; ".join(f"{k}: {v}" for k, v in exc.errors.items()))
        return redirect("admin:retrieval_ragconfigdraft_change", draft.pk)

    @admin.display(description="config", ordering="config__tenant__slug")
    def config_scope(self, draft: RagConfigDraft) -> str:
        return cut(draft.config.scope_label, 14)

    @admin.display(description="change", ordering="kind")
    def change(self, draft: RagConfigDraft) -> str:
        return stacked(draft.get_kind_display(), f"over version {draft.base_version}")

    @admin.display(description="status", ordering="status")
    def state(self, draft: RagConfigDraft) -> str:
        """Where the gate is with it (the whole of it on hover), and the version it became."""
        status = format_html('<span title="{}">{}</span>', draft.get_status_display(),
                             draft.status)
        if draft.applied_version is None:
            return status
        return stacked(status, f"version {draft.applied_version}")

    @admin.display(description="proposed", ordering="proposed_at")
    def proposed(self, draft: RagConfigDraft) -> str:
        return stacked(when(draft.proposed_at), cut(f"by {draft.proposed_by or '-'}", 10))
