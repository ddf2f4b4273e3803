"""Tenant-scoped staff: a staff user who is not a superuser sees, in every admin page, only the
rows of the tenants that list them as staff (Tenant.staff); a row of another tenant is missing
as a row that does not exist is. Superusers see every tenant; platform-wide pages (the index
operations) stay theirs alone.

Every tenant-owned ModelAdmin derives from TenantScopedAdmin and names the path from its model
to the tenant; the custom pages (hit testing, datasets at a glance, evaluation runs) read the
same `admin_tenant_ids`. ReadOnlyAdmin is the pages of rows the code writes (tasks, tool calls,
rebuilds), which no one adds or edits by hand.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from django.contrib import admin
from django.contrib.admin.options import BaseModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse

from datasets.documents.selectors import db_id
from datasets.models import Dataset, Tenant

_CACHE = "_kb_admin_tenant_ids"
M = TypeVar("M", bound=Model)


def admin_tenant_ids(request: HttpRequest) -> frozenset[int] | None:
    """The tenants the request's user may see in the admin; None: every tenant (superuser)."""
    user = request.user
    if user.is_superuser:
        return None
    if not hasattr(request, _CACHE):
        ids = (frozenset(Tenant.objects.filter(staff=user).values_list("pk", flat=True))
               if user.is_authenticated and user.is_staff else frozenset())
        setattr(request, _CACHE, ids)
    return getattr(request, _CACHE)  # type: ignore[no-any-return]


def scoped(queryset: QuerySet[M], request: HttpRequest, tenant_path: str) -> QuerySet[M]:
    """`queryset` narrowed to the user's tenants (`tenant_path`: the lookup to the tenant)."""
    ids = admin_tenant_ids(request)
    if ids is None:
        return queryset
    return queryset.filter(**{f"{tenant_path}__in": ids})


def admin_tenants(request: HttpRequest) -> QuerySet[Tenant]:
    return scoped(Tenant.objects.order_by("slug"), request, "pk")


def admin_datasets(request: HttpRequest) -> QuerySet[Dataset]:
    # Dataset.__str__ names its tenant: one query for a list of choices, not one per dataset.
    return scoped(Dataset.objects.select_related("tenant"), request, "tenant")


def tenant_filter(tenant_path: str, title: str = "tenant") -> type[admin.SimpleListFilter]:
    """A list filter by tenant whose choices are the user's tenants only (the stock related
    filter lists every tenant of the platform)."""

    class TenantFilter(admin.SimpleListFilter):
        parameter_name = f"{tenant_path}__id__exact"

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            return [(str(pk), slug) for pk, slug in
                    admin_tenants(request).values_list("pk", "slug")]

        def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
            value = self.value()
            if value is None:
                return queryset
            pk = db_id(value)  # "²" is a digit to isdigit(), not to int()
            if pk is None:
                return queryset.none()
            return queryset.filter(**{f"{tenant_path}__id": pk})

    TenantFilter.title = title
    return TenantFilter


class ReadOnlyAdmin(BaseModelAdmin[Any]):
    """No add and no change from the admin; no delete either unless `deletable` (then the
    stock delete permission). Put first among the bases, before the ModelAdmin or inline."""

    deletable = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.deletable and super().has_delete_permission(request, obj)


class TenantScopedAdmin(admin.ModelAdmin[M], Generic[M]):
    """A ModelAdmin over rows owned by a tenant: lists, pages, actions and the choices of its
    forms hold the user's tenants only."""

    tenant_path = "tenant"

    def get_queryset(self, request: HttpRequest) -> QuerySet[M]:
        return scoped(super().get_queryset(request), request, self.tenant_path)

    def viewed_object(self, request: HttpRequest, object_id: str) -> M | None:
        """The object of one of this admin's own pages: 403 without the view permission,
        asked before the lookup (it tells nothing); None when it does not exist or is
        another tenant's."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self.get_object(request, unquote(object_id))

    def not_found(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The admin's own answer for an object it does not find."""
        return self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined, no-any-return]
            request, self.opts, object_id)

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None
                       ) -> bool:
        # tenant_filter's parameter (Django checks relational lookups against the stock
        # filters' field paths only); what it filters is scoped above anyway.
        return lookup == f"{self.tenant_path}__id__exact" or super().lookup_allowed(
            lookup, value, request)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest,
                                 **kwargs: Any) -> Any:
        choices = _choices(db_field.related_model, request)
        if choices is not None:
            kwargs.setdefault("queryset", choices)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest,
                                 **kwargs: Any) -> Any:
        choices = _choices(db_field.related_model, request)
        if choices is not None:
            kwargs.setdefault("queryset", choices)
        return super().formfield_for_manytomany(db_field, request, **kwargs)


def _choices(model: type[Model], request: HttpRequest) -> QuerySet[Any] | None:
    if model is Tenant:
        return admin_tenants(request)
    if model is Dataset:
        return admin_datasets(request)
    return None
