"""The regression gate on config changes: a held change (retrieval's RagConfigDraft) is measured
on the tenant's gate question sets against the version it was made over, and passes when no
metric drops by more than the set's tolerance.

The sets are read once, when the change is held (GateRule rows): every check of it measures
them as they were then. What would loosen a gate set — a tolerance raised, the gate unticked,
its questions, dataset or tenant changed, the set deleted — is a superuser's to do
(`question_set_loosening`, enforced by the admin); tightening is open to tenant staff.

Registered as retrieval's ConfigGate when Django starts (evaluation/apps.py): retrieval holds
the change, this floor judges it. `manage.py gate_config` runs the same measurement in process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from datasets.jobs.progress import JOB_ID, job_create, job_update
from datasets.models import Dataset, Job
from evaluation.models import GATE_METRICS, EvaluationRun, GateCheck, GateRule, QuestionSet
from evaluation.runs import run_batch
from retrieval.ragconfig.drafts import rag_config_draft_decide
from retrieval.ragconfig.models import RagConfig, RagConfigDraft

GATE_TASK = "evaluation.tasks.gate_task"
SLACK = 1e-9  # a drop equal to the tolerance passes, whatever the float rounding


def gate_sets(*, tenant_id: int, dataset_id: int | None) -> QuerySet[QuestionSet]:
    """The gate sets whose lookups the config of (tenant, dataset) serves: a dataset's config
    serves its dataset's sets; the tenant default serves the sets of every dataset and of the
    datasets without a config of their own."""
    sets = QuestionSet.objects.filter(tenant_id=tenant_id, gate=True).select_related("tenant")
    if dataset_id is not None:
        return sets.filter(dataset_id=dataset_id)
    own = RagConfig.objects.filter(tenant_id=tenant_id, dataset__isnull=False).values(
        "dataset_id")
    return sets.filter(Q(dataset__isnull=True) | ~Q(dataset_id__in=own))


def question_set_loosening(*, stored: QuestionSet, changed: QuestionSet) -> list[str]:
    """How a change of a gate set (`stored`, as saved; `changed`, as it would be) would let a
    worse config through: each reason in words; none for a set that is not part of the gate
    or a change that only tightens it (a tolerance lowered, the set renamed)."""
    if not stored.gate:
        return []
    reasons = [] if changed.gate else ["the set would no longer be part of the gate"]
    before, after = stored.tolerances(), changed.tolerances()
    reasons += [f"the tolerance of {GATE_METRICS[m][0]} would rise from {before[m]:g} to "
                f"{after[m]:g}" for m in GATE_METRICS if after[m] > before[m]]
    if changed.questions != stored.questions:
        reasons.append("its questions would change (dropping or adding questions changes "
                       "what a drop is)")
    if changed.dataset_id != stored.dataset_id:
        reasons.append("it would guard another config (its dataset would change)")
    if changed.tenant_id != stored.tenant_id:
        reasons.append("it would guard another tenant")
    return reasons


def metric_drops(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Each gate metric's drop from `before` to `after`, of the figures as a run stores them
    (to the fourth decimal)."""
    return {m: round(round(before[m], 4) - round(after[m], 4), 4) for m in GATE_METRICS
            if m in before and m in after}


def beyond_tolerance(drops: Mapping[str, float], tolerances: Mapping[str, float]) -> list[str]:
    """The metrics whose drop exceeds its tolerance."""
    return [m for m, drop in drops.items() if drop > float(tolerances[m]) + SLACK]


@dataclass(frozen=True)
class SetVerdict:
    """One set measured: both runs, each metric's drop, and whether every drop is tolerated."""

    rule: GateRule
    baseline: EvaluationRun
    candidate: EvaluationRun
    drops: dict[str, float]

    @property
    def tolerances(self) -> dict[str, float]:
        return {m: float(self.rule.tolerances[m]) for m in GATE_METRICS}

    @property
    def failed(self) -> list[str]:
        """The metrics that dropped beyond their tolerance."""
        return beyond_tolerance(self.drops, self.tolerances)

    @property
    def passed(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        figures = ", ".join(
            f"{GATE_METRICS[m][0]} {self.baseline.metrics[m]:.3f} → "
            f"{self.candidate.metrics[m]:.3f}" for m in self.drops)
        failed = "; ".join(f"{GATE_METRICS[m][0]} dropped {self.drops[m]:.3f} (tolerance "
                           f"{self.tolerances[m]:.3f})" for m in self.failed)
        return f"{self.rule.name}: {failed or 'passed'} ({figures})"


def rule_dataset_ids(rule: GateRule, tenant_id: int) -> list[int]:
    """The datasets a rule's questions search: its dataset, or every activated one of the
    tenant."""
    if rule.dataset_id:
        return [rule.dataset_id]
    return list(Dataset.objects.filter(tenant_id=tenant_id, activated=True)
                .values_list("pk", flat=True))


def _run(*, rule: GateRule, tenant_id: int, scope: str, version: int | None,
         settings: dict[str, Any], created_by: str) -> EvaluationRun:
    return EvaluationRun.objects.create(
        tenant_id=tenant_id, kind=EvaluationRun.Kind.BATCH,
        name=f"gate: {rule.name}", config_scope=scope, config_version=version,
        settings=settings, questions=rule.questions, created_by=created_by,
        dataset_ids=rule_dataset_ids(rule, tenant_id))


def _shifted(progress: Callable[[int], None] | None, offset: int
             ) -> Callable[[int], None] | None:
    """`progress` of one run's questions, counted after the `offset` asked before it."""
    if progress is None:
        return None
    return lambda done: progress(offset + done)


def gate_measure(*, config: RagConfig, candidate: dict[str, Any], candidate_label: str,
                 rules: Sequence[GateRule], created_by: str,
                 progress: Callable[[int], None] | None = None) -> list[SetVerdict]:
    """Each rule's questions asked under the config as it serves (baseline) and under
    `candidate` (every setting), both on the serving index now; `progress(done)` counts the
    questions asked. Raises RunUnavailable when a lookup answers UNAVAILABLE."""
    baseline = config.setting_values()
    asked = 0
    verdicts = []
    for rule in rules:
        runs = []
        for scope, version, settings in ((config.scope_label, config.version, baseline),
                                         (candidate_label, None, candidate)):
            run = _run(rule=rule, tenant_id=config.tenant_id, scope=scope, version=version,
                       settings=settings, created_by=created_by)
            run_batch(run, None, _shifted(progress, asked))
            asked += len(rule.questions)
            run.refresh_from_db()
            runs.append(run)
        base, cand = runs
        verdicts.append(SetVerdict(rule, base, cand, metric_drops(base.metrics, cand.metrics)))
    return verdicts


def covering_rules(config: RagConfig, draft: RagConfigDraft | None = None) -> list[GateRule]:
    """The gate sets covering `config`, as rules as they stand now (unsaved; a held change's
    when `draft` is given)."""
    return [GateRule.of(s, draft) for s in gate_sets(tenant_id=config.tenant_id,
                                                     dataset_id=config.dataset_id)]


class EvaluationGate:
    """retrieval's ConfigGate: the tenant's gate question sets, measured as a job."""

    def covers(self, *, tenant_id: int, dataset_id: int | None) -> bool:
        return gate_sets(tenant_id=tenant_id, dataset_id=dataset_id).exists()

    def check(self, draft: RagConfigDraft) -> Job:
        """The check of `draft` as a job; its rules are the gate sets as they are now, read
        at its first check and kept for every later one."""
        config = draft.config
        if not draft.gate_rules.exists():
            GateRule.objects.bulk_create(covering_rules(config, draft))
        total = 2 * sum(len(q) for q in draft.gate_rules.values_list("questions", flat=True))
        job = job_create(kind=Job.Kind.GATE, task=GATE_TASK, args=(JOB_ID, draft.pk),
                         tenant_id=config.tenant_id, dataset=config.dataset, total=total,
                         detail={"draft": draft.pk, "config": config.scope_label})
        job_update(job, log=f"queued: the gate of held change {draft.pk} of "
                            f"{config.scope_label} over version {draft.base_version}")
        return job


def gate_check_execute(*, draft: RagConfigDraft, job: Job) -> RagConfigDraft:
    """The gate job's work: measure every gate set, store the checks, decide the draft."""
    config = RagConfig.objects.select_related("tenant", "dataset").get(pk=draft.config_id)
    if draft.status != RagConfigDraft.Status.CHECKING:
        job_update(job, status=Job.Status.SUCCEEDED, log=f"nothing to check: the change is "
                                                         f"{draft.status}")
        return draft
    rules = list(draft.gate_rules.all())
    total = 2 * sum(len(r.questions) for r in rules)
    job_update(job, total=total, done=0, log=f"{len(rules)} gate sets as they were when the "
                                            f"change was held, {total} lookups")
    verdicts = gate_measure(
        config=config, candidate=draft.settings, rules=rules, created_by="gate",
        candidate_label=f"{config.scope_label}, held change {draft.pk}",
        progress=lambda done: job_update(job, done=done))
    for verdict in verdicts:
        GateCheck.objects.create(
            draft=draft, question_set_id=verdict.rule.question_set_id, name=verdict.rule.name,
            baseline=verdict.baseline, candidate=verdict.candidate,
            tolerances=verdict.tolerances, drops=verdict.drops, passed=verdict.passed)
    passed = all(v.passed for v in verdicts)
    summary = (" · ".join(v.summary() for v in verdicts)
               or "no gate set covered the config when the change was held")
    decided = rag_config_draft_decide(draft_id=draft.pk, passed=passed, verdict=summary)
    job_update(job, status=Job.Status.SUCCEEDED, detail={"passed": passed},
               log=f"{'passed' if passed else 'regression'}: the change is {decided.status}"
                   f" ({timezone.now():%H:%M:%S})")
    return decided
