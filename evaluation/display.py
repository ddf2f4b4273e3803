"""How the admin shows evaluation runs: a chart of each series (one question set or suite of
one tenant) over its config versions, and two runs compared query by query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from evaluation.models import EvaluationQuery, EvaluationRun

RUNS_PER_SERIES = 20
SERIES_SHOWN = 6
STEP, WIDTH_PAD, HEIGHT, TOP, BOTTOM = 34, 24, 120, 10, 22
LINES = {"ndcg@10": "#417690", "hit_rate": "#e6a700"}
CHANGES = ("now a miss", "worse", "same", "better", "now a hit")


@dataclass(frozen=True)
class Series:
    tenant: str
    name: str
    runs: Sequence[EvaluationRun]  # oldest first

    @property
    def chart(self) -> SafeString:
        return series_chart(self.runs)


def run_series(runs: Iterable[EvaluationRun]) -> list[Series]:
    """`runs` (newest first, finished) grouped by tenant and name; each series keeps its last
    RUNS_PER_SERIES runs, oldest first, and the SERIES_SHOWN most recent series are shown."""
    grouped: dict[tuple[str, str], list[EvaluationRun]] = {}
    for run in runs:
        key = (run.tenant.slug, run.name)
        if key not in grouped and len(grouped) == SERIES_SHOWN:
            continue
        if len(grouped.setdefault(key, [])) < RUNS_PER_SERIES:
            grouped[key].append(run)
    return [Series(tenant, name, runs[::-1]) for (tenant, name), runs in grouped.items()]


def series_chart(runs: Sequence[EvaluationRun]) -> SafeString:
    """nDCG@10 and hit rate (0 to 1) of each run, left to right, labelled by config version."""
    width = WIDTH_PAD * 2 + STEP * max(len(runs) - 1, 1)
    span = HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return WIDTH_PAD + STEP * index

    def y(value: float) -> float:
        return TOP + span * (1 - max(0.0, min(1.0, value)))

    def line(metric: str, colour: str) -> SafeString:
        points = [(x(i), y(float(r.metrics.get(metric, 0.0)))) for i, r in enumerate(runs)]
        dots = format_html_join("", '<circle cx="{}" cy="{}" r="3" fill="{}"><title>{}'
                                    '</title></circle>',
                                ((px, f"{py:.1f}", colour, f"run {r.pk}, {_version(r)}: {metric} "
                                  f"{float(r.metrics.get(metric, 0.0)):.3f}")
                                 for (px, py), r in zip(points, runs, strict=True)))
        return format_html('<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>{}',
                           colour, " ".join(f"{px:.1f},{py:.1f}" for px, py in points), dots)

    labels = format_html_join("", '<text x="{}" y="{}" font-size="10" text-anchor="middle" '
                                  'fill="currentColor">{}</text>',
                              ((x(i), HEIGHT - 6, _version(r, short=True))
                               for i, r in enumerate(runs)))
    grid = format_html_join("", '<line x1="{}" y1="{}" x2="{}" y2="{}" '
                                'stroke="currentColor" stroke-opacity="0.15"/>'
                                '<text x="2" y="{}" font-size="9" fill="currentColor">{}</text>',
                            ((WIDTH_PAD, f"{y(v):.1f}", width - 4, f"{y(v):.1f}",
                              f"{y(v) + 3:.1f}", f"{v:g}") for v in (0.0, 0.5, 1.0)))
    return format_html(
        '<svg class="runs-chart" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="nDCG@10 and hit rate over config versions">{}{}{}</svg>',
        width, HEIGHT, width, HEIGHT, grid,
        format_html_join("", "{}", ((line(m, c),) for m, c in LINES.items())), labels)


def _version(run: EvaluationRun, short: bool = False) -> str:
    """"v2" for the tenant default, "runbooks v2" for a dataset's own config."""
    if run.config_version is None:  # a held change (its scope names it), or no config at all
        return ("change" if short else run.config_label) if run.config_scope else "defaults"
    if not short:
        return run.config_label
    dataset = run.config_scope.partition("/")[2]
    return f"{dataset} v{run.config_version}" if dataset not in ("", "default") \
        else f"v{run.config_version}"


# --- two runs, query by query ---------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What a comparison reads of every query of a run: small, whatever the run's size."""

    pk: int
    hit: bool
    ndcg: float


@dataclass(frozen=True)
class QueryPair:
    query_id: str
    query: str
    a: Outcome | None
    b: Outcome | None

    @property
    def delta(self) -> float:
        """nDCG@10 of B minus A (a query one run lacks counts as 0 there)."""
        return (self.b.ndcg if self.b else 0.0) - (self.a.ndcg if self.a else 0.0)

    @property
    def change(self) -> str:
        hit_a, hit_b = bool(self.a and self.a.hit), bool(self.b and self.b.hit)
        if hit_a != hit_b:
            return "now a hit" if hit_b else "now a miss"
        if abs(self.delta) < 1e-9:
            return "same"
        return "better" if self.delta > 0 else "worse"


@dataclass(frozen=True)
class ShownPair:
    pair: QueryPair
    a: EvaluationQuery | None  # the whole outcome, for the rows a page shows
    b: EvaluationQuery | None

    @property
    def sides(self) -> tuple[EvaluationQuery | None, EvaluationQuery | None]:
        return self.a, self.b


@dataclass(frozen=True)
class Comparison:
    a: EvaluationRun
    b: EvaluationRun
    counts: dict[str, int]  # how many queries changed how, from the worst change to the best
    shown: Sequence[ShownPair]  # the largest loss (B against A) first
    more: int  # pairs left out of `shown`

    @property
    def metrics(self) -> list[tuple[str, float | None, float | None, float | None]]:
        names = list(dict.fromkeys([*self.a.metrics, *self.b.metrics]))
        rows = []
        for name in names:
            va, vb = self.a.metrics.get(name), self.b.metrics.get(name)
            rows.append((name, va, vb, vb - va if va is not None and vb is not None else None))
        return rows


def _outcomes(run: EvaluationRun) -> dict[tuple[str, str], Outcome]:
    rows = run.results.values_list("query_id", "query", "pk", "hit", "ndcg")
    return {(query_id, query): Outcome(pk, hit, ndcg)
            for query_id, query, pk, hit, ndcg in rows.iterator(chunk_size=2000)}


def runs_compared(a: EvaluationRun, b: EvaluationRun, *, changed_only: bool, limit: int
                  ) -> Comparison:
    """Every query of either run, paired by its id and its text (two sets numbered q1, q2, …
    pair only where they ask the same), the largest loss first; the first `limit` of them
    (the changed ones only, with `changed_only`) read whole."""
    first, second = _outcomes(a), _outcomes(b)
    pairs = [QueryPair(query_id, query, first.get((query_id, query)),
                       second.get((query_id, query)))
             for query_id, query in dict.fromkeys([*first, *second])]
    counts = dict.fromkeys(CHANGES, 0)
    for pair in pairs:
        counts[pair.change] += 1
    listed = sorted((p for p in pairs if p.change != "same" or not changed_only),
                    key=lambda p: p.delta)
    wanted = {o.pk for p in listed[:limit] for o in (p.a, p.b) if o is not None}
    whole = {q.pk: q for q in EvaluationQuery.objects.filter(pk__in=wanted)}
    shown = [ShownPair(p, whole.get(p.a.pk) if p.a else None, whole.get(p.b.pk) if p.b else None)
             for p in listed[:limit]]
    return Comparison(a, b, counts, shown, max(0, len(listed) - limit))
