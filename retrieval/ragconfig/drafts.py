"""Config changes through the regression gate: a change of a config the tenant's gate covers is
held as a draft, not served, until the gate passes it; a superuser may override a held draft
with a reason. Without a gate the change applies at once, as `rag_config_update` does. An A/B
test of a covered config is admitted the same way: it starts at 0 % of the lookups and takes
its share once the gate passes its candidate.

Two changes of one config at once: both writers serialise on the tenant row (as every config
write does); the later one supersedes the held draft, whose check then decides nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from datasets.models import Dataset, Tenant
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.gate import registered_gate
from retrieval.ragconfig.models import (
    DRAFT_HELD,
    ConfigExperiment,
    RagConfig,
    RagConfigChange,
    RagConfigDraft,
)
from retrieval.ragconfig.selectors import checked_settings, rag_config_for
from retrieval.ragconfig.services import experiment_stop, rag_config_update

SHARE_BOUNDS = (1, 99)

MAX_REASON_CHARS = 150


@dataclass(frozen=True)
class Proposal:
    """What became of a change: the config (as it serves now) and, when the gate holds the
    change, its draft."""

    config: RagConfig
    draft: RagConfigDraft | None = None

    @property
    def held(self) -> bool:
        return self.draft is not None


def _lock(tenant_id: int) -> None:
    Tenant.objects.select_for_update().only("pk").get(pk=tenant_id)


def rag_config_propose(*, config: RagConfig | None, tenant: Tenant, dataset: Dataset | None = None,
                       values: Mapping[str, object], changed_by: str, note: str = "",
                       kind: str = RagConfigDraft.Kind.EDIT) -> Proposal:
    """A change of the config of (tenant, dataset), as `rag_config_update` takes it, through the
    gate: applied at once when no gate covers the config, else held as a draft whose check is
    queued. A new config the gate covers is created as a copy of the config that serves its
    lookups now (nothing changes for them) and the values asked for are held over it."""
    gate = registered_gate()
    if gate is None or not gate.covers(tenant_id=tenant.pk,
                                       dataset_id=dataset.pk if dataset else None):
        return Proposal(rag_config_update(config=config, tenant=tenant, dataset=dataset,
                                          values=values, changed_by=changed_by, note=note))
    with transaction.atomic():
        _lock(tenant.pk)
        rows = RagConfig.objects.select_for_update()
        current = (rows.filter(pk=config.pk) if config is not None
                   else rows.filter(tenant=tenant, dataset=dataset)).first()
        if config is not None and current is None:
            raise RagConfig.DoesNotExist(f"RagConfig {config.pk} was deleted")
        if current is None:
            serving = rag_config_for(tenant_id=tenant.pk,
                                     dataset_ids=[dataset.pk] if dataset else [])
            current = rag_config_update(
                config=None, tenant=tenant, dataset=dataset, changed_by=changed_by,
                values=RagConfigConverter.to_dict(serving.settings),
                note="created as the config that served its lookups; the gate holds the "
                     "change")
        before = RagConfigConverter.to_dict(current.to_settings())
        after = RagConfigConverter.to_dict(checked_settings(tenant=tenant, values=values,
                                                            base=current.to_settings()))
        if before == after:
            return Proposal(current)
        now = timezone.now()
        # An A/B test's admission is not a change of the config: it stays.
        current.drafts.filter(status__in=DRAFT_HELD).exclude(
            kind=RagConfigDraft.Kind.EXPERIMENT).update(
            status=RagConfigDraft.Status.SUPERSEDED, decided_at=now, decided_by=changed_by)
        draft = RagConfigDraft.objects.create(
            config=current, kind=kind, base_version=current.version, settings=after,
            note=note[:200], proposed_by=changed_by)
        draft.job = gate.check(draft)
        draft.save(update_fields=["job"])
    return Proposal(current, draft)


def _applied(draft: RagConfigDraft, *, changed_by: str, note: str) -> RagConfig:
    """The draft served: a new version of its config, or an A/B test's share taken."""
    draft.status = RagConfigDraft.Status.APPLIED
    if draft.experiment is not None:
        ConfigExperiment.objects.filter(pk=draft.experiment.pk, stopped_at__isnull=True).update(
            share=F("asked_share"))
        return draft.config
    config = rag_config_update(config=draft.config, tenant=draft.config.tenant,
                               dataset=draft.config.dataset, values=draft.settings,
                               changed_by=changed_by, note=note[:200])
    draft.applied_version = config.version
    return config


def _stale(draft: RagConfigDraft) -> str:
    """Why the draft can no longer be served as it was checked, or "": its config moved to
    another version (its baseline no longer serves), or its A/B test ended."""
    if draft.config.version != draft.base_version:
        return (f"the config changed to version {draft.config.version} while the gate checked "
                f"this change over version {draft.base_version}")
    if draft.experiment is not None and not draft.experiment.running:
        return f"A/B test {draft.experiment_id} has ended"
    return ""


def _held(draft_id: int) -> RagConfigDraft:
    """The draft, locked behind its tenant, with its config."""
    draft = RagConfigDraft.objects.select_related("config__tenant").get(pk=draft_id)
    _lock(draft.config.tenant_id)
    return RagConfigDraft.objects.select_related("config__tenant", "config__dataset",
                                                 "experiment").get(pk=draft_id)


def rag_config_draft_decide(*, draft_id: int, passed: bool, verdict: str) -> RagConfigDraft:
    """The gate's end: a passed draft is applied (a new version of its config, or its A/B
    test's share), a failed one stays held with the verdict. A draft no longer checking
    (superseded, discarded) is left as it is; one whose config changed since it was made (its
    baseline is not what serves) or whose A/B test ended is superseded."""
    with transaction.atomic():
        draft = _held(draft_id)
        if draft.status != RagConfigDraft.Status.CHECKING:
            return draft
        draft.verdict, draft.decided_at, draft.decided_by = verdict[:1000], timezone.now(), "gate"
        stale = _stale(draft)
        if stale:
            draft.status, draft.verdict = RagConfigDraft.Status.SUPERSEDED, stale[:1000]
        elif passed:
            _applied(draft, changed_by=draft.proposed_by,
                     note=f"{draft.note or draft.kind}; the gate passed it (held change "
                          f"{draft.pk})")
        else:
            draft.status = RagConfigDraft.Status.HELD
        draft.save()
    return draft


def rag_config_draft_recheck(*, draft: RagConfigDraft) -> RagConfigDraft:
    """Check a held draft again (after the gate could not run, its worker died, or the index
    changed)."""
    gate = registered_gate()
    with transaction.atomic():
        draft = _held(draft.pk)
        if not draft.recheckable:
            raise RagConfigError({"draft": f"held change {draft.pk} is {draft.status}"})
        if gate is None:
            raise RagConfigError({"draft": "no gate is registered"})
        draft.status, draft.verdict = RagConfigDraft.Status.CHECKING, ""
        draft.job = gate.check(draft)
        draft.save()
    return draft


def rag_config_draft_override(*, draft: RagConfigDraft, overridden_by: str, reason: str
                              ) -> RagConfig:
    """Serve a held draft against the gate's verdict (a superuser's decision: the caller checks
    who may); the reason goes to the config's history with the new version."""
    reason = " ".join(reason.split())
    if not reason:
        raise RagConfigError({"reason": "say why the gate is overridden"})
    if len(reason) > MAX_REASON_CHARS:
        raise RagConfigError({"reason": f"{MAX_REASON_CHARS} characters at most"})
    with transaction.atomic():
        draft = _held(draft.pk)
        if not draft.held:
            raise RagConfigError({"draft": f"held change {draft.pk} is {draft.status}"})
        stale = _stale(draft)
        if stale:
            raise RagConfigError({"draft": f"{stale}: make the change again"})
        config = _applied(draft, changed_by=overridden_by,
                          note=f"gate overridden by {overridden_by} (held change {draft.pk}): "
                               f"{reason}")
        draft.override_reason, draft.decided_by = reason, overridden_by
        draft.decided_at = timezone.now()
        draft.save()
    return config


def rag_config_draft_discard(*, draft: RagConfigDraft, discarded_by: str) -> RagConfigDraft:
    """Drop a held draft; an A/B test's admission discarded ends the test."""
    with transaction.atomic():
        draft = _held(draft.pk)
        if not draft.held:
            raise RagConfigError({"draft": f"held change {draft.pk} is {draft.status}"})
        draft.status, draft.decided_by = RagConfigDraft.Status.DISCARDED, discarded_by
        draft.decided_at = timezone.now()
        draft.save()
        if draft.experiment is not None and draft.experiment.running:
            experiment_stop(experiment=draft.experiment, stopped_by=discarded_by,
                            outcome=f"stopped: its gate check (held change {draft.pk}) "
                                    "was discarded")
    return draft


def rag_config_rollback(*, change: RagConfigChange, changed_by: str) -> Proposal:
    """A new version of the change's config equal to the version `change` made, through the
    gate.

    Fields added since that version take their built-in defaults, as they did then; values
    the rules refuse today raise RagConfigError, as an edit would. Equal to the config as it
    is: nothing is written and the version stays.
    """
    config = change.config
    return rag_config_propose(config=config, tenant=config.tenant, dataset=config.dataset,
                              values=change.settings(), changed_by=changed_by,
                              note=f"rollback to version {change.version}",
                              kind=RagConfigDraft.Kind.ROLLBACK)


def experiment_start(*, change: RagConfigChange, share: int, started_by: str
                     ) -> ConfigExperiment:
    """An A/B test of the change's config: `share` per cent of its lookups run with version
    `change`. On a config the gate covers, the test starts at 0 % and its candidate is held as
    a draft (kind "experiment") whose check gives it the share when it passes (or a superuser
    overrides). Refused (RagConfigError) while another test runs on it, for the version that
    serves, for a share outside 1–99 and for a version today's rules refuse."""
    errors: dict[str, str] = {}
    if not SHARE_BOUNDS[0] <= share <= SHARE_BOUNDS[1]:
        errors["share"] = "a share of lookups between 1 and 99 per cent"
    gate = registered_gate()
    config = change.config
    covered = gate is not None and gate.covers(tenant_id=config.tenant_id,
                                               dataset_id=config.dataset_id)
    with transaction.atomic():
        _lock(config.tenant_id)
        config = RagConfig.objects.select_related("experiment", "tenant", "dataset").get(
            pk=config.pk)
        if config.experiment is not None:
            errors["experiment"] = (f"A/B test {config.experiment.pk} runs on this config: "
                                    "stop it first")
        if change.version == config.version:
            errors["version"] = f"version {change.version} is the one serving"
        try:
            candidate = checked_settings(tenant=config.tenant, values=change.settings())
        except RagConfigError as exc:
            errors.update(exc.errors)
        if errors:
            raise RagConfigError(errors)
        experiment = ConfigExperiment.objects.create(
            config=config, candidate=change, share=0 if covered else share, asked_share=share,
            started_by=started_by)
        RagConfig.objects.filter(pk=config.pk).update(experiment=experiment)
        if covered:
            assert gate is not None
            draft = RagConfigDraft.objects.create(
                config=config, kind=RagConfigDraft.Kind.EXPERIMENT, experiment=experiment,
                base_version=config.version, proposed_by=started_by,
                settings=RagConfigConverter.to_dict(candidate),
                note=f"A/B test {experiment.pk}: version {change.version} for {share} %")
            draft.job = gate.check(draft)
            draft.save(update_fields=["job"])
    return experiment


def experiment_promote(*, experiment: ConfigExperiment, promoted_by: str) -> Proposal:
    """End an A/B test and make its candidate the config's new version, through the gate: a
    covered config holds the promotion as a draft (the test ends either way)."""
    candidate = experiment.candidate
    with transaction.atomic():
        experiment_stop(experiment=experiment, stopped_by=promoted_by,
                        outcome=f"promoted: version {candidate.version}")
        config = RagConfig.objects.select_related("tenant", "dataset").get(
            pk=experiment.config_id)
        proposal = rag_config_propose(
            config=config, tenant=config.tenant, dataset=config.dataset,
            values=candidate.settings(), changed_by=promoted_by, kind=RagConfigDraft.Kind.PROMOTION,
            note=f"promoted from A/B test {experiment.pk} (version {candidate.version})")
        outcome = (f"promoted: version {candidate.version} held by the gate (held change "
                   f"{proposal.draft.pk})" if proposal.draft is not None
                   else f"promoted: version {candidate.version} serves")
        ConfigExperiment.objects.filter(pk=experiment.pk).update(outcome=outcome[:200])
    return proposal
