"""The cited rates: of the evidence calls served as READY, how much their callers cited (the
evidence guard, or the call's own answer, confirmed it) and how they rated it (rate_evidence);
per config and version, rank, A/B arm (with a significance test), dataset and document. Read
from ServedEvidence: ids and counts, never text."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from audit.models import AnswerCheck, Rating, ServedEvidence

# Below this many served evidence items (the cited rate) or calls (cited per call) in either
# arm, an A/B test's comparison says "not enough data yet" rather than a p-value.
MIN_SAMPLE = 30
ALPHA = 0.05  # a difference with a smaller p-value is called significant
DOCUMENTS_SHOWN = 10  # per list of documents (served and never cited; cited most)
EXPERIMENT_CALLS_MAX = 200_000  # calls of an A/B test read for cited per call (latest first)


@dataclass(frozen=True)
class Cited:
    """Served evidence items and how many of them were cited, rated helpful, not helpful."""

    served: int = 0
    cited: int = 0
    helpful: int = 0
    not_helpful: int = 0

    @property
    def rate(self) -> float | None:
        """The cited rate: cited ÷ served."""
        return self.cited / self.served if self.served else None

    def as_dict(self) -> dict[str, Any]:
        return {"served": self.served, "cited": self.cited, "cited_rate": _round(self.rate),
                "helpful": self.helpful, "not_helpful": self.not_helpful}


@dataclass(frozen=True)
class Checked:
    """Sentences of answers verify_answer checked, and how many nothing served supports."""

    sentences: int = 0
    unsupported: int = 0

    @property
    def rate(self) -> float | None:
        return self.unsupported / self.sentences if self.sentences else None

    def as_dict(self) -> dict[str, Any]:
        return {"sentences_checked": self.sentences, "unsupported": self.unsupported,
                "unsupported_rate": _round(self.rate)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _counted(rows: QuerySet[ServedEvidence], *group: str) -> dict[Any, Cited]:
    """`rows` grouped by the fields `group` (one group key, or a tuple of several)."""
    found = (rows.order_by().values_list(*group).annotate(
        n=Count("id"), c=Count("id", filter=Q(cited=True)),
        h=Count("id", filter=Q(rating=Rating.HELPFUL)),
        u=Count("id", filter=Q(rating=Rating.NOT_HELPFUL))))
    width = len(group)
    return {(values[0] if width == 1 else tuple(values[:width])): Cited(*values[width:])
            for values in found}


def served_rows(*, tenant_id: int, dataset_ids: Collection[int] | None = None,
                days: int | None = None) -> QuerySet[ServedEvidence]:
    """The tenant's served evidence (of `dataset_ids` only, when given; of the last `days`
    days, today included, when given)."""
    rows = ServedEvidence.objects.filter(tenant_id=tenant_id)
    if dataset_ids is not None:
        rows = rows.filter(dataset_id__in=dataset_ids)
    if days is not None:
        rows = rows.filter(day__gte=timezone.localdate() - timedelta(days=days - 1))
    return rows


@dataclass(frozen=True)
class CitedReport:
    """What the API and the admin show of a tenant's (or some datasets') served evidence."""

    total: Cited
    # (config id, its version): (None, None) the built-in defaults; (None, N) a version
    # recorded before config ids were, of a config not known.
    by_version: list[tuple[tuple[int | None, int | None], Cited]]
    # verify_answer's checks, by the same (config id, version); None for a dataset's report
    # (a check is of an answer, not of a dataset).
    checked: dict[tuple[int | None, int | None], Checked] | None
    by_rank: list[tuple[int, Cited]]
    by_dataset: list[tuple[int, Cited]]
    never_cited: list[tuple[int, Cited]]  # documents served most and never cited
    cited_most: list[tuple[int, Cited]]  # documents cited most

    def as_dict(self) -> dict[str, Any]:
        def listed(name: str, pairs: Iterable[tuple[Any, Cited]]) -> list[dict[str, Any]]:
            # A doc_id has 62 bits: a string in JSON, as everywhere else in the API.
            return [{name: str(key) if name == "document_id" else key, **figures.as_dict()}
                    for key, figures in pairs]

        def checks(key: tuple[int | None, int | None] | None) -> dict[str, Any]:
            if self.checked is None:
                return {"sentences_checked": None, "unsupported": None,
                        "unsupported_rate": None}
            if key is None:
                return Checked(sum(c.sentences for c in self.checked.values()),
                               sum(c.unsupported for c in self.checked.values())).as_dict()
            return self.checked.get(key, Checked()).as_dict()

        return {"total": {**self.total.as_dict(), **checks(None)},
                "by_config_version": [
                    {"config_id": config, "config_version": version,
                     "config_known": config is not None or version is None, **figures.as_dict(),
                     **checks((config, version))}
                    for (config, version), figures in self.by_version],
                "by_rank": listed("rank", self.by_rank),
                "by_dataset": listed("dataset_id", self.by_dataset),
                "documents_never_cited": listed("document_id", self.never_cited),
                "documents_cited_most": listed("document_id", self.cited_most)}


def cited_report(*, tenant_id: int, dataset_ids: Collection[int] | None = None,
                 days: int | None = None) -> CitedReport:
    """Five grouped queries over the served-evidence indexes, whatever the number of rows."""
    rows = served_rows(tenant_id=tenant_id, dataset_ids=dataset_ids, days=days)
    by_version = _counted(rows, "config_id", "config_version")
    total = Cited(*(sum(getattr(c, f) for c in by_version.values())
                    for f in ("served", "cited", "helpful", "not_helpful")))
    documents = rows.order_by().values("document_id").annotate(
        n=Count("id"), c=Count("id", filter=Q(cited=True)),
        h=Count("id", filter=Q(rating=Rating.HELPFUL)),
        u=Count("id", filter=Q(rating=Rating.NOT_HELPFUL)))

    def top(ranked: Any) -> list[tuple[int, Cited]]:
        return [(d["document_id"], Cited(d["n"], d["c"], d["h"], d["u"]))
                for d in ranked[:DOCUMENTS_SHOWN]]

    checked = None if dataset_ids is not None else _checked(tenant_id, days)
    for key in checked or ():  # a version whose answers were checked, its evidence pruned
        by_version.setdefault(key, Cited())
    return CitedReport(
        total=total,
        by_version=sorted(by_version.items(),
                          key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)),
        checked=checked,
        by_rank=sorted(_counted(rows, "rank").items()),
        by_dataset=sorted(_counted(rows, "dataset_id").items()),
        never_cited=top(documents.filter(c=0).order_by("-n", "document_id")),
        cited_most=top(documents.filter(c__gt=0).order_by("-c", "-n", "document_id")))


def _checked(tenant_id: int, days: int | None
             ) -> dict[tuple[int | None, int | None], Checked]:
    """The tenant's answer checks by (config id, version): one grouped query."""
    rows = AnswerCheck.objects.filter(tenant_id=tenant_id)
    if days is not None:
        rows = rows.filter(day__gte=timezone.localdate() - timedelta(days=days - 1))
    found = (rows.order_by().values_list("config_id", "config_version")
             .annotate(s=Sum("sentences"), u=Sum("unsupported")))
    return {(config, version): Checked(s, u) for config, version, s, u in found}


def dataset_cited(*, dataset_ids: Collection[int], days: int) -> dict[int, Cited]:
    """Each dataset's served evidence of the last `days` days: one grouped query."""
    first = timezone.localdate() - timedelta(days=days - 1)
    found = _counted(ServedEvidence.objects.filter(dataset_id__in=dataset_ids, day__gte=first),
                     "dataset_id")
    return {pk: found.get(pk, Cited()) for pk in dataset_ids}


def document_cited(*, document_id: int) -> tuple[Cited, list[tuple[int, Cited]]]:
    """A document's (by its doc_id) served evidence in all, and by rank."""
    by_rank = _counted(ServedEvidence.objects.filter(document_id=document_id), "rank")
    total = Cited(*(sum(getattr(c, f) for c in by_rank.values())
                    for f in ("served", "cited", "helpful", "not_helpful")))
    return total, sorted(by_rank.items())


# --- A/B tests ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """The candidate against the control: the difference (candidate − control) and its
    two-sided p-value; None for both while either arm has fewer than MIN_SAMPLE."""

    difference: float | None = None
    p_value: float | None = None

    @property
    def enough(self) -> bool:
        return self.p_value is not None

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA

    @property
    def verdict(self) -> str:
        if self.p_value is None or self.difference is None:
            return "not enough data yet"
        if not self.significant:
            return f"no significant difference (p = {self.p_value:.3f})"
        side = "higher" if self.difference > 0 else "lower"
        return f"candidate significantly {side} (p = {self.p_value:.3g})"

    def as_dict(self) -> dict[str, Any]:
        return {"difference": _round(self.difference), "p_value": self.p_value,
                "significant": self.significant, "verdict": self.verdict}


def _p_value(difference: float, se: float) -> float:
    if se == 0:  # both arms without any spread: a difference is certain, none is none
        return 0.0 if difference else 1.0
    return math.erfc(abs(difference / se) / math.sqrt(2))


def two_proportions(x1: int, n1: int, x2: int, n2: int) -> Comparison:
    """The pooled two-proportion z-test of x2/n2 (candidate) against x1/n1 (control)."""
    if min(n1, n2) < MIN_SAMPLE:
        return Comparison()
    pooled = (x1 + x2) / (n1 + n2)
    difference = x2 / n2 - x1 / n1
    return Comparison(difference, _p_value(
        difference, math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))))


def two_means(a: ArmCited, b: ArmCited) -> Comparison:
    """Welch's z-test of b's mean cited per call against a's (calls are many: normal)."""
    if min(a.calls, b.calls) < MIN_SAMPLE:
        return Comparison()
    difference = (b.per_call or 0.0) - (a.per_call or 0.0)
    return Comparison(difference, _p_value(difference,
                                           math.sqrt(a.variance / a.calls
                                                     + b.variance / b.calls)))


@dataclass(frozen=True)
class ArmCited:
    """One arm's served evidence, and per call (the calls that served evidence)."""

    arm: str
    figures: Cited = Cited()
    calls: int = 0
    cited_calls: int = 0  # calls with at least one cited item
    cited_squares: int = 0  # Σ (cited per call)², for the variance

    @property
    def per_call(self) -> float | None:
        return self.figures.cited / self.calls if self.calls else None

    @property
    def variance(self) -> float:
        """The sample variance of cited per call."""
        if self.calls < 2:
            return 0.0
        mean = self.figures.cited / self.calls
        return max(self.cited_squares - self.calls * mean * mean, 0.0) / (self.calls - 1)

    def as_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, **self.figures.as_dict(), "calls": self.calls,
                "cited_calls": self.cited_calls, "cited_per_call": _round(self.per_call)}


@dataclass(frozen=True)
class ExperimentCited:
    arms: list[ArmCited]  # control first, then candidate
    rate: Comparison  # the cited rate (cited ÷ served)
    per_call: Comparison  # cited evidence per call

    def as_dict(self) -> dict[str, Any]:
        return {"arms": [arm.as_dict() for arm in self.arms], "minimum": MIN_SAMPLE,
                "alpha": ALPHA, "cited_rate": self.rate.as_dict(),
                "cited_per_call": self.per_call.as_dict()}


def experiment_cited(*, experiment_id: int, control: str, candidate: str,
                     tenant_id: int | None = None,
                     dataset_ids: Collection[int] | None = None) -> ExperimentCited:
    """Both arms of an A/B test (of the tenant's, the datasets' evidence when given): one
    query grouped per call (the latest EXPERIMENT_CALLS_MAX calls), summed here."""
    rows = ServedEvidence.objects.filter(experiment_id=experiment_id)
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    if dataset_ids is not None:
        rows = rows.filter(dataset_id__in=dataset_ids)
    per_call = (rows.order_by().values_list("experiment_arm", "invocation_id")
                .annotate(n=Count("id"), c=Count("id", filter=Q(cited=True)),
                          h=Count("id", filter=Q(rating=Rating.HELPFUL)),
                          u=Count("id", filter=Q(rating=Rating.NOT_HELPFUL)))
                .order_by("-invocation_id"))[:EXPERIMENT_CALLS_MAX]
    sums: dict[str, list[int]] = {control: [0] * 7, candidate: [0] * 7}
    for arm, _, n, c, h, u in per_call.iterator():
        if arm in sums:
            for i, add in enumerate((n, c, h, u, 1, 1 if c else 0, c * c)):
                sums[arm][i] += add
    arms = [ArmCited(arm, Cited(*s[:4]), *s[4:]) for arm, s in sums.items()]
    a, b = arms
    return ExperimentCited(
        arms=arms, rate=two_proportions(a.figures.cited, a.figures.served,
                                        b.figures.cited, b.figures.served),
        per_call=two_means(a, b))
