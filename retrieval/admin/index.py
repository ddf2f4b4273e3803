"""Admin for the index: its versions, and the index operations page (rebuild, rollback to the
previous version, reconcile) whose buttons start a job and open the job's live page.

Platform-wide: only superusers see the operations (an index version serves every tenant).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from datasets.admin.scope import ReadOnlyAdmin
from datasets.models import Job
from kbplatform.admin_columns import cut, stacked, when
from kbplatform.errors import ApiError
from retrieval.index.models import IndexVersion
from retrieval.index.operations import INDEX_TASKS, index_operation_start
from retrieval.index.rebuild import CONFIRM_WORD, ROLLBACK_WORD, index_version_drop
from retrieval.index.versions import IndexNotReady, active_version

RECENT_JOBS = 10


def _job_page(job: Job) -> HttpResponse:
    return redirect("admin:datasets_job_change", job.pk)


def _refused(request: HttpRequest, exc: ApiError) -> None:
    running = exc.extra.get("job_id")
    if running is None:
        messages.error(request, str(exc.detail))
        return
    messages.error(request, format_html(
        "{} — <a href=\"{}\">follow it</a>; one index operation runs at a time.", exc.detail,
        reverse("admin:datasets_job_change", args=[running])))


@admin.register(IndexVersion)
class IndexVersionAdmin(ReadOnlyAdmin, admin.ModelAdmin[IndexVersion]):
    """Index versions: the serving one, retired ones kept for a rollback, failed ones.
    Written by rebuilds and changed only by the actions below; deleted by the "drop" action,
    since the collection must go with the row."""

    list_display = ["collection", "embedding", "status", "activated"]
    list_filter = ["status"]
    readonly_fields = [f.name for f in IndexVersion._meta.fields]
    actions = ["rollback", "drop"]
    change_list_template = "admin/retrieval/indexversion/change_list.html"

    @admin.display(description="collection", ordering="collection_name")
    def collection(self, version: IndexVersion) -> str:
        return cut(version.collection_name, 12)

    @admin.display(description="embedder", ordering="embedder")
    def embedding(self, version: IndexVersion) -> str:
        """Its embedder, and below the vectors' dimension and the chunks' size."""
        return stacked(cut(version.embedder, 14),
                       f"{version.dimension} dims · chunks {version.chunk_size}")

    @admin.display(description="activated", ordering="activated_at")
    def activated(self, version: IndexVersion) -> str:
        """When it first served (if it did), and below when it was made."""
        served = when(version.activated_at) if version.activated_at else "-"
        return stacked(served, f"made {when(version.created_at)}")

    def get_urls(self) -> list[Any]:
        operations = path("operations/", self.admin_site.admin_view(self.operations),
                          name="retrieval_indexversion_operations")
        return [operations, *super().get_urls()]

    def operations(self, request: HttpRequest) -> HttpResponse:
        """GET: the serving index, what a rollback would serve, the last index jobs, the three
        operations. POST: start one (rebuild and rollback need their confirm word)."""
        if not request.user.is_superuser:
            raise PermissionDenied
        if request.method == "POST":
            try:
                return _job_page(self._start(request))
            except ApiError as exc:
                _refused(request, exc)
                return redirect("admin:retrieval_indexversion_operations")
        retired = IndexVersion.objects.filter(status=IndexVersion.Status.RETIRED).order_by(
            "-activated_at", "-pk").first()
        jobs = Job.objects.filter(tenant__isnull=True, kind__in=list(INDEX_TASKS))
        context = {**self.admin_site.each_context(request), "title": "Index operations",
                   "opts": self.model._meta, "serving": active_version(), "retired": retired,
                   "building": IndexVersion.objects.filter(
                       status=IndexVersion.Status.BUILDING).first(),
                   "jobs": jobs.order_by("-pk")[:RECENT_JOBS],
                   "confirm_word": CONFIRM_WORD, "rollback_word": ROLLBACK_WORD}
        return TemplateResponse(request, "admin/retrieval/indexversion/operations.html", context)

    @staticmethod
    def _start(request: HttpRequest) -> Job:
        operation, confirm = request.POST.get("operation"), request.POST.get("confirm", "")
        if operation == "rebuild":
            if confirm != CONFIRM_WORD:
                raise ApiError(f"Type {CONFIRM_WORD} to confirm: a rebuild re-indexes every "
                               f"tenant's documents.")
            return index_operation_start(kind=Job.Kind.REBUILD)
        if operation == "rollback":
            if confirm != ROLLBACK_WORD:
                raise ApiError(f"Type {ROLLBACK_WORD} to confirm: a rollback switches every "
                               f"tenant's index.")
            if not IndexVersion.objects.filter(status=IndexVersion.Status.RETIRED).exists():
                raise ApiError("There is no retired index version to roll back to.")
            return index_operation_start(kind=Job.Kind.ROLLBACK, args=(None,),
                                         detail={"version_id": None})
        if operation == "reconcile":
            repair = request.POST.get("repair") == "on"
            return index_operation_start(kind=Job.Kind.RECONCILE, args=(repair,),
                                         detail={"repair": repair})
        raise ApiError("No such index operation.")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # An index version serves every tenant: platform-wide, a superuser's to see.
        return request.user.is_superuser and super().has_view_permission(request, obj)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        if not request.user.is_superuser:  # platform-wide: operators only
            actions.pop("rollback", None)
            actions.pop("drop", None)
        return actions

    @admin.action(description="Roll back: serve the selected (retired) version again")
    def rollback(self, request: HttpRequest, queryset: QuerySet[IndexVersion]
                 ) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "select exactly one version", messages.ERROR)
            return None
        version = queryset.get()
        try:
            job = index_operation_start(kind=Job.Kind.ROLLBACK, args=(version.pk,),
                                        detail={"version_id": version.pk})
        except ApiError as exc:
            _refused(request, exc)
            return None
        self.message_user(request, f"Rollback to {version.collection_name} queued; it serves "
                                   f"once brought up to date.")
        return _job_page(job)

    @admin.action(description="Drop the collections of the selected retired/failed versions")
    def drop(self, request: HttpRequest, queryset: QuerySet[IndexVersion]) -> None:
        for version in queryset:
            try:
                index_version_drop(version=version)
            except IndexNotReady as exc:
                self.message_user(request, f"{version.collection_name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"dropped {version.collection_name}")
