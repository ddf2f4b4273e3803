"""Admin of evaluation runs: batch hit testing (questions with their expected documents, on the
tenant's index) and BEIR-suite evaluations of a config version, each run as a job with a live
progress bar; the runs as a table and a chart over versions, a run's misses with their traces,
its results for download, and two runs compared query by query."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from audit.admin_display import trace_tables
from datasets.admin.display import job_progress
from datasets.admin.scope import TenantScopedAdmin, scoped, tenant_filter
from datasets.jobs.progress import GOING
from evaluation.display import run_series, runs_compared
from evaluation.models import EvaluationQuery, EvaluationRun, QuestionSet
from evaluation.question_sets import (
    MAX_BYTES,
    BatchQuestion,
    QuestionSetError,
    question_set_parse,
    undeclared_question,
)
from evaluation.runs import (
    MAX_SUITE_QUERIES,
    RunRefused,
    eval_suites,
    evaluation_run_start,
)
from kbplatform.admin_columns import cut, stacked, when
from retrieval.admin.forms import ConfigVersionForm
from retrieval.ragconfig.config import RagConfigError

RESULTS_PER_PAGE = 100
COMPARED_ROWS = 500


class BatchRunForm(ConfigVersionForm):
    questions_file = forms.FileField(
        required=False, label="Questions (file)",
        help_text="JSON lines ({\"query\": …, \"expected\": [source path or document id, …]}, "
                  "or the hit-test format) or CSV with a header row (query, expected, id; "
                  "several expected documents separated by |). No expected document: "
                  "off-topic, EMPTY is right.")
    questions_text = forms.CharField(
        required=False, label="… or paste them", widget=forms.Textarea(attrs={"rows": 8,
                                                                            "cols": 100}))
    question_set = forms.ModelChoiceField(
        queryset=QuestionSet.objects.none(), required=False,
        label="… or a stored question set",
        help_text="One of the tenant's question sets (Question sets, where the gate's are "
                  "named).")
    name = forms.CharField(max_length=200, required=False,
                           help_text="The series this run belongs to in the chart. Empty: the "
                                     "file's name, the set's, or \"pasted questions\".")

    def __init__(self, data: Any = None, files: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data, files, request=request)
        sets = scoped(QuestionSet.objects.select_related("tenant"), request, "tenant")
        cast(forms.ModelChoiceField, self.fields["question_set"]).queryset = sets  # type: ignore[type-arg]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        upload, text = cleaned.get("questions_file"), cleaned.get("questions_text") or ""
        stored = cleaned.get("question_set")
        if sum((bool(upload), bool(text.strip()), stored is not None)) != 1:
            raise forms.ValidationError("Upload a file of questions, paste them, or choose a "
                                        "stored set (one of the three).")
        if stored is not None:
            tenant = cleaned.get("tenant")
            if tenant is not None and stored.tenant_id != tenant.pk:
                self.add_error("question_set", f"a question set of {tenant.slug}, please")
            cleaned["questions"] = [BatchQuestion.of_json(q) for q in stored.questions]
            cleaned["name"] = (cleaned.get("name") or stored.name)[:200]
            return cleaned
        where = "questions_file" if upload else "questions_text"
        try:
            raw = upload.read(MAX_BYTES + 1) if upload else text.encode("utf-8", "replace")
            cleaned["questions"] = question_set_parse(raw)
        except QuestionSetError as exc:
            self.add_error(where, str(exc))
        tenant = cleaned.get("tenant")
        if tenant is not None and (refusal := undeclared_question(
                cleaned.get("questions", ()), tenant.filterable_fields)):
            self.add_error(where, refusal)
        name = cleaned.get("name") or (upload.name if upload else "pasted questions")
        cleaned["name"] = name[:200]
        return cleaned


class SuiteRunForm(ConfigVersionForm):
    datasets = None  # a suite is searched in a collection of its own
    suite = forms.ChoiceField(choices=(), help_text="The folders of KB_EVAL_SUITES_DIR.")
    queries = forms.IntegerField(
        min_value=1, max_value=MAX_SUITE_QUERIES, required=False,
        help_text=f"Only its first N judged queries. Empty: all (at most {MAX_SUITE_QUERIES}).")

    def __init__(self, data: Any = None, files: Any = None, *, request: HttpRequest) -> None:
        super().__init__(data, files, request=request)
        cast(forms.ChoiceField, self.fields["suite"]).choices = [(s, s) for s in eval_suites()]


@admin.register(EvaluationRun)
class EvaluationRunAdmin(TenantScopedAdmin[EvaluationRun]):
    # The other figures, the index and the embedder are on a run's page.
    list_display = ["id", "run_name", "version", "queries", "hit_rate", "ndcg", "status"]
    list_display_links = ["id", "run_name"]
    list_filter = ["kind", tenant_filter("tenant")]
    show_facets = admin.ShowFacets.NEVER
    list_select_related = ["tenant", "job"]
    search_fields = ["name"]
    actions = ["compare"]
    change_list_template = "admin/evaluation/evaluationrun/change_list.html"

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("compare/", view(self.compare_view), name="evaluation_evaluationrun_compare"),
            path("<path:object_id>/progress/", view(self.progress),
                 name="evaluation_evaluationrun_progress"),
            path("<path:object_id>/download/", view(self.download),
                 name="evaluation_evaluationrun_download"),
            path("<path:object_id>/query/<int:position>/", view(self.query_view),
                 name="evaluation_evaluationrun_query"),
            *super().get_urls()]

    def get_queryset(self, request: HttpRequest) -> QuerySet[EvaluationRun]:
        # A run's questions (up to 1 MB) are read by its task and its download, not its pages.
        return super().get_queryset(request).defer("questions")

    # --- the list: a chart per series above the table ----------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        response = super().changelist_view(request, {
            **(extra_context or {}), "can_run_suites": self._may_run_suites(request)})
        context = getattr(response, "context_data", None)
        if context and "cl" in context:
            finished = context["cl"].queryset.filter(finished_at__isnull=False)
            context["series"] = run_series(finished.select_related("tenant")[:200])
        return response

    # --- starting a run ------------------------------------------------------------------

    def _may_run_suites(self, request: HttpRequest) -> bool:
        # A suite loads a corpus into a collection of its own: a platform resource.
        return request.user.is_superuser and self.has_add_permission(request)

    def add_view(self, request: HttpRequest, form_url: str = "",
                 extra_context: dict[str, Any] | None = None) -> HttpResponse:
        suite = request.GET.get("kind") == EvaluationRun.Kind.SUITE
        if not self.has_add_permission(request) or suite and not self._may_run_suites(request):
            raise PermissionDenied
        form_class = SuiteRunForm if suite else BatchRunForm
        form = form_class(request.POST or None, request.FILES or None, request=request)
        if request.method == "POST" and form.is_valid():
            try:
                run = self._start(request, form.cleaned_data, suite=suite)
            except RagConfigError as exc:  # a stored row the converter refuses today
                form.add_error("version", f"This version of the config does not validate: "
                                          f"{exc}")
            except RunRefused as exc:
                form.add_error(None, format_html(
                    '{} — <a href="{}">follow it</a>.', str(exc),
                    reverse("admin:evaluation_evaluationrun_change", args=[exc.run.pk])))
            else:
                messages.success(request, f"Run {run.pk} started: follow it below.")
                return redirect("admin:evaluation_evaluationrun_change", run.pk)
        title = "New suite evaluation" if suite else "New batch hit test"
        context = {**self.admin_site.each_context(request), "title": title, "form": form,
                   "opts": self.opts, "suite": suite, "suites": eval_suites() if suite else []}
        return TemplateResponse(request, "admin/evaluation/evaluationrun/new.html", context)

    @staticmethod
    def _start(request: HttpRequest, data: dict[str, Any], *, suite: bool) -> EvaluationRun:
        common = {"tenant": data["tenant"], "version": data["change"],
                  "created_by": request.user.get_username()}
        if suite:
            return evaluation_run_start(kind=EvaluationRun.Kind.SUITE, name=data["suite"],
                                        max_queries=data["queries"], **common)
        return evaluation_run_start(kind=EvaluationRun.Kind.BATCH, name=data["name"],
                                    questions=data["questions"],
                                    dataset_ids=data["dataset_ids"], **common)

    # --- a run's page, its progress, one query's trace, the download -------------------

    def _run(self, request: HttpRequest, object_id: str) -> EvaluationRun:
        run = self.viewed_object(request, object_id)
        if run is None:
            raise Http404("no such run")
        return run

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        run = self.viewed_object(request, object_id)
        if run is None:
            return self.not_found(request, object_id)
        misses_only = request.GET.get("all") != "1"
        results = run.results.defer("trace", "query").order_by("position")
        if misses_only:
            results = results.filter(hit=False)
        page = Paginator(results, RESULTS_PER_PAGE).get_page(request.GET.get("p"))
        context = {**self.admin_site.each_context(request), "title": str(run), "opts": self.opts,
                   "run": run, "page": page, "misses_only": misses_only,
                   "settings_json": json.dumps(run.settings, indent=2, ensure_ascii=False)}
        if run.job is not None:
            context.update(progress=job_progress(run.job), progress_url=reverse(
                "admin:evaluation_evaluationrun_progress", args=[run.pk]))
        return TemplateResponse(request, "admin/evaluation/evaluationrun/run.html", context)

    def progress(self, request: HttpRequest, object_id: str) -> JsonResponse:
        run = self._run(request, object_id)
        if run.job is None:
            raise Http404("the run's job is gone")
        return JsonResponse(job_progress(run.job))

    def query_view(self, request: HttpRequest, object_id: str, position: int) -> HttpResponse:
        run = self._run(request, object_id)
        result = run.results.filter(position=position).first()
        if result is None:
            raise Http404("no such query")
        details = result.trace or {}
        context = {**self.admin_site.each_context(request), "opts": self.opts, "run": run,
                   "title": f"{run}: {result.query_id}", "result": result, "rd": details,
                   "trace": trace_tables(details, run.tenant_id) if details else None}
        return TemplateResponse(request, "admin/evaluation/evaluationrun/query.html", context)

    def download(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        """Every query's outcome, as CSV (`?format=csv`) or JSON, streamed row by row."""
        run = self._run(request, object_id)
        rows = run.results.defer("trace").order_by("position").iterator(chunk_size=500)
        name = f"evaluation-run-{run.pk}"
        if request.GET.get("format") == "csv":
            response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
            return response
        response = StreamingHttpResponse(_json_chunks(run, rows), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{name}.json"'
        return response

    # --- two runs side by side -----------------------------------------------------------

    @admin.action(description="Compare the two selected runs query by query")
    def compare(self, request: HttpRequest, queryset: QuerySet[EvaluationRun]
                ) -> HttpResponse | None:
        ids = sorted(queryset.values_list("pk", flat=True))
        if len(ids) != 2:
            self.message_user(request, "Select exactly two runs to compare.", messages.ERROR)
            return None
        return redirect(f"{reverse('admin:evaluation_evaluationrun_compare')}"
                        f"?a={ids[0]}&b={ids[1]}")

    def compare_view(self, request: HttpRequest) -> HttpResponse:
        a, b = (self._run(request, request.GET.get(side) or "0") for side in ("a", "b"))
        changed_only = request.GET.get("all") != "1"
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": f"Run {a.pk} and run {b.pk}, query by query",
                   "cmp": runs_compared(a, b, changed_only=changed_only, limit=COMPARED_ROWS),
                   "changed_only": changed_only}
        return TemplateResponse(request, "admin/evaluation/evaluationrun/compare.html", context)

    # --- columns and permissions ---------------------------------------------------------

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a run is a measurement: kept as it was made

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and not (
            obj is not None and _going(obj))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[EvaluationRun]) -> None:
        # A run whose job still runs is writing its outcomes: it stays.
        super().delete_queryset(request, queryset.exclude(job__status__in=GOING))

    @admin.display(description="name", ordering="name")
    def run_name(self, run: EvaluationRun) -> str:
        return cut(run.name, 11)

    @admin.display(description="config")
    def version(self, run: EvaluationRun) -> str:
        return cut(run.config_label, 10)  # it names the tenant

    @admin.display(description="hit rate")
    def hit_rate(self, run: EvaluationRun) -> str:
        return _figure(run, "hit_rate")

    @admin.display(description="nDCG@10")
    def ndcg(self, run: EvaluationRun) -> str:
        return _figure(run, "ndcg@10")

    @admin.display(description="status", ordering="created_at")
    def status(self, run: EvaluationRun) -> str:
        """How it went, and below when it was started."""
        status = run.job.status if run.job else ("succeeded" if run.finished_at else "–")
        return stacked(status, when(run.created_at))


def _going(run: EvaluationRun) -> bool:
    return run.job is not None and run.job.status in GOING


def _figure(run: EvaluationRun, name: str) -> str:
    value = run.metrics.get(name)
    return f"{value:.3f}" if value is not None else "–"


COLUMNS = ("position", "query_id", "query", "expected", "ranking", "status", "hit",
           "reciprocal_rank", "ndcg@10", "latency_ms")


def _fields(result: EvaluationQuery) -> dict[str, Any]:
    return dict(zip(COLUMNS, (result.position, result.query_id, result.query, result.expected,
                              result.ranking, result.status, result.hit, result.reciprocal_rank,
                              result.ndcg, result.latency_ms), strict=True))


def _csv_lines(rows: Iterator[EvaluationQuery]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: list[Any]) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(list(COLUMNS))
    for result in rows:
        yield line([csv_cell(v) for v in _fields(result).values()])


# A spreadsheet runs a cell whose text starts with one of these (after blanks) as a formula;
# OWASP's "CSV injection": such a text cell is prefixed with a single quote.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """One cell of a download: numbers stay numbers, lists are joined by |, text that a
    spreadsheet would evaluate is neutralised. Only text is the question set's (the user's)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    text = "|".join(value) if isinstance(value, list) else str(value)
    return f"'{text}" if text.lstrip(" \n").startswith(_FORMULA_START) else text


def _json_chunks(run: EvaluationRun, rows: Iterator[EvaluationQuery]) -> Iterator[str]:
    head = {"id": run.pk, "name": run.name, "kind": run.kind, "tenant": run.tenant.slug,
            "config": run.config_scope, "config_version": run.config_version,
            "collection": run.collection,
            "embedder": run.embedder, "queries": run.queries, "metrics": run.metrics,
            "latency_ms": run.latency_ms, "settings": run.settings,
            "created_at": run.created_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None}
    yield json.dumps(head, ensure_ascii=False)[:-1] + ', "results": ['
    for number, result in enumerate(rows):
        yield ("," if number else "") + json.dumps(_fields(result), ensure_ascii=False)
    yield "]}"

# The regression gate: question sets and held config changes (registered on import).
from evaluation import admin_gate  # noqa: E402, F401
