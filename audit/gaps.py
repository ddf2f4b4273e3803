"""The questions a dataset cannot answer: its EMPTY and low-relevance (REFERENCE) lookups of a
window, grouped into topics, each open until later lookups of its topic are READY.

A topic is read from what every call keeps by default, its terms (`InvocationDataset.terms`):
the L0 domains and keywords its query matched and the query's words its candidates' text
contains, so never a word the tenant's documents do not hold. Terms are compared by their
first TERM_KEY_CHARS characters ("eviction", "evicting" → "evict"); calls whose term sets
overlap by at least SIMILAR (Jaccard) with a topic's most frequent set are that topic. Calls
with no term at all (off-topic questions, or none of the knowledge base's words) are one
bucket of their own. Example queries only where raw queries are kept (KB_AUDIT_STORE_RAW_QUERY,
for KB_AUDIT_RAW_QUERY_RETENTION_DAYS).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from audit.models import InvocationDataset, Outcome, ToolInvocation

WINDOW_DAYS = 30
MAX_WINDOW_DAYS = 180
MAX_CALLS = 20_000  # the newest calls of the window a page reads: time and memory bounded
CLOSE_AFTER = 2  # PRECISE READY lookups of a topic after its last failing one close its gap
TERM_KEY_CHARS = 5
SIMILAR = 0.5
LABEL_TERMS = 6
MAX_EXAMPLES = 3
LOW = "REFERENCE"  # a READY answer that is only a reference: low relevance
PRECISE = "PRECISE"
UNKNOWN = "?"


def _key(terms: Iterable[str]) -> frozenset[str]:
    return frozenset(t[:TERM_KEY_CHARS] for t in terms)


def _similar(a: frozenset[str], b: frozenset[str]) -> bool:
    return len(a & b) >= SIMILAR * len(a | b)


@dataclass
class Gap:
    """One topic of a dataset's failing lookups."""

    terms: tuple[str, ...]  # its terms, most frequent first; () for calls with no term
    empty: int = 0
    low: int = 0
    first_seen: datetime | None = None  # of its failing lookups
    last_seen: datetime | None = None
    ready_after: int = 0  # PRECISE lookups since its last failing one
    closed_at: datetime | None = None
    per_day: Counter[date] = field(default_factory=Counter)  # failing lookups per day
    examples: list[str] = field(default_factory=list)
    _counts: Counter[str] = field(default_factory=Counter)
    _failing_ids: list[int] = field(default_factory=list)

    @property
    def failing(self) -> int:
        return self.empty + self.low

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    @property
    def topic(self) -> str:
        return " ".join(self.terms[:3]) if self.terms else "(no term of the knowledge base)"

    def see(self, created_at: datetime, failing: str | None, terms: Sequence[str],
            invocation_id: int) -> None:
        self._counts.update(terms)
        if failing is None:  # a PRECISE answer of the topic
            if self.failing:
                self.ready_after += 1
                if self.ready_after == CLOSE_AFTER:
                    self.closed_at = created_at
            return
        if failing == Outcome.EMPTY:
            self.empty += 1
        else:
            self.low += 1
        self.first_seen = self.first_seen or created_at
        self.last_seen = created_at
        self.ready_after, self.closed_at = 0, None
        self.per_day[timezone.localtime(created_at).date()] += 1
        self._failing_ids = [*self._failing_ids[-(MAX_EXAMPLES - 1):], invocation_id]


@dataclass(frozen=True)
class GapReport:
    gaps: list[Gap]  # open first, then by failing lookups
    days: list[date]  # the window, oldest first
    calls: int  # the calls read
    truncated: bool  # the window had more than MAX_CALLS calls: the oldest were not read
    examples: bool  # raw queries are kept (KB_AUDIT_STORE_RAW_QUERY): examples are shown

    @property
    def open(self) -> int:
        return sum(not g.closed for g in self.gaps)


def knowledge_gaps(*, dataset_id: int, days: int = WINDOW_DAYS,
                   now: datetime | None = None) -> GapReport:
    """The dataset's gaps over the last `days` days (today included)."""
    days = min(max(days, 1), MAX_WINDOW_DAYS)
    now = now or timezone.now()
    today = timezone.localtime(now).date()
    window = [today - timedelta(days=n) for n in range(days - 1, -1, -1)]
    since = timezone.make_aware(datetime.combine(window[0], time.min))
    # Newest first from the (dataset, created_at) index, so the bound is met without sorting
    # the whole window; UNAVAILABLE is a failure of the platform, not a gap in the knowledge.
    rows = list(InvocationDataset.objects
                .filter(dataset_id=dataset_id, created_at__gte=since,
                        outcome__in=[Outcome.OK, Outcome.EMPTY])
                .order_by("-created_at", "-id")
                .values_list("invocation_id", "created_at", "outcome", "relevance_level",
                             "terms")[:MAX_CALLS + 1])
    truncated = len(rows) > MAX_CALLS
    rows = rows[:MAX_CALLS][::-1]  # oldest first: a gap closes after its failing lookups

    def failing(outcome: str, level: str) -> str | None:
        # A row written before the level was recorded ("") is neither.
        return (Outcome.EMPTY if outcome == Outcome.EMPTY else LOW if level == LOW
                else None if level == PRECISE else UNKNOWN)

    # Topics: the most frequent term sets first, each joining the first similar topic.
    sets = Counter(_key(_terms(terms)) for *_, terms in rows)
    topic_of: dict[frozenset[str], Gap] = {}
    seeds: list[tuple[frozenset[str], Gap]] = []
    by_term: dict[str, list[int]] = {}
    for key, _ in sorted(sets.items(), key=lambda kv: (-kv[1], sorted(kv[0]))):
        candidates = sorted({i for t in key for i in by_term.get(t, [])})
        match = next((seeds[i][1] for i in candidates if _similar(key, seeds[i][0])), None)
        if match is None:
            match = Gap(terms=())
            for t in key:
                by_term.setdefault(t, []).append(len(seeds))
            seeds.append((key, match))
        topic_of[key] = match
    for invocation_id, created_at, outcome, level, terms in rows:
        words, verdict = _terms(terms), failing(outcome, level)
        # A READY call with no term closes nothing.
        if verdict != UNKNOWN and (words or verdict is not None):
            topic_of[_key(words)].see(created_at, verdict, words, invocation_id)
    gaps = [g for g in topic_of.values() if g.failing]
    gaps = list({id(g): g for g in gaps}.values())
    for gap in gaps:
        gap.terms = tuple(t for t, _ in gap._counts.most_common(LABEL_TERMS))
    gaps.sort(key=lambda g: (g.closed, -g.failing, -(g.last_seen or now).timestamp()))
    examples = bool(settings.KB_AUDIT_STORE_RAW_QUERY)
    if examples:
        _add_examples(gaps)
    return GapReport(gaps=gaps, days=window, calls=len(rows), truncated=truncated,
                     examples=examples)


def _terms(value: object) -> list[str]:
    # A JSON column: whatever is in it, only short strings are terms.
    if not isinstance(value, list):
        return []
    return [t for t in value if isinstance(t, str) and t][:10]


def _add_examples(gaps: Sequence[Gap]) -> None:
    """Each gap's last failing queries whose raw text is still kept: one query for all."""
    wanted = {pk: gap for gap in gaps for pk in gap._failing_ids}
    texts = (ToolInvocation.objects.filter(pk__in=wanted).exclude(query_text="")
             .order_by("created_at").values_list("pk", "query_text"))
    for pk, text in texts:
        wanted[pk].examples.append(text)


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    text = "" if value is None else value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text if text.startswith(_FORMULA) else text


def gaps_csv(report: GapReport) -> str:
    """The report as CSV for a writer: one topic a line; example queries only where kept."""
    out = io.StringIO()
    writer = csv.writer(out)
    header = ["topic", "terms", "status", "failing_lookups", "empty", "low_relevance",
              "first_seen", "last_seen", "closed_at"]
    writer.writerow(header + (["example_queries"] if report.examples else []))
    for gap in report.gaps:
        row: list[object] = [gap.topic, ", ".join(gap.terms),
                             "closed" if gap.closed else "open", gap.failing, gap.empty,
                             gap.low, gap.first_seen, gap.last_seen, gap.closed_at]
        if report.examples:
            row.append(" | ".join(gap.examples))
        writer.writerow([csv_cell(v) for v in row])
    return out.getvalue()


def failing_chart(days: Sequence[date], per_day: Counter[date], *, height: int = 24
                  ) -> SafeString:
    """One bar per day of the window: the failing lookups, scaled to the busiest day."""
    busiest = max((per_day[d] for d in days), default=0) or 1
    step, bar = 6, 5
    width = len(days) * step
    bars = format_html_join("", '<rect x="{}" y="{}" width="{}" height="{}" fill="#e6a700">'
                            '<title>{}: {}</title></rect>',
                            ((i * step, f"{height - height * per_day[d] / busiest:.1f}", bar,
                              f"{height * per_day[d] / busiest:.1f}", d.isoformat(),
                              per_day[d]) for i, d in enumerate(days)))
    return format_html('<svg class="gap-chart" width="{}" height="{}" viewBox="0 0 {} {}" '
                       'role="img" aria-label="failing lookups per day">{}<line x1="0" y1="{}" '
                       'x2="{}" y2="{}" stroke="currentColor" stroke-opacity="0.3"/></svg>',
                       width, height, width, height, bars, height, width, height)
