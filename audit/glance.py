"""Datasets at a glance (the admin page of ToolInvocationAdmin): per dataset its documents by
status, its chunks, its last ingestion errors, its lookups per day from the audit with the
EMPTY and UNAVAILABLE shares, drawn as a small stacked bar chart, and its cited rate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from audit.cited import Cited, dataset_cited
from audit.selectors import DayLookups, lookups_per_day
from datasets.documents.selectors import last_ingestion_errors
from datasets.models import Dataset, Document

DAYS = 14
BAR_WIDTH, BAR_GAP, CHART_HEIGHT = 5, 2, 36
COLOURS = {"ok": "#417690", "empty": "#e6a700", "unavailable": "#ba2121"}


@dataclass(frozen=True)
class DatasetGlance:
    dataset: Dataset  # annotated by datasets.documents.selectors.with_document_counts
    days: Sequence[DayLookups]
    errors: Sequence[Document]
    cited: Cited = Cited()  # its evidence served in those days, cited and rated

    @property
    def lookups(self) -> int:
        return sum(d.lookups for d in self.days)

    def _share(self, count: int) -> str:
        return f"{100 * count / self.lookups:.0f} %" if self.lookups else "–"

    @property
    def empty_share(self) -> str:
        return self._share(sum(d.empty for d in self.days))

    @property
    def unavailable_share(self) -> str:
        return self._share(sum(d.unavailable for d in self.days))

    @property
    def chart(self) -> SafeString:
        return day_chart(self.days)


def glances(datasets: Sequence[Dataset], *, days: int = DAYS) -> list[DatasetGlance]:
    """The page's datasets with their figures: three queries however many datasets."""
    ids = [d.pk for d in datasets]
    per_day = lookups_per_day(dataset_ids=ids, days=days)
    errors = last_ingestion_errors(dataset_ids=ids)
    cited = dataset_cited(dataset_ids=ids, days=days)
    return [DatasetGlance(d, per_day[d.pk], errors[d.pk], cited[d.pk]) for d in datasets]


def day_chart(days: Sequence[DayLookups]) -> SafeString:
    """One stacked bar per day (UNAVAILABLE at the bottom, then EMPTY, then READY), scaled to
    the busiest day; each bar's tooltip gives the counts."""
    busiest = max((d.lookups for d in days), default=0) or 1
    width = len(days) * (BAR_WIDTH + BAR_GAP)

    def bar(index: int, day: DayLookups) -> SafeString:
        x, top, parts = index * (BAR_WIDTH + BAR_GAP), float(CHART_HEIGHT), []
        for kind, count in (("unavailable", day.unavailable), ("empty", day.empty),
                            ("ok", day.lookups - day.unavailable - day.empty)):
            height = CHART_HEIGHT * count / busiest
            top -= height
            if count:
                parts.append(format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>',
                    x, f"{top:.1f}", BAR_WIDTH, f"{height:.1f}", COLOURS[kind]))
        return format_html(
            '<g><title>{}: {} lookups, {} EMPTY, {} UNAVAILABLE</title>'
            '<rect x="{}" y="0" width="{}" height="{}" fill="transparent"/>{}</g>',
            day.day.isoformat(), day.lookups, day.empty, day.unavailable, x, BAR_WIDTH,
            CHART_HEIGHT, format_html_join("", "{}", ((p,) for p in parts)))

    return format_html(
        '<svg class="glance-chart" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="lookups per day">{}'
        '<line x1="0" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity="0.3"/>'
        '</svg>', width, CHART_HEIGHT, width, CHART_HEIGHT,
        format_html_join("", "{}", ((bar(i, d),) for i, d in enumerate(days))),
        CHART_HEIGHT, width, CHART_HEIGHT)
