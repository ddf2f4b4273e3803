"""API keys: stored hashed, shown once, resolved to a tenant and the datasets it may read."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from datasets.models import ApiKey, Dataset, PrincipalAlias, Tenant
from datasets.tenancy.permissions import ANONYMOUS, Access

KEY_PREFIX = "kb"


@dataclass(frozen=True)
class Caller:
    """The authenticated principal of an API request (request.user), and the person its
    call reads for: none unless the key may act for people and the call names one."""

    api_key: ApiKey
    access: Access = ANONYMOUS

    @property
    def tenant(self) -> Tenant:
        return self.api_key.tenant

    @property
    def is_admin(self) -> bool:
        return self.api_key.role in (ApiKey.Role.ADMIN, ApiKey.Role.PLATFORM)

    @property
    def is_platform(self) -> bool:
        return self.api_key.role == ApiKey.Role.PLATFORM and platform_key_vouched(self.api_key)

    @property
    def is_scoped(self) -> bool:
        return self.api_key.scoped

    @property
    def is_authenticated(self) -> bool:
        return True

    def datasets(self) -> QuerySet[Dataset]:
        """What this key may see at all: its tenant's datasets, narrowed to its scope; a tool
        key sees activated datasets only. Everything else "does not exist" for it."""
        datasets = Dataset.objects.filter(tenant_id=self.api_key.tenant_id)
        if self.api_key.scoped:
            datasets = datasets.filter(api_keys=self.api_key)
        if not self.is_admin:
            datasets = datasets.filter(activated=True)
        return datasets

    def acting_for(self, person: Access | None) -> Caller:
        """The caller reading for `person` (a call's `on_behalf_of`), widened by the tenant's
        aliases of its user and groups; a 403 when the key may not act for people."""
        from kbplatform.errors import Forbidden  # here: DRF's settings import this module

        if person is None:
            return self
        if not self.api_key.acts_for_people:
            raise Forbidden("this API key may not act for people: on_behalf_of needs a key "
                            "allowed to (its 'may act for people' setting)")
        aliases = PrincipalAlias.objects.filter(
            tenant_id=self.api_key.tenant_id, principal__in=sorted(person.principals or ())
        ).values_list("alias", flat=True)
        return replace(self, access=person.widened(aliases))

    def readable_dataset_ids(self) -> list[int]:
        """The datasets a lookup of this key searches: visible and activated."""
        return sorted(self.datasets().filter(activated=True).values_list("pk", flat=True))

    def writable_dataset_ids(self) -> list[int]:
        """The datasets this key may change: visible ones, for admin keys only."""
        return sorted(self.datasets().values_list("pk", flat=True)) if self.is_admin else []


def hash_key(secret: str) -> str:
    # The keys are 256-bit random: a plain SHA-256 is enough (no password stretching needed).
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def may_mint_platform_keys(user: User | AnonymousUser) -> bool:
    """Platform keys (and everything platform-wide) are the platform operators': active
    superusers, and whoever runs manage.py (who is no user of the admin)."""
    return user.is_active and user.is_superuser


def platform_key_vouched(key: ApiKey) -> bool:
    """Whether an operator stands behind a platform key: a command made it, or a superuser in
    the admin who still is an active one. A key made by anyone else (a tenant's staff, before
    the admin refused them; a maker since deleted) acts as its tenant's admin key only."""
    if key.origin == ApiKey.Origin.COMMAND:
        return True
    return key.created_by is not None and may_mint_platform_keys(key.created_by)


def api_key_create(*, tenant: Tenant, role: str = ApiKey.Role.TOOL, name: str = "",
                   datasets: Sequence[Dataset] = (), created_by: User | None = None,
                   acts_for_people: bool = False) -> tuple[ApiKey, str]:
    """Returns the row and the plaintext key; the key is not stored and cannot be shown again.
    `created_by`: the admin's user who makes it; None for an operator's command. Raises
    PermissionDenied for a platform key of a user who may not make one."""
    if role == ApiKey.Role.PLATFORM and created_by is not None \
            and not may_mint_platform_keys(created_by):
        raise PermissionDenied("a platform key is a superuser's to make")
    origin = ApiKey.Origin.COMMAND if created_by is None else ApiKey.Origin.ADMIN
    prefix = secrets.token_hex(6)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        key = ApiKey.objects.create(tenant=tenant, role=role, name=name, prefix=prefix,
                                    key_hash=hash_key(plaintext), scoped=bool(datasets),
                                    origin=origin, created_by=created_by,
                                    acts_for_people=acts_for_people)
        if datasets:
            key.datasets.set(datasets)
    return key, plaintext


def api_key_resolve(plaintext: str) -> ApiKey | None:
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX:
        return None
    key = ApiKey.objects.select_related("tenant", "created_by").filter(
        prefix=parts[1], revoked=False).first()
    if key is None or not hmac.compare_digest(key.key_hash, hash_key(plaintext)):
        return None
    return key


def bearer(header: str) -> str:
    """The key of an `Authorization: Bearer <key>` header; "" without one."""
    return header[7:].strip() if header.lower().startswith("bearer ") else ""


def caller_for_key(plaintext: str) -> Caller:
    """The caller a key stands for (every channel: REST, MCP); AuthenticationFailed when it
    is not a valid key, NotAuthenticated when there is none."""
    if not plaintext:
        raise exceptions.NotAuthenticated()
    key = api_key_resolve(plaintext)
    if key is None:
        raise exceptions.AuthenticationFailed("the API key is not valid or was revoked")
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        # At most one write a minute per key: this runs on every lookup.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Caller(api_key=key)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <key>` or `X-API-Key: <key>`."""

    def authenticate(self, request: Request) -> tuple[Caller, ApiKey] | None:
        plaintext = bearer(request.headers.get("Authorization", ""))
        plaintext = plaintext or request.headers.get("X-API-Key", "").strip()
        if not plaintext:
            return None
        who = caller_for_key(plaintext)
        return who, who.api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="kbplatform"'


def caller(request: Request) -> Caller:
    """The authenticated caller of an API view (every view requires one)."""
    assert isinstance(request.user, Caller)
    return request.user


class IsAdminKey(permissions.BasePermission):
    message = "this operation needs an admin API key"

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.user, Caller) and request.user.is_admin


class IsPlatformKey(permissions.BasePermission):
    message = "this operation is platform-wide: it needs a platform operator key"

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.user, Caller) and request.user.is_platform
