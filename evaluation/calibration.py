"""Per-tenant calibration of the relevance gate (issue 39): the two thresholds the config's gate
reads (EMPTY below the first; PRECISE from the second) refitted on the tenant's own gate
question sets — and, where the tenant keeps its callers' questions, the questions whose
evidence its agents confirmed (audit/selectors.py `confirmed_questions`) — and proposed as a
change the regression gate checks before it serves.

Every setting of the config stays; each pair of thresholds tried is measured by the real
lookups of every question (a translation is cached in the process, so only the first pass waits
for it; a config that asks a chat model to rewrite or judge asks it on every pass): first the
reference threshold over REFERENCE_GRID at the serving precise threshold, then the precise
threshold over PRECISE_GRID at the reference chosen. A pair the regression gate would hold (a
gate set's metric dropping beyond its tolerance from what serves) is never chosen: more
off-topic questions left EMPTY do not buy away right answers. A pair scores by its correct
answers (the right document first; EMPTY for an off-topic question), then by whether its
PRECISE answers are right at least `precision` of the time, then by how many right PRECISE
answers it gives, then by how little it moves from what serves. The serving pair is kept unless
another answers MIN_GAIN more questions correctly, or as many while its PRECISE answers reach
`precision` where the serving pair's do not: a threshold moved for one question of a few dozen
says more of the question than of the tenant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction

from audit.privacy import raw_queries
from audit.selectors import ConfirmedQuestion, confirmed_questions
from datasets.jobs.progress import GOING, JOB_ID, job_create, job_update
from datasets.models import Job, Tenant
from datasets.tenancy.permissions import PLATFORM
from evaluation.gate import (
    beyond_tolerance,
    covering_rules,
    metric_drops,
    rule_dataset_ids,
)
from evaluation.models import GateRule
from evaluation.question_sets import BatchQuestion
from evaluation.runs import Answered, RunUnavailable, batch_metrics
from retrieval.index.versions import IndexNotReady, serving_index
from retrieval.lookup.relevance import THRESHOLDS, gate_in_force
from retrieval.lookup.service import lookup_knowledge
from retrieval.ragconfig.drafts import rag_config_propose
from retrieval.ragconfig.models import DRAFT_HELD, RagConfig, RagConfigDraft
from retrieval.types import EvidenceStatus, RelevanceLevel, SearchFilters

REFERENCE_GRID = tuple(round(0.05 * i, 2) for i in range(2, 15))  # 0.10 … 0.70
PRECISE_GRID = tuple(round(0.05 * i, 2) for i in range(6, 19))  # 0.30 … 0.90
PRECISION = 0.9
PRECISION_RANGE = (0.5, 1.0)  # what an operator may ask of the PRECISE answers
MIN_GAIN = 2
MIN_ON_TOPIC = 10
MIN_OFF_TOPIC = 5
CALIBRATE_TASK = "evaluation.tasks.calibrate_task"
PROGRESS_EVERY = 20  # lookups between two writes of a calibration job's progress


class CalibrationError(ValueError):
    """The gate sets cannot calibrate the config: why, in words."""


@dataclass(frozen=True)
class Score:
    """A pair of thresholds, measured on every gate question."""

    reference: float
    precise: float
    right_first: int  # on-topic questions whose right document came first
    off_topic_empty: int  # off-topic questions answered EMPTY
    on_topic_empty: int  # on-topic questions answered EMPTY
    precise_answers: int  # answers PRECISE (an off-topic one too)
    precise_right: int  # … whose first document is right
    sets: tuple[dict[str, float], ...]  # each gate set's metrics, as the gate computes them

    @property
    def correct(self) -> int:
        return self.right_first + self.off_topic_empty

    @property
    def precision(self) -> float | None:
        """The share of PRECISE answers that were right; None: none was PRECISE."""
        return self.precise_right / self.precise_answers if self.precise_answers else None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "correct": self.correct, "precision": self.precision}


@dataclass(frozen=True)
class Calibration:
    """What the gate questions say of the config's thresholds."""

    version: int  # the config's version measured
    gate: str  # DISTANCE or MODEL: the gate the config's lookups are judged by
    fields: tuple[str, str]  # the settings of its reference and precise thresholds
    on_topic: int  # of them, `confirmed` from the evidence agents confirmed
    off_topic: int
    confirmed: int
    precision: float
    serving: Score
    chosen: Score
    tried: tuple[Score, ...]

    @property
    def changed(self) -> bool:
        return (self.chosen.reference, self.chosen.precise) != (self.serving.reference,
                                                                self.serving.precise)

    @property
    def values(self) -> dict[str, float]:
        """The change to propose: the chosen thresholds, by setting."""
        return dict(zip(self.fields, (self.chosen.reference, self.chosen.precise), strict=True))

    def summary(self) -> str:
        """The outcome in words (a held change's note: at most 200 characters)."""
        (reference, precise), before, after = self.fields, self.serving, self.chosen
        asked = self.on_topic + self.off_topic
        if not self.changed:
            return (f"{reference} {before.reference:g}, {precise} {before.precise:g} kept: no "
                    f"pair did better ({before.correct} of {asked} answered correctly)")
        return (f"calibrated: {reference} {before.reference:g} → {after.reference:g}, "
                f"{precise} {before.precise:g} → {after.precise:g}; {before.correct} → "
                f"{after.correct} of {asked} correct (right first {before.right_first} → "
                f"{after.right_first})")


def _within_the_gate(score: Score, serving: Score, rules: Sequence[GateRule]) -> bool:
    """Whether no gate set's metric drops from `serving` to `score` beyond its tolerance, as
    the gate reckons it: a pair the regression gate would hold is never proposed."""
    return not any(beyond_tolerance(metric_drops(before, after), rule.tolerances)
                   for rule, before, after in zip(rules, serving.sets, score.sets, strict=True))


def _meets(score: Score, precision: float) -> bool:
    """Its PRECISE answers are right at least `precision` of the time (none: they are not)."""
    return score.precision is not None and score.precision >= precision


def _rank(score: Score, precision: float, serving: Score) -> tuple[float, ...]:
    moved = abs(score.reference - serving.reference) + abs(score.precise - serving.precise)
    return (score.correct, _meets(score, precision), score.precise_right, -moved)


@dataclass(frozen=True)
class _Asked:
    question: BatchQuestion
    filters: SearchFilters  # what its lookup searches
    gate_set: int | None  # the place of its gate set among the rules; None: confirmed


def _questions(rules: Sequence[GateRule], confirmed: Sequence[ConfirmedQuestion],
               tenant_id: int) -> Iterator[_Asked]:
    """Each question with what its lookup searches: a gate set's, its rule's datasets; a
    confirmed one, the datasets its call searched (not the call's own filters, nor the person
    it was made for: as a gate set's questions, it searches as the platform)."""
    for n, rule in enumerate(rules):
        filters = SearchFilters(tenant_id=tenant_id, access=PLATFORM,
                                dataset_ids=tuple(rule_dataset_ids(rule, tenant_id)))
        for row in rule.questions:
            question = BatchQuestion.of_json(row)
            yield _Asked(question, replace(filters, call=question.narrowed), n)
    for n, asked in enumerate(confirmed, start=1):
        yield _Asked(BatchQuestion(id=f"confirmed-{n}", query=asked.query,
                                   expected=tuple(str(d) for d in asked.documents)),
                     SearchFilters(tenant_id=tenant_id, access=PLATFORM,
                                   dataset_ids=asked.dataset_ids), None)


def calibrate(*, config: RagConfig, rules: Sequence[GateRule],
              confirmed: Sequence[ConfirmedQuestion] = (), precision: float = PRECISION,
              progress: Callable[[int, int], None] | None = None) -> Calibration:
    """The thresholds of `config`'s gate that answer best its gate questions and the questions
    whose evidence its agents `confirmed` (on-topic, expecting the documents confirmed, each
    searching the datasets its call searched; see the module); `progress(done, total)` counts the
    lookups. Raises CalibrationError when they are too few of either kind, RunUnavailable when
    a lookup answers UNAVAILABLE."""
    asked = list(_questions(rules, confirmed, config.tenant_id))
    on_topic = sum(1 for a in asked if a.question.expected)
    off_topic = len(asked) - on_topic
    if on_topic < MIN_ON_TOPIC or off_topic < MIN_OFF_TOPIC:
        raise CalibrationError(
            f"calibrating needs at least {MIN_ON_TOPIC} on-topic and {MIN_OFF_TOPIC} "
            f"off-topic questions of the gate sets covering {config.scope_label} and of "
            f"confirmed evidence; there are {on_topic} and {off_topic} (an off-topic question "
            f"expects no document)")
    settings = config.setting_values()
    try:
        embedder = serving_index().embedder.name
    except IndexNotReady as exc:
        raise CalibrationError(f"nothing to calibrate on: {exc}") from exc
    gate, _ = gate_in_force(settings["relevance_gate"], embedder)
    fields = THRESHOLDS[gate]
    total = len(asked) * (1 + len(REFERENCE_GRID) + len(PRECISE_GRID))
    measured: dict[tuple[float, float], Score] = {}

    def score(reference: float, precise: float) -> Score:
        pair = (round(reference, 4), round(precise, 4))
        if pair not in measured:
            offset = len(measured) * len(asked)
            measured[pair] = _measure(
                asked, len(rules), {**settings, fields[0]: pair[0], fields[1]: pair[1]}, pair,
                progress=None if progress is None else lambda done: progress(offset + done,
                                                                             total))
        return measured[pair]

    serving = score(float(settings[fields[0]]), float(settings[fields[1]]))

    def better(scores: Iterator[Score], than: Score) -> Score:
        return max((than, *(s for s in scores if _within_the_gate(s, serving, rules))),
                   key=lambda s: _rank(s, precision, serving))

    best = better((score(r, serving.precise) for r in REFERENCE_GRID if r <= serving.precise),
                  serving)
    best = better((score(best.reference, p) for p in PRECISE_GRID if p >= best.reference), best)
    gained = best.correct >= serving.correct + MIN_GAIN or (
        best.correct >= serving.correct and _meets(best, precision)
        and not _meets(serving, precision))
    return Calibration(version=config.version, gate=gate, fields=fields, on_topic=on_topic,
                       off_topic=off_topic, confirmed=len(confirmed), precision=precision,
                       serving=serving, chosen=best if gained else serving,
                       tried=tuple(measured.values()))


def _measure(asked: Sequence[_Asked], sets: int, settings: dict[str, Any],
             pair: tuple[float, float], *, progress: Callable[[int], None] | None) -> Score:
    answers: list[tuple[_Asked, Answered]] = []
    precise = precise_right = 0
    for done, one in enumerate(asked, start=1):
        result = lookup_knowledge(filters=one.filters, query=one.question.query,
                                  overrides=settings)
        if result.evidence_status == EvidenceStatus.UNAVAILABLE:
            # A confirmed question's id only: an error may quote the question it failed on.
            failed = f": {result.error}" if one.gate_set is not None else ""
            raise RunUnavailable(f"question {one.question.id}{failed}")
        answer = Answered.of(one.question, result)
        answers.append((one, answer))
        if result.relevance_level is RelevanceLevel.PRECISE:
            precise += 1
            precise_right += bool(answer.scores and answer.scores["first"])
        if progress is not None:
            progress(done)
    on_topic = [a for _, a in answers if a.scores is not None]
    return Score(
        reference=pair[0], precise=pair[1],
        right_first=sum(bool(a.scores and a.scores["first"]) for a in on_topic),
        off_topic_empty=sum(a.hit for _, a in answers if a.scores is None),
        on_topic_empty=sum(not a.ranking for a in on_topic),
        precise_answers=precise, precise_right=precise_right,
        sets=tuple(batch_metrics([a for one, a in answers if one.gate_set == n])
                   for n in range(sets)))


def guarded_rules(config: RagConfig) -> list[GateRule]:
    """The gate sets covering `config`; CalibrationError when none does: a calibrated change
    would serve unchecked."""
    rules = covering_rules(config)
    if not rules:
        raise CalibrationError(f"no gate question set covers {config.scope_label}, so a "
                               "calibrated change would serve unchecked: name one under "
                               "Evaluation › Question sets first")
    return rules


def calibration_hold(*, config: RagConfig, calibration: Calibration, by: str
                     ) -> RagConfigDraft | None:
    """The chosen thresholds proposed as a change of `config` through the gate: the held
    change (its check queued), or None when nothing better was found. Raises CalibrationError,
    proposing nothing, when the config moved to another version since it was measured, when
    another change of it is held (this one would supersede it), or when no gate set covers it
    any more (the change would serve unchecked)."""
    if not calibration.changed:
        return None
    current = RagConfig.objects.select_related("tenant", "dataset").get(pk=config.pk)
    if current.version != calibration.version:
        raise CalibrationError(f"{current.scope_label} moved from version "
                               f"{calibration.version} to {current.version} while it was "
                               "calibrated: calibrate it again")
    held = current.drafts.filter(status__in=DRAFT_HELD).exclude(
        kind=RagConfigDraft.Kind.EXPERIMENT).first()
    if held is not None:
        raise CalibrationError(f"a change of {current.scope_label} is held already (held "
                               f"change {held.pk}): decide it, then calibrate again")
    guarded_rules(current)
    return rag_config_propose(config=current, tenant=current.tenant, dataset=current.dataset,
                              values=calibration.values, changed_by=by,
                              note=calibration.summary()).draft


def calibration_start(*, config: RagConfig, precision: float, gate_sets_only: bool,
                      by: str) -> Job:
    """The calibration of `config` as a job (kind `calibrate`), which proposes its change
    through the gate when it ends. One calibration per tenant at a time (each asks its
    questions up to 27 times). Raises CalibrationError when another one of the tenant is
    queued or running, or when no gate set covers the config (its change would serve
    unchecked)."""
    rules = guarded_rules(config)
    confirmed = not gate_sets_only and raw_queries(config.tenant).kept
    with transaction.atomic():  # the task is sent once its job says what it is queued for
        Tenant.objects.select_for_update().only("pk").get(pk=config.tenant_id)
        going = Job.objects.filter(kind=Job.Kind.CALIBRATE, tenant_id=config.tenant_id,
                                   status__in=GOING).first()
        if going is not None:
            raise CalibrationError(f"a calibration of {config.tenant.slug} is queued or "
                                   f"running already (job {going.pk})")
        job = job_create(kind=Job.Kind.CALIBRATE, task=CALIBRATE_TASK,
                         args=(JOB_ID, config.pk), tenant_id=config.tenant_id,
                         dataset=config.dataset,
                         detail={"config": config.scope_label, "version": config.version,
                                 "precision": precision, "gate_sets_only": gate_sets_only,
                                 "by": by})
        job_update(job, log=f"queued: the relevance gate of {config.scope_label}, version "
                            f"{config.version}, calibrated on {len(rules)} gate set(s)"
                            + (" and the questions whose evidence agents confirmed"
                               if confirmed else ""))
    return job


def calibration_execute(*, job: Job, config_id: int) -> RagConfigDraft | None:
    """The calibration job's work: measure, log the figures, hold the change (or not)."""
    config = RagConfig.objects.select_related("tenant", "dataset").filter(pk=config_id).first()
    if config is None:
        raise CalibrationError("the config was deleted before its calibration ran")
    rules = guarded_rules(config)
    confirmed = [] if job.detail.get("gate_sets_only") else confirmed_questions(
        tenant=config.tenant, config_id=config.pk)

    def progress(done: int, total: int) -> None:  # at most `total`: the grids end early
        if done % PROGRESS_EVERY == 0 or job.total != total:
            job_update(job, done=done, total=total)

    calibration = calibrate(config=config, rules=rules, confirmed=confirmed,
                            precision=float(job.detail.get("precision", PRECISION)),
                            progress=progress)
    job_update(job, done=job.total, detail={
        "values": calibration.values, "serving": calibration.serving.as_dict(),
        "chosen": calibration.chosen.as_dict()},
        log=f"{calibration.on_topic} on-topic ({calibration.confirmed} from confirmed "
            f"evidence) and {calibration.off_topic} off-topic questions, "
            f"{len(calibration.tried)} pairs of thresholds tried under the {calibration.gate} "
            f"gate: {calibration.summary()}")
    draft = calibration_hold(config=config, calibration=calibration,
                             by=str(job.detail.get("by", "calibration")))
    job_update(job, status=Job.Status.SUCCEEDED, detail={"draft": draft.pk if draft else None},
               log=f"held as change {draft.pk}: the regression gate checks it before it serves"
               if draft is not None else "nothing proposed: the serving thresholds stay")
    return draft
