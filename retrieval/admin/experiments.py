"""Admin of A/B tests: started from a version's page (a share of the config's lookups run with
that version; on a config the regression gate covers, once the gate passes the version), each
test's page shows both arms' figures from the audit, and stops the test or promotes its
candidate."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path

from audit.cited import ALPHA, MIN_SAMPLE, experiment_cited
from audit.selectors import experiment_figures
from datasets.admin.scope import ReadOnlyAdmin, TenantScopedAdmin, tenant_filter
from kbplatform.admin_columns import cut, stacked, when
from retrieval.ragconfig.config import RagConfigError
from retrieval.ragconfig.drafts import experiment_promote, experiment_start
from retrieval.ragconfig.models import ConfigExperiment, RagConfigChange
from retrieval.ragconfig.services import experiment_stop

ARMS = (ConfigExperiment.Arm.CONTROL, ConfigExperiment.Arm.CANDIDATE)


def _refusal(exc: RagConfigError) -> str:
    return "; ".join(exc.errors.values())


def experiment_started(request: HttpRequest, change: RagConfigChange) -> HttpResponse:
    """A version page's POST: route `share` per cent of the config's lookups to `change`."""
    raw = request.POST.get("share", "").strip()
    share = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 3 else 0
    try:
        experiment = experiment_start(change=change, share=share,
                                      started_by=request.user.get_username())
    except RagConfigError as exc:
        messages.error(request, f"No A/B test: {_refusal(exc)}.")
        return redirect("admin:retrieval_ragconfigchange_change", change.pk)
    if experiment.awaiting_gate:
        messages.warning(request, f"A/B test {experiment.pk} runs on no lookup yet: the "
                                  f"regression gate checks version {change.version} first, "
                                  f"and it takes {experiment.asked_share} % of the lookups of "
                                  f"{change.config.scope_label} once the gate passes it.")
        return redirect("admin:retrieval_configexperiment_change", experiment.pk)
    messages.success(request, f"A/B test {experiment.pk} runs: {experiment.share} % of the "
                              f"lookups of {change.config.scope_label} use version "
                              f"{change.version}.")
    return redirect("admin:retrieval_configexperiment_change", experiment.pk)


@admin.register(ConfigExperiment)
class ConfigExperimentAdmin(ReadOnlyAdmin, TenantScopedAdmin[ConfigExperiment]):
    # Started from a version's page; never deleted: its calls in the audit name it.
    tenant_path = "config__tenant"
    list_display = ["id", "config_scope", "candidate_version", "share", "started", "ended"]
    list_filter = [tenant_filter("config__tenant")]
    list_select_related = ["config__tenant", "config__dataset", "candidate"]

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [path("<path:object_id>/stop/", view(self.stop_view),
                     name="retrieval_configexperiment_stop"), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The test, and both arms' calls from the audit."""
        experiment = self.viewed_object(request, object_id)
        if experiment is None:
            return self.not_found(request, object_id)
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": f"A/B test {experiment.pk} of {experiment.config.scope_label}",
                   "experiment": experiment,
                   "gate_draft": experiment.drafts.order_by("-pk").first(),
                   "arms": experiment_figures(experiment_id=experiment.pk, arms=ARMS),
                   "cited": experiment_cited(experiment_id=experiment.pk, control=ARMS[0],
                                             candidate=ARMS[1]),
                   "minimum": MIN_SAMPLE, "alpha": ALPHA,
                   "can_stop": experiment.running and request.user.has_perm(
                       "retrieval.change_ragconfig")}
        return TemplateResponse(request, "admin/retrieval/configexperiment/experiment.html",
                                context)

    def stop_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: stop the test; with `promote`, its candidate becomes the config's version."""
        if request.method != "POST" or not request.user.has_perm("retrieval.change_ragconfig"):
            raise PermissionDenied
        experiment = self.viewed_object(request, object_id)
        if experiment is None:
            return self.not_found(request, object_id)
        promote = "promote" in request.POST
        before = experiment.config.version
        candidate = experiment.candidate.version
        try:
            if promote:
                proposal = experiment_promote(experiment=experiment,
                                              promoted_by=request.user.get_username())
            else:
                experiment_stop(experiment=experiment, stopped_by=request.user.get_username())
        except RagConfigError as exc:
            messages.error(request, _refusal(exc))
            return redirect("admin:retrieval_configexperiment_change", experiment.pk)
        if not promote:
            outcome = "."
        elif proposal.draft is not None:
            messages.warning(request, f"A/B test {experiment.pk} stopped; the promotion of "
                                      f"version {candidate} is held by the gate (held change "
                                      f"{proposal.draft.pk}).")
            return redirect("admin:retrieval_ragconfigdraft_change", proposal.draft.pk)
        elif proposal.config.version == before:
            outcome = (f": {proposal.config.scope_label} was already equal to version "
                       f"{candidate}; no new version.")
        else:
            outcome = (f": {proposal.config.scope_label} is at version "
                       f"{proposal.config.version}, equal to version {candidate}.")
        messages.success(request, f"A/B test {experiment.pk} stopped{outcome}")
        return redirect("admin:retrieval_configexperiment_change", experiment.pk)

    @admin.display(description="config", ordering="config__tenant__slug")
    def config_scope(self, experiment: ConfigExperiment) -> str:
        return cut(experiment.config.scope_label, 14)

    @admin.display(description="started", ordering="started_at")
    def started(self, experiment: ConfigExperiment) -> str:
        return stacked(when(experiment.started_at), f"by {experiment.started_by or '-'}")

    @admin.display(description="stopped", ordering="stopped_at")
    def ended(self, experiment: ConfigExperiment) -> str:
        """When it stopped, and below how (running: neither)."""
        if experiment.stopped_at is None:
            return "running"
        return stacked(when(experiment.stopped_at), cut(experiment.outcome, 12))

    @admin.display(description="candidate")
    def candidate_version(self, experiment: ConfigExperiment) -> str:
        return f"version {experiment.candidate.version}"
