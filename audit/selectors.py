"""Reads of the audit."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from audit.models import InvocationDataset, Outcome, Rating, ServedEvidence, ToolInvocation
from audit.privacy import raw_queries
from datasets.models import Document, Tenant

TRACE_LIMIT = 1000  # a session longer than this shows its latest calls


def session_trace(*, tenant_id: int, session_id: str,
                  dataset_ids: Collection[int] | None = None,
                  api_key_id: int | None = None) -> list[ToolInvocation]:
    """The tenant's invocations of one session, oldest first; [] for another tenant's session.

    With `dataset_ids` (a dataset-scoped key) only calls that searched within those datasets,
    or that the key `api_key_id` made itself, are shown.
    """
    latest = (ToolInvocation.objects.filter(tenant_id=tenant_id, session_id=session_id)
              .order_by("-created_at", "-id")[:TRACE_LIMIT])
    rows = list(reversed(latest))
    if dataset_ids is None:
        return rows
    allowed = set(dataset_ids)

    def visible(row: ToolInvocation) -> bool:
        searched = row.dataset_ids
        return row.api_key_id == api_key_id or bool(searched) and set(searched) <= allowed

    return [row for row in rows if visible(row)]


@dataclass(frozen=True)
class DayLookups:
    day: date
    lookups: int = 0
    empty: int = 0
    unavailable: int = 0


def lookups_per_day(*, dataset_ids: Collection[int], days: int,
                    today: date | None = None) -> dict[int, list[DayLookups]]:
    """Each dataset's lookups of the last `days` days (today included), oldest first, with how
    many were EMPTY and UNAVAILABLE: one grouped query over the searched-datasets index."""
    today = today or timezone.localdate()
    first = today - timedelta(days=days - 1)
    rows = (InvocationDataset.objects.filter(dataset_id__in=dataset_ids, day__gte=first)
            .order_by().values_list("dataset_id", "day", "outcome").annotate(n=Count("id")))
    counts: dict[tuple[int, date], dict[str, int]] = {}
    for dataset_id, day, outcome, n in rows:
        counts.setdefault((dataset_id, day), {})[outcome] = n
    result: dict[int, list[DayLookups]] = {}
    for dataset_id in dataset_ids:
        result[dataset_id] = []
        for offset in range(days):
            day = first + timedelta(days=offset)
            found = counts.get((dataset_id, day), {})
            result[dataset_id].append(DayLookups(
                day=day, lookups=sum(found.values()), empty=found.get(Outcome.EMPTY, 0),
                unavailable=found.get(Outcome.UNAVAILABLE, 0)))
    return result


@dataclass(frozen=True)
class ArmFigures:
    """The audited calls of one arm of an A/B test."""

    arm: str
    calls: int = 0
    ready: int = 0
    empty: int = 0
    unavailable: int = 0
    precise: int = 0
    returned: int = 0  # evidence items handed out, in all
    latency_ms: float = 0.0  # in all
    versions: tuple[int | None, ...] = ()  # the config versions that served it

    def _share(self, count: int) -> float | None:
        return count / self.calls if self.calls else None

    @property
    def shares(self) -> dict[str, float | None]:
        """READY, EMPTY, UNAVAILABLE and PRECISE as shares of the calls."""
        return {"READY": self._share(self.ready), "EMPTY": self._share(self.empty),
                "UNAVAILABLE": self._share(self.unavailable),
                "PRECISE": self._share(self.precise)}

    @property
    def mean_returned(self) -> float | None:
        return self._share(self.returned)

    @property
    def mean_latency_ms(self) -> float | None:
        return self.latency_ms / self.calls if self.calls else None


def experiment_figures(*, experiment_id: int, arms: Collection[str]) -> list[ArmFigures]:
    """Each arm's calls of an A/B test, from the audit: one grouped query that its index
    covers."""
    rows = (ToolInvocation.objects.filter(experiment_id=experiment_id).order_by()
            .values_list("experiment_arm", "outcome", "relevance_level", "config_version")
            .annotate(n=Count("id"), returned=Sum("returned_count"), ms=Sum("latency_ms")))
    sums: dict[str, dict[str, Any]] = {arm: {"arm": arm} for arm in arms}
    versions: dict[str, set[int | None]] = {}
    for arm, outcome, level, version, n, returned, ms in rows:
        figures = sums.setdefault(arm, {"arm": arm})
        versions.setdefault(arm, set()).add(version)
        for key, add in (("calls", n), ("returned", returned or 0), ("latency_ms", ms or 0.0),
                         ("ready", n if outcome == Outcome.OK else 0),
                         ("empty", n if outcome == Outcome.EMPTY else 0),
                         ("unavailable", n if outcome == Outcome.UNAVAILABLE else 0),
                         ("precise", n if level == "PRECISE" else 0)):
            figures[key] = figures.get(key, 0) + add
    return [ArmFigures(**figures, versions=tuple(sorted(versions.get(arm, ()),
                                                        key=lambda v: v or 0)))
            for arm, figures in sums.items()]


def served_config(*, tenant_id: int, tool_call_id: str = "", session_id: str = ""
                  ) -> tuple[int | None, int | None] | None:
    """(config id, version) that served the call's evidence — for a session, its latest call
    that served any ((None, None): the built-in defaults); None when none did."""
    rows = ServedEvidence.objects.filter(tenant_id=tenant_id)
    rows = rows.filter(tool_call_id=tool_call_id) if tool_call_id \
        else rows.filter(session_id=session_id)
    found = rows.order_by("-pk").values_list("config_id", "config_version").first()
    return (found[0], found[1]) if found is not None else None


CONFIRMED_QUESTIONS = 500  # the latest questions a calibration reads at most
# Served rows read for them at most: a question asked again, or with several documents
# confirmed, takes more than one.
CONFIRMED_ROWS = 20 * CONFIRMED_QUESTIONS


@dataclass(frozen=True)
class ConfirmedQuestion:
    """A caller's question whose evidence its agent confirmed."""

    query: str
    documents: tuple[int, ...]  # the documents (doc ids) whose evidence was confirmed
    dataset_ids: tuple[int, ...]  # the datasets its call searched


def confirmed_questions(*, tenant: Tenant, config_id: int,
                        limit: int = CONFIRMED_QUESTIONS) -> list[ConfirmedQuestion]:
    """The latest questions the config served whose evidence an agent confirmed — cited it
    (the evidence guard, or the call's own answer) or rated it helpful, and rated none of
    that call's evidence not helpful — each with the documents confirmed: only where the
    tenant keeps its callers' questions, and none past its retention. Newest first, one per
    question text, from the latest CONFIRMED_ROWS served rows."""
    rule = raw_queries(tenant)
    if not rule.kept:
        return []
    rows = (ServedEvidence.objects
            .filter(tenant=tenant, config_id=config_id, invocation__query_kept=True,
                    invocation__created_at__gte=timezone.now() - timedelta(days=rule.days))
            .filter(Q(cited=True) | Q(rating=Rating.HELPFUL))
            .exclude(invocation__query_text="")
            .exclude(Exists(ServedEvidence.objects.filter(invocation_id=OuterRef("invocation_id"),
                                                          rating=Rating.NOT_HELPFUL)))
            .order_by("-invocation__created_at", "-invocation_id", "rank")
            .values_list("invocation_id", "invocation__query_text", "document_id",
                         "invocation__dataset_ids"))
    found: dict[str, tuple[int, list[int], list[int]]] = {}  # query → its newest call's
    for invocation, query, document, datasets in rows[:CONFIRMED_ROWS].iterator():
        if query not in found:
            if len(found) == limit:
                break
            found[query] = (invocation, [], datasets)
        call, documents, _ = found[query]
        if call == invocation and document not in documents:
            documents.append(document)
    return [ConfirmedQuestion(query, tuple(documents), tuple(datasets))
            for query, (_, documents, datasets) in found.items()]


STALE_SHOWN = 500  # documents the stale evidence page lists at most


@dataclass(frozen=True)
class StaleServed:
    """A document past its `valid_until` whose evidence was served in the window."""

    document: Document
    served: int  # evidence items of it handed out as READY
    cited: int  # of them, those their caller cited
    last_served: date


def stale_served(*, dataset_ids: Collection[int], days: int,
                 today: date | None = None) -> list[StaleServed]:
    """The live documents of `dataset_ids` that are stale today and were served stale (after
    their valid_until) in the last `days` days, most cited first, then most served; at most
    STALE_SHOWN."""
    today = today or timezone.localdate()
    stale = Document.objects.filter(dataset_id__in=list(dataset_ids), deleted=False,
                                    activated=True, valid_until__lt=today)
    # Only what was served stale: on a day after the document's valid_until.
    until = Document.objects.filter(doc_id=OuterRef("document_id")).values("valid_until")[:1]
    counts = (ServedEvidence.objects
              .filter(dataset_id__in=list(dataset_ids), day__gt=today - timedelta(days=days),
                      document_id__in=stale.values("doc_id"))
              .filter(day__gt=Subquery(until))
              .values("document_id")
              .annotate(served=Count("id"), cited=Count("id", filter=Q(cited=True)),
                        last=Max("day"))
              .order_by("-cited", "-served", "document_id")[:STALE_SHOWN])
    documents = {d.doc_id: d for d in stale.select_related("dataset__tenant").filter(
        doc_id__in=[row["document_id"] for row in counts])}
    return [StaleServed(documents[row["document_id"]], row["served"], row["cited"], row["last"])
            for row in counts if row["document_id"] in documents]
