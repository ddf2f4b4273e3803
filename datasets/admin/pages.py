"""Admin: tenants, keys, datasets, documents (upload, activate, re-index, status, original
file), chunks."""

from __future__ import annotations

import re
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html

from datasets.admin.display import (
    DatasetFilter,
    DocumentFilter,
    chunk_table,
    job_progress,
    original_link,
    preview,
    source_box,
)
from datasets.admin.panels import document_panels
from datasets.admin.scope import ReadOnlyAdmin, TenantScopedAdmin, scoped, tenant_filter
from datasets.documents.evidence import EvidenceKey
from datasets.documents.originals import original_open
from datasets.documents.selectors import db_id, with_document_counts
from datasets.documents.services import (
    UploadOutcome,
    document_delete,
    document_readers_set,
    document_reindex,
    document_set_activation,
    document_store_valid,
    document_validate,
    source_readers_due,
    tenant_documents_changed,
)
from datasets.ingestion.formats import SUFFIXES, Format
from datasets.models import ApiKey, Chunk, Dataset, Document, Job, PrincipalAlias, Source, Tenant
from datasets.sources.locations import source_refusals
from datasets.sources.secrets import secret_resolves, slug_refusals
from datasets.sources.services import SyncRunning, source_delete, source_sync_request
from datasets.tenancy.keys import api_key_create, may_mint_platform_keys
from datasets.tenancy.permissions import readers_checked
from datasets.tenancy.slug_secrets import tenant_rename_refusals
from kbplatform.admin_columns import cut, stacked, when
from kbplatform.errors import ApiError


class FieldNamesField(forms.CharField):
    """Names written as "team, service", kept as a list."""

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        return [name for name in re.split(r"[,\s]+", super().to_python(value) or "") if name]


class ReadersFormField(forms.CharField):
    """Readers written as "group:sre, user:alice@example.com" (or one a line), checked and
    kept as a list (datasets/tenancy/permissions.py)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
                         **kwargs)

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        try:
            return readers_checked(v for v in re.split(r"[,\n]", text) if v.strip())
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from exc


class TenantForm(forms.ModelForm[Tenant]):
    may_keep_more = False  # a superuser's form (TenantAdmin.get_form)
    filterable_fields = FieldNamesField(
        required=False, label="Filterable fields",
        help_text=Tenant._meta.get_field("filterable_fields").help_text
        + " Separated by commas, e.g. team, service.")

    def clean_slug(self) -> str:
        slug: str = self.cleaned_data["slug"]
        if self.instance.pk is None:
            refusals = slug_refusals(slug)
        elif slug != self.instance.slug:
            refusals = tenant_rename_refusals(tenant=self.instance, slug=slug)
        else:
            refusals = []
        if refusals:
            raise forms.ValidationError(refusals)
        return slug

    def clean(self) -> dict[str, Any]:
        """Raw queries: never kept past the deployment's bound; kept at all, or longer, only
        as a superuser says (the tenant's staff may stop keeping them, or keep them less)."""
        data = super().clean() or {}
        bound = settings.KB_AUDIT_RAW_QUERY_RETENTION_DAYS
        days = data.get("raw_query_retention_days")
        if days is not None and days > bound:
            self.add_error("raw_query_retention_days", f"{bound} days at most (the "
                                                       "deployment's "
                                                       "KB_AUDIT_RAW_QUERY_RETENTION_DAYS)")
        stored = Tenant.objects.filter(pk=self.instance.pk).first() if self.instance.pk else None
        if self.may_keep_more:
            return data
        if data.get("store_raw_queries") and not (stored and stored.store_raw_queries):
            self.add_error("store_raw_queries", "Only a superuser decides that this tenant's "
                                                "questions are kept.")
        before = (stored.raw_query_retention_days or bound) if stored else bound
        if "raw_query_retention_days" in data and (days or bound) > before:
            self.add_error("raw_query_retention_days", f"Only a superuser keeps raw queries "
                                                       f"longer than {before} days.")
        return data


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Tenant]):
    """Tenants; who is a tenant's staff, a new tenant and a tenant's slug (it names the
    tenant's secrets) are for superusers to say."""

    form = TenantForm
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    filter_horizontal = ["staff"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return scoped(super().get_queryset(request), request, "pk")

    def get_fields(self, request: HttpRequest, obj: Tenant | None = None) -> Any:
        fields = ["slug", "name", "store_raw_queries", "raw_query_retention_days",
                  "filterable_fields"]
        return [*fields, "staff"] if request.user.is_superuser else fields

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"may_keep_more": request.user.is_superuser})

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> Any:
        # Shown, not a form field: a forged POST of another slug is ignored.
        return [] if request.user.is_superuser else ["slug"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser and super().has_add_permission(request)

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "filterable_fields" in form.changed_data:
            tenant_documents_changed(tenant_id=obj.pk)


class ApiKeyForm(forms.ModelForm[ApiKey]):
    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "role", "datasets", "acts_for_people", "revoked"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant = data.get("tenant")
        foreign = [d for d in data.get("datasets", []) if tenant and d.tenant_id != tenant.pk]
        if foreign:
            raise forms.ValidationError("a key can only be scoped to its own tenant's datasets")
        return data


def roles_offered(request: HttpRequest, key: ApiKey | None) -> list[tuple[str, str]]:
    """The roles a key may be given on its form. A platform key is a superuser's to mint, and
    minted, never promoted: an existing key's plaintext is whoever made it's already."""
    platform = may_mint_platform_keys(request.user) and (
        key is None or key.role == ApiKey.Role.PLATFORM)
    return [(value, label) for value, label in ApiKey.Role.choices
            if platform or value != ApiKey.Role.PLATFORM]


@admin.register(PrincipalAlias)
class PrincipalAliasAdmin(TenantScopedAdmin[PrincipalAlias]):
    """A tenant's aliases: one person or group as a source names it and as its agents name
    it in `on_behalf_of` (docs/api.md, "Document permissions")."""

    list_display = ["alias", "principal", "tenant"]
    list_filter = [tenant_filter("tenant")]
    list_select_related = ["tenant"]
    search_fields = ["alias", "principal"]
    fields = ["tenant", "alias", "principal"]


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin[ApiKey]):
    """API keys of the user's tenants; platform keys are the superusers' alone (not even
    listed for a tenant's staff)."""

    form = ApiKeyForm
    list_display = ["key", "key_name", "role", "revoked", "used"]
    list_filter = ["role", "revoked", tenant_filter("tenant")]
    list_select_related = ["tenant"]
    filter_horizontal = ["datasets"]
    readonly_fields = ["prefix", "origin", "created_by", "created_at", "last_used_at"]

    @admin.display(description="key", ordering="prefix")
    def key(self, key: ApiKey) -> str:
        """Its prefix (what a caller's key starts with), and below its tenant."""
        return stacked(key.prefix, cut(key.tenant, 10))

    @admin.display(description="name", ordering="name")
    def key_name(self, key: ApiKey) -> str:
        return cut(key.name, 12)

    @admin.display(description="last used", ordering="last_used_at")
    def used(self, key: ApiKey) -> str:
        """When it was last used (or never), and below when it was made."""
        last = when(key.last_used_at) if key.last_used_at else "never"
        return stacked(last, f"made {when(key.created_at)}")

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        keys = super().get_queryset(request)
        return keys if may_mint_platform_keys(request.user) else keys.exclude(
            role=ApiKey.Role.PLATFORM)

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # A choice not offered is refused by the form, whatever a POST sends.
        cast(forms.ChoiceField, form.base_fields["role"]).choices = roles_offered(request, obj)
        return form

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        maker = request.user
        assert isinstance(maker, User)  # the admin's pages need a login
        key, plaintext = api_key_create(tenant=obj.tenant, role=obj.role, name=obj.name,
                                        created_by=maker, acts_for_people=obj.acts_for_people)
        obj.pk, obj.prefix, obj.key_hash = key.pk, key.prefix, key.key_hash
        obj._state.adding = False
        messages.warning(request, f"New API key (shown once, store it now): {plaintext}")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        key = form.instance
        ApiKey.objects.filter(pk=key.pk).update(scoped=key.datasets.exists())


@admin.register(Dataset)
class DatasetAdmin(TenantScopedAdmin[Dataset]):
    list_display = ["dataset_name", "scope", "activated", "document_count", "chunk_count",
                    "created_at"]
    list_filter = ["activated", tenant_filter("tenant")]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__slug"]

    change_list_template = "admin/datasets/dataset/change_list.html"  # links the glance page

    def get_readonly_fields(self, request: HttpRequest, obj: Dataset | None = None) -> Any:
        # A dataset's chunks are indexed as its tenant's (the tenant's Milvus partition, the
        # tenant filter): moving it would leave them where the new tenant never looks.
        return ["tenant"] if obj else []

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        return with_document_counts(super().get_queryset(request))

    @admin.display(description="dataset", ordering="name")
    def dataset_name(self, dataset: Dataset) -> str:
        """Its name, and below its tenant."""
        return stacked(cut(dataset.name, 14), cut(dataset.tenant, 14))

    @admin.display(description="kb scope", ordering="kb_scope")
    def scope(self, dataset: Dataset) -> str:
        return cut(dataset.kb_scope, 7)

    @admin.display(description="documents", ordering="documents_live")
    def document_count(self, dataset: Any) -> str:
        """Its documents, and below those not ready: in progress, failed."""
        counts = [(dataset.documents_in_progress, "in progress"),
                  (dataset.documents_failed, "failed")]
        not_ready = " · ".join(f"{n} {what}" for n, what in counts if n)
        return stacked(dataset.documents_live, not_ready) if not_ready else str(
            dataset.documents_live)

    @admin.display(description="chunks", ordering="chunks")
    def chunk_count(self, dataset: Any) -> int:
        return int(dataset.chunks)


class DocumentReadersForm(forms.ModelForm[Document]):
    """A document's page: its readers are all it edits (an uploaded one's: a synced one's are
    its source's)."""

    readers = ReadersFormField(help_text=Document._meta.get_field("readers").help_text)

    class Meta:
        model = Document
        fields = ["readers"]


class DocumentUploadForm(forms.ModelForm[Document]):
    upload = forms.FileField(help_text="a document: " + ", ".join(SUFFIXES))

    class Meta:
        model = Document
        fields = ["dataset"]

    def clean(self) -> dict[str, Any]:
        """Validate only: the row is written in save_model, after every check passed."""
        data = super().clean() or {}
        upload, dataset = data.get("upload"), data.get("dataset")
        if upload is not None and dataset is not None:
            raw = upload.read()
            try:
                valid = document_validate(file_name=upload.name, raw=raw,
                                          max_bytes=settings.KB_MAX_UPLOAD_BYTES)
            except ApiError as exc:
                raise forms.ValidationError(str(exc.detail)) from exc
            taken = Document.objects.filter(dataset=dataset, source_path=valid.name,
                                            deleted=False).exclude(content_hash=valid.digest)
            if taken.exists():
                raise forms.ValidationError(f"a document named {valid.name!r} already exists "
                                            "in this dataset")
            data["valid"] = valid
        return data


def upload_message(outcome: UploadOutcome) -> str:
    """One message: which document, and what the upload did to it."""
    document = outcome.document
    url = reverse("admin:datasets_document_change", args=[document.pk])
    name = format_html("“<a href=\"{}\">{}</a>”", url, document.source_path)
    if document.title and document.title != document.source_path:
        name = format_html("{} ({})", name, document.title)
    job = format_html(" (<a href=\"{}\">job {}</a>)", reverse(
        "admin:datasets_job_change", args=[outcome.job.pk]), outcome.job.pk) if outcome.job else ""
    if outcome.changed:
        queued = format_html(": queued for indexing{}", job) if outcome.job else ""
        return format_html("Added {} to {}{}.", name, document.dataset, queued)
    if outcome.job:
        return format_html("{} is unchanged, but was not indexed yet: indexing queued "
                           "again{}.", name, job)
    return format_html("{} is unchanged and already indexed: nothing to do.", name)


@admin.register(Document)
class DocumentAdmin(TenantScopedAdmin[Document]):
    tenant_path = "dataset__tenant"
    list_display = ["document", "dataset_name", "state", "chunks", "updated_at"]
    list_filter = ["status", "activated", "deleted", "category", ("dataset", DatasetFilter),
                   tenant_filter("dataset__tenant")]
    list_select_related = ["dataset__tenant"]
    search_fields = ["source_path", "title", "=doc_id"]
    actions = ["activate", "deactivate", "reindex", "delete_documents"]
    readonly_fields = ["doc_id", "dataset", "source_path", "file_name", "title", "domain",
                       "keywords", "category", "business_key", "fields", "owner",
                       "reviewed_at", "valid_until", "url", "language", "content_hash",
                       "activated", "deleted", "status", "error", "chunk_count", "indexed_hash",
                       "readers_at_source", "indexed_readers", "revision", "synced_revision",
                       "source", "source_commit", "source_version", "created_at", "updated_at",
                       "format", "original_file", "converter_version", "conversion_notes",
                       "source_redacted", "document_chunks", "evidence_use"]

    @admin.display(description="document", ordering="source_path")
    def document(self, document: Document) -> str:
        """Its title, and below the path it has in its dataset."""
        return stacked(cut(document.title or document.source_path, 18),
                       cut(document.source_path, 20))

    @admin.display(description="dataset", ordering="dataset")
    def dataset_name(self, document: Document) -> str:
        """Its dataset, and below its category."""
        dataset = cut(document.dataset, 9)
        return stacked(dataset, cut(document.category, 9)) if document.category else dataset

    @admin.display(description="chunks", ordering="chunk_count")
    def chunks(self, document: Document) -> int:
        return document.chunk_count

    @admin.display(description="status", ordering="status")
    def state(self, document: Document) -> str:
        """Its indexing status, and below whether lookups may not find it."""
        status = document.get_status_display()
        if document.deleted:
            return stacked(status, "deleted")
        return status if document.activated else stacked(status, "deactivated")

    @admin.display(description="original file")
    def original_file(self, document: Document) -> str:
        return original_link(document)

    @admin.display(description="markdown indexed (converted from the original; secrets "
                               "redacted)")
    def source_redacted(self, document: Document) -> str:
        return source_box(document.source_text)

    def get_urls(self) -> list[Any]:
        original = path("<path:object_id>/original/", self.admin_site.admin_view(self.original),
                        name="datasets_document_original")
        return [original, *super().get_urls()]

    def original(self, request: HttpRequest, object_id: str) -> FileResponse:
        """The original file as uploaded, as an attachment never rendered by the browser (an
        HTML original is the uploader's, not the admin's page); a PDF in the browser's PDF
        viewer, at the page a link names."""
        document = self.viewed_object(request, object_id)
        if document is None or document.deleted or not document.original:
            raise Http404("no such original file")
        try:
            handle = original_open(document.original)
        except FileNotFoundError as exc:
            raise Http404("the original file is missing from the storage") from exc
        if document.format == Format.PDF:
            # Shown in the browser, so that evidence's `#page=N` opens its page: a PDF is
            # never read as a page of the admin (its type is fixed, nosniff), and a sandbox
            # would stop the browser's PDF viewer.
            response = FileResponse(handle, filename=document.file_name,
                                    content_type="application/pdf")
            response["X-Content-Type-Options"] = "nosniff"
            return response
        response = FileResponse(handle, as_attachment=True, filename=document.file_name,
                                content_type="application/octet-stream")
        response["Content-Security-Policy"] = "sandbox"
        return response

    @admin.display(description="chunks")
    def document_chunks(self, document: Document) -> str:
        return chunk_table(document)

    @admin.display(description="use as evidence")
    def evidence_use(self, document: Document) -> str:
        return document_panels(document)  # the upper apps' panels (cited rates)

    def get_form(self, request: HttpRequest, obj: Document | None = None,
                 change: bool = False, **kwargs: Any) -> Any:
        kwargs["form"] = DocumentReadersForm if obj else DocumentUploadForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Document | None = None) -> Any:
        if obj is None:
            return []
        return [*self.readonly_fields, "readers"] if obj.source_id else self.readonly_fields

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Only an uploaded document's readers are edited here: a document's content changes
        # through an upload or an action (which need the change permission, so it stays).
        document = self.viewed_object(request, object_id)
        editable = document is not None and document.source_id is None
        read_only = {} if editable else {"show_save": False, "show_save_and_continue": False}
        return super().change_view(request, object_id, form_url, {
            **(extra_context or {}), "title": "View document",
            "show_save_and_add_another": False, **read_only})

    def get_fields(self, request: HttpRequest, obj: Document | None = None) -> Any:
        if obj is None:
            return ["dataset", "upload"]
        fields = list(self.readonly_fields)
        return [*fields[:fields.index("owner")], "readers", *fields[fields.index("owner"):]]

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        if change:
            # Its readers, and nothing else: the rest changes through actions and uploads.
            if "readers" in form.changed_data and obj.source_id is None:
                document_readers_set(document=obj, readers=form.cleaned_data["readers"])
            return
        data = form.cleaned_data
        outcome = document_store_valid(dataset=data["dataset"], valid=data["valid"])
        # The admin's history names `obj`: make it the stored document.
        obj.pk, obj.source_path = outcome.document.pk, outcome.document.source_path
        obj._state.adding = False
        self.message_user(request, upload_message(outcome),
                          messages.SUCCESS if outcome.changed else messages.INFO)

    def response_add(self, request: HttpRequest, obj: Document,
                     post_url_continue: str | None = None) -> HttpResponse:
        # save_model has said what happened to the upload; Django's "was added successfully"
        # would be a second message, and a wrong one for an unchanged re-upload.
        if "_continue" in request.POST:
            url = reverse("admin:datasets_document_change", args=[obj.pk])
        elif "_addanother" in request.POST:
            url = request.path
        else:
            return self.response_post_save_add(request, obj)
        context: dict[str, Any] = {"preserved_filters": self.get_preserved_filters(request),
                                   "opts": self.opts}
        return HttpResponseRedirect(add_preserved_filters(context, url))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deletion must also reach Milvus: the "delete" action

    @admin.action(description="Activate selected documents", permissions=["change"])
    def activate(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset:
            document_set_activation(document=document, activated=True)

    @admin.action(description="Deactivate selected documents", permissions=["change"])
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset:
            document_set_activation(document=document, activated=False)

    @admin.action(description="Re-index selected documents (failed or stuck ones too)",
                  permissions=["change"])
    def reindex(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset.filter(deleted=False):
            document_reindex(document=document)

    @admin.action(description="Delete selected documents (and their chunks in Milvus)",
                  permissions=["change"])
    def delete_documents(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset.filter(deleted=False):
            document_delete(document=document)


class SourceForm(forms.ModelForm[Source]):
    readers = ReadersFormField(help_text=Source._meta.get_field("readers").help_text)

    class Meta:
        model = Source
        fields = ["dataset", "name", "kind", "location", "branch", "subfolder", "include",
                  "secret_env", "readers", "max_depth", "max_pages", "max_page_bytes",
                  "region", "interval_minutes"]
        widgets = {"location": forms.TextInput(attrs={"size": 80}),  # URLs and paths are long
                   "secret_env": forms.TextInput(attrs={"size": 60})}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        dataset = data.get("dataset") or getattr(self.instance, "dataset", None)
        if dataset is None:
            return data  # the dataset's own error says why; a location is its tenant's
        probe = Source(dataset=dataset, **{name: data.get(name, getattr(self.instance, name))
                                           for name in SourceForm.Meta.fields
                                           if name != "dataset"})
        refusals = source_refusals(probe)
        for field, why in refusals.items():
            self.add_error(field if field in self.fields else None, why)
        return data


@admin.register(Source)
class SourceAdmin(TenantScopedAdmin[Source]):
    """Sources of the user's tenants. "Sync now" is a button on a source's page and an action
    of the list, both a POST with the CSRF token."""

    form = SourceForm
    tenant_path = "dataset__tenant"
    list_display = ["source_name", "where", "schedule", "last_sync"]
    list_filter = ["kind", "last_status", ("dataset", DatasetFilter),
                   tenant_filter("dataset__tenant")]
    list_select_related = ["dataset__tenant"]
    search_fields = ["name", "location"]
    actions = ["sync_now", "delete_sources"]
    readonly_fields = ["credential", "last_revision", "last_sync_at", "last_status",
                       "last_error", "syncing_since", "created_at"]
    change_form_template = "admin/datasets/source/change_form.html"  # the Sync now button

    @admin.display(description="credential")
    def credential(self, source: Source) -> str:
        """Whether the variable it names is set where this page runs (never its value)."""
        resolves = secret_resolves(source)
        if resolves is None:
            return "none named"
        return (f"{source.secret_env} is set" if resolves else
                f"{source.secret_env} is not set in this deployment, or not this tenant's to "
                "name: syncs fail until it is")

    @admin.display(description="source", ordering="name")
    def source_name(self, source: Source) -> str:
        """Its name, and below its dataset."""
        return stacked(cut(source.name, 12), cut(source.dataset, 12))

    @admin.display(description="location", ordering="location")
    def where(self, source: Source) -> str:
        """Where it reads, and below what kind of place that is."""
        return stacked(cut(source.location, 16), source.get_kind_display())

    @admin.display(description="sync", ordering="interval_minutes")
    def schedule(self, source: Source) -> str:
        minutes = source.interval_minutes
        return f"every {minutes} min" if minutes else "on demand"

    @admin.display(description="last sync", ordering="last_sync_at")
    def last_sync(self, source: Source) -> str:
        """How the last sync ended, and below when (and the commit it reached)."""
        if source.last_sync_at is None:
            return source.get_last_status_display()
        commit = f" · {source.last_revision[:7]}" if source.last_revision else ""
        return stacked(source.get_last_status_display(), when(source.last_sync_at) + commit)

    def save_model(self, request: HttpRequest, obj: Source, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "readers" in form.changed_data:
            source_readers_due(source=obj)  # its documents are read by whom it names, at once

    def get_readonly_fields(self, request: HttpRequest, obj: Source | None = None) -> Any:
        # The name and kind name the source's documents (their paths): fixed once made.
        return [*self.readonly_fields, "dataset", "name", "kind"] if obj else self.readonly_fields

    def get_fields(self, request: HttpRequest, obj: Source | None = None) -> Any:
        # What the source is first, also once those are read-only (Django puts them last).
        identity = ["dataset", "name", "kind"]
        rest = [f for f in super().get_fields(request, obj) if f not in (*identity, "credential")]
        # Whether its credential variable is set, beside the variable.
        at = rest.index("secret_env") + 1 if "secret_env" in rest else len(rest)
        return [*identity, *rest[:at], "credential", *rest[at:]]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its documents must leave Milvus too: the "delete" action

    def get_urls(self) -> list[Any]:
        sync = path("<path:object_id>/sync/", self.admin_site.admin_view(self.sync_view),
                    name="datasets_source_sync")
        return [sync, *super().get_urls()]

    def sync_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST, the source page's button: a sync job, whose page then follows it."""
        source = self.viewed_object(request, object_id)
        if request.method != "POST" or not self.has_change_permission(request, source):
            raise PermissionDenied
        if source is None:
            return self.not_found(request, object_id)
        job = self._sync(request, source)
        if job is None:
            return redirect("admin:datasets_source_change", source.pk)
        return redirect("admin:datasets_job_change", job.pk)

    def _sync(self, request: HttpRequest, source: Source) -> Job | None:
        """A sync job of `source`, said in a message; None while one is queued or running."""
        try:
            job = source_sync_request(source=source)
        except SyncRunning as exc:
            self.message_user(request, f"No sync of {source}: {exc.detail}.", messages.WARNING)
            return None
        url = reverse("admin:datasets_job_change", args=[job.pk])
        self.message_user(request, format_html("Sync of {} queued (<a href=\"{}\">job {}</a>).",
                                               source, url, job.pk))
        return job

    @admin.action(description="Sync now", permissions=["change"])
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            self._sync(request, source)

    @admin.action(description="Delete selected sources and their documents",
                  permissions=["change"])
    def delete_sources(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            try:
                source_delete(source=source)
            except SyncRunning as exc:
                self.message_user(request, f"{source}: {exc.detail}", messages.WARNING)


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin, TenantScopedAdmin[Chunk]):
    tenant_path = "document__dataset__tenant"
    list_display = ["chunk", "document_of", "section", "text_preview", "chars"]
    # One document's chunks: the "chunks" link on its page (a document choice list would be
    # as long as the documents table).
    list_filter = [("document__dataset", DatasetFilter),
                   tenant_filter("document__dataset__tenant"), DocumentFilter]
    list_select_related = ["document__dataset__tenant"]
    raw_id_fields = ["document"]
    search_fields = ["=document__doc_id", "document__source_path", "document__title",
                     "breadcrumb"]
    search_help_text = ("An evidence id (`docId#anchor`, `docId#chunk-n`), a document id, "
                        "part of a document's path or title, or of a breadcrumb.")

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Chunk],
                           search_term: str) -> tuple[QuerySet[Chunk], bool]:
        key = EvidenceKey.parse(search_term.strip())
        if key is None:
            return super().get_search_results(request, queryset, search_term)
        chunk = Q(anchor=key.anchor) if key.anchor else Q(chunk_index=key.chunk_index)
        return queryset.filter(chunk, document__doc_id=db_id(key.doc_id) or 0), False

    @admin.display(description="chunk", ordering="chunk_index")
    def chunk(self, chunk: Chunk) -> str:
        """Its place in its document, and below the document's id (the evidence key in the
        title)."""
        return format_html('<span title="{}">{}</span>', chunk.evidence_key,
                           stacked(f"chunk {chunk.chunk_index}", chunk.document.doc_id))

    @admin.display(description="document", ordering="document__source_path")
    def document_of(self, chunk: Chunk) -> str:
        """Its document, and below the document's dataset."""
        return stacked(cut(chunk.document, 12), cut(chunk.document.dataset, 12))

    @admin.display(description="breadcrumb")
    def section(self, chunk: Chunk) -> str:
        return cut(chunk.breadcrumb, 10)

    @admin.display(description="preview")
    def text_preview(self, chunk: Chunk) -> str:
        return cut(preview(chunk.content), 14)

    @admin.display(description="chars")
    def chars(self, chunk: Chunk) -> int:
        return len(chunk.content)


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin, TenantScopedAdmin[Job]):
    """Jobs, read-only (they are written by their tasks) but deletable; a job's page follows it
    live (its progress, log and end state). A platform job (no tenant) is a superuser's only."""

    deletable = True

    list_display = ["id", "kind", "status", "progress_of", "scope", "times"]
    list_filter = ["kind", "status", tenant_filter("tenant")]
    list_select_related = ["tenant", "dataset__tenant"]
    raw_id_fields = ["document"]
    # Its log is shown by the progress panel, not as a JSON field.
    exclude = ["log"]
    readonly_fields = [f.name for f in Job._meta.fields if f.name != "log"]
    change_form_template = "admin/datasets/job/change_form.html"

    @admin.display(description="done")
    def progress_of(self, job: Job) -> str:
        return f"{job.done} / {job.total}"

    @admin.display(description="tenant / dataset", ordering="tenant__slug")
    def scope(self, job: Job) -> str:
        return cut(job.dataset or job.tenant or "platform", 12)

    @admin.display(description="created", ordering="created_at")
    def times(self, job: Job) -> str:
        """When it was created, and below its last news."""
        return stacked(when(job.created_at), f"updated {when(job.updated_at)}")

    def get_urls(self) -> list[Any]:
        progress = path("<path:object_id>/progress/", self.admin_site.admin_view(self.progress),
                        name="datasets_job_progress")
        return [progress, *super().get_urls()]

    def progress(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """The job's progress as JSON, polled by its page until it ends."""
        job = self.viewed_object(request, object_id)
        if job is None:
            raise Http404("no such job")
        return JsonResponse(job_progress(job))

    def render_change_form(self, request: HttpRequest, context: dict[str, Any],
                           add: bool = False, change: bool = False, form_url: str = "",
                           obj: Job | None = None) -> HttpResponse:
        if obj is not None:
            context.update(progress=job_progress(obj), progress_url=reverse(
                "admin:datasets_job_progress", args=[obj.pk]))
        return super().render_change_form(request, context, add, change, form_url, obj)
