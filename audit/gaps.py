"""The questions a dataset cannot answer: its EMPTY and low-relevance (REFERENCE) lookups of a
window, grouped into topics, each open until later lookups of its topic are READY.

A topic is read from what every call keeps by default, its terms (`InvocationDataset.terms`):
the L0 domains and keywords its query matched and the query's words its candidates' text
contains, so never a word the tenant's documents do not hold. Terms are compared by their
first TERM_KEY_CHARS characters ("eviction", "evicting" → "evict"); calls whose term sets
overlap by at least SIMILAR (Jaccard) with a topic's most frequent set are that topic. Calls
with no term at all (off-topic questions, or none of the knowledge base's words) are one
bucket of their own. Example queries only where the dataset's tenant keeps raw queries now
(audit/privacy.py), and only those within its retention.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.db.models import CharField, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from audit.models import InvocationDataset, Outcome, ToolInvocation
from audit.privacy import raw_queries
from datasets.models import Tenant

WINDOW_DAYS = 30
MAX_WINDOW_DAYS = 180
MAX_CALLS = 10_000  # the newest calls of the window a page reads: time and memory bounded
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
    per_day: Counter[str] = field(default_factory=Counter)  # failing lookups per ISO day
    examples: list[str] = field(default_factory=list)
    # While the calls are read: term counts, and calls by id (their times are read after, for
    # these few calls only: parsing a timestamp per call was half the page's time on SQLite).
    _counts: dict[str, int] = field(default_factory=dict)
    _failing_ids: list[int] = field(default_factory=list)  # the last MAX_EXAMPLES
    _first_id: int | None = None
    _closed_id: int | None = None

    @property
    def failing(self) -> int:
        return self.empty + self.low

    @property
    def closed(self) -> bool:
        return self._closed_id is not None

    @property
    def topic(self) -> str:
        return " ".join(self.terms[:3]) if self.terms else "(no term of the knowledge base)"

    def see(self, day: str, failing: str | None, terms: Sequence[str],
            invocation_id: int) -> None:
        for term in terms:
            self._counts[term] = self._counts.get(term, 0) + 1
        if failing is None:  # a PRECISE answer of the topic
            if self.failing:
                self.ready_after += 1
                if self.ready_after == CLOSE_AFTER:
                    self._closed_id = invocation_id
            return
        if failing == Outcome.EMPTY:
            self.empty += 1
        else:
            self.low += 1
        self._first_id = self._first_id or invocation_id
        self.ready_after, self._closed_id = 0, None
        self.per_day[day] += 1
        self._failing_ids = [*self._failing_ids[-(MAX_EXAMPLES - 1):], invocation_id]

    def ids(self) -> list[int]:
        return [i for i in (self._first_id, self._closed_id, *self._failing_ids[-1:]) if i]

    def timed(self, at: dict[int, datetime]) -> None:
        self.terms = tuple(sorted(self._counts, key=lambda t: -self._counts[t])[:LABEL_TERMS])
        self.first_seen = at.get(self._first_id or 0)
        self.last_seen = at.get(self._failing_ids[-1]) if self._failing_ids else None
        self.closed_at = at.get(self._closed_id or 0)


@dataclass(frozen=True)
class GapReport:
    gaps: list[Gap]  # open first, then by failing lookups
    days: list[date]  # the window, oldest first
    calls: int  # the calls read
    truncated: bool  # the window had more than MAX_CALLS calls: the oldest were not read
    examples: bool  # the tenant keeps raw queries: examples are shown

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
                # A call that narrowed itself by its filters asked less than the dataset: its
                # failure is no gap, while its PRECISE answer still closes one.
                .exclude(Q(narrowed=True) & ~Q(outcome=Outcome.OK, relevance_level=PRECISE))
                .order_by("-created_at", "-id")
                # As text: a date and a JSON value each converted by Python were most of the
                # page's time (thousands of rows); equal term lists are decoded once below.
                .annotate(day_text=Cast("day", CharField(max_length=10)),
                          terms_text=Cast("terms", TextField()))
                .values_list("invocation_id", "day_text", "outcome", "relevance_level",
                             "terms_text")[:MAX_CALLS + 1])
    truncated = len(rows) > MAX_CALLS

    def failing(outcome: str, level: str) -> str | None:
        # A row written before the level was recorded ("") is neither.
        return (Outcome.EMPTY if outcome == Outcome.EMPTY else LOW if level == LOW
                else None if level == PRECISE else UNKNOWN)

    # Oldest first: a gap closes after its failing lookups. A READY call with no term closes
    # nothing.
    decoded: dict[str, tuple[list[str], frozenset[str]]] = {}
    calls = []
    for pk, day, outcome, level, text in rows[:MAX_CALLS][::-1]:
        verdict = failing(outcome, level)
        if text not in decoded:
            words = _terms(text)
            decoded[text] = (words, _key(words))
        words, key = decoded[text]
        if verdict != UNKNOWN and (words or verdict is not None):
            calls.append((pk, day, verdict, words, key))
    # Topics: the most frequent term sets first, each joining the first similar topic.
    sets = Counter(key for *_, key in calls)
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
    for pk, day, verdict, words, key in calls:
        topic_of[key].see(day, verdict, words, pk)
    gaps = list({id(g): g for g in topic_of.values() if g.failing}.values())
    at = dict(ToolInvocation.objects.filter(pk__in=[i for g in gaps for i in g.ids()])
              .values_list("pk", "created_at"))
    for gap in gaps:
        gap.timed(at)
    gaps.sort(key=lambda g: (g.closed, -g.failing, -(g.last_seen or now).timestamp()))
    rule = raw_queries(Tenant.objects.filter(datasets=dataset_id).first())
    if rule.kept:
        # Not a text past its retention that the erasing pass has not reached yet.
        _add_examples(gaps, since=now - timedelta(days=rule.days))
    return GapReport(gaps=gaps, days=window, calls=min(len(rows), MAX_CALLS), truncated=truncated,
                     examples=rule.kept)


def _terms(text: str | None) -> list[str]:
    # A JSON column: whatever is in it, only strings are terms.
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    if not isinstance(value, list):
        return []
    return [t for t in value if isinstance(t, str) and t][:10]


def _add_examples(gaps: Sequence[Gap], *, since: datetime) -> None:
    """Each gap's last failing queries whose raw text is still kept, asked `since` or later:
    one query for all."""
    wanted = {pk: gap for gap in gaps for pk in gap._failing_ids}
    texts = (ToolInvocation.objects.filter(pk__in=wanted, created_at__gte=since)
             .exclude(query_text="").order_by("created_at").values_list("pk", "query_text"))
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


def failing_chart(days: Sequence[date], per_day: Counter[str], *, height: int = 24
                  ) -> SafeString:
    """One bar per day of the window: the failing lookups (by ISO day), scaled to the busiest
    day."""
    counts = [per_day[d.isoformat()] for d in days]
    busiest = max(counts, default=0) or 1
    step, bar = 6, 5
    width = len(days) * step
    bars = format_html_join("", '<rect x="{}" y="{}" width="{}" height="{}" fill="#e6a700">'
                            '<title>{}: {}</title></rect>',
                            ((i * step, f"{height - height * n / busiest:.1f}", bar,
                              f"{height * n / busiest:.1f}", d.isoformat(), n)
                             for i, (d, n) in enumerate(zip(days, counts, strict=True))))
    return format_html('<svg class="gap-chart" width="{}" height="{}" viewBox="0 0 {} {}" '
                       'role="img" aria-label="failing lookups per day">{}<line x1="0" y1="{}" '
                       'x2="{}" y2="{}" stroke="currentColor" stroke-opacity="0.3"/></svg>',
                       width, height, width, height, bars, height, width, height)
