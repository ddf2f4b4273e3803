"""A source's credential: named by an environment variable bound to its tenant's slug
(KB_SOURCE_SECRET_<SLUG>, or KB_SOURCE_SECRET_<SLUG>_<NAME>), never stored. The source keeps
the variable's name; the sync reads the value when it runs, and no log line, error, sync log
or audit row holds it (a git error is worded by the platform, the variable named, never its
value).

A variable is one tenant's alone: a name two slugs give (`acme` and `acme-x` both name
KB_SOURCE_SECRET_ACME_X; `a-b` and `a_b` one prefix) is the longer prefix's tenant's and no
one's at a tie; one another tenant's source names already is not this one's; and a tenant is
not made or renamed to a slug under whose names another tenant's sources read credentials
(slug_refusals)."""

from __future__ import annotations

import os
import re

from datasets.models import Source, Tenant
from datasets.sources.base import SyncFailed

SOURCE_SECRET_PREFIX = "KB_SOURCE_SECRET_"
# 17 + 63 (a slug) + 1 + 39 = Source.secret_env's 120 characters.
_NAME = re.compile(r"[A-Z0-9_]{1,39}")
NOT_THIS_TENANTS = "not available to this tenant: name another variable"
MAX_SECRET_CHARS = 4096  # a token, a user and a token; read no further


def source_secret_of(slug: str) -> str:
    """The source-credential variable a slug names: KB_SOURCE_SECRET_<SLUG>, "-" as "_"."""
    return SOURCE_SECRET_PREFIX + slug.upper().replace("-", "_")


def _names(prefix: str, name: str) -> bool:
    return name == prefix or (name.startswith(prefix + "_")
                              and bool(_NAME.fullmatch(name[len(prefix) + 1:])))


def secret_refusal(name: str, *, slug: str) -> str | None:
    """Why a source of tenant `slug` may not name the variable `name` (None: it may)."""
    own = source_secret_of(slug)
    if not _names(own, name):
        return (f"a variable bound to this tenant: {own}, or {own}_<NAME> (capitals, digits, "
                "_); the variable's name, never the credential itself")
    if name.endswith("_FILE"):
        return (f"name the variable itself: {name} names the file of "
                f"{name.removesuffix('_FILE')}, read in its place when set")
    others = Tenant.objects.exclude(slug=slug).values_list("slug", flat=True)
    if any(_names(theirs, name) and len(theirs) >= len(own)
           for theirs in map(source_secret_of, others)):
        return NOT_THIS_TENANTS
    if Source.objects.filter(secret_env=name).exclude(dataset__tenant__slug=slug).exists():
        return NOT_THIS_TENANTS
    return None


def slug_refusals(slug: str, *, tenant: Tenant | None = None) -> list[str]:
    """Why a tenant (`tenant`, or a new one) may not take `slug`: another tenant's sources
    name credential variables its slug would name."""
    prefix = source_secret_of(slug)
    others = Source.objects.exclude(secret_env="")
    if tenant is not None:
        others = others.exclude(dataset__tenant=tenant)
    if any(_names(prefix, name) for name in others.values_list("secret_env", flat=True)):
        return [f"another tenant's sources read credentials from variables {prefix} names: "
                "a tenant of this slug could name them. Choose another slug."]
    return []


def _value(name: str) -> str:
    """NAME's value, or the file's NAME_FILE names (a secret mounted as a file), whitespace
    around it aside (a file's last newline); OSError when that file cannot be read."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        with open(path, encoding="utf-8") as secret:
            return secret.read(MAX_SECRET_CHARS + 1).strip()
    return os.environ.get(name, "").strip()


def secret_resolves(source: Source) -> bool | None:
    """Whether the variable the source names (or its file) is set in this process, and
    still this tenant's to name (None: it names none)."""
    if not source.secret_env:
        return None
    if secret_refusal(source.secret_env, slug=source.dataset.tenant.slug):
        return False
    try:
        return bool(_value(source.secret_env))
    except (OSError, UnicodeDecodeError):
        return False


def source_secret(source: Source) -> str:
    """The credential the source names, read now; SyncFailed when its variable is not set,
    its file cannot be read, it is no longer this tenant's to name, or it holds a control
    character or more than MAX_SECRET_CHARS."""
    name = source.secret_env
    if secret_refusal(name, slug=source.dataset.tenant.slug):
        raise SyncFailed(f"the credential variable {name} is not one of this tenant's")
    try:
        value = _value(name)
    except (OSError, UnicodeDecodeError):
        raise SyncFailed(f"the credential file {name}_FILE names cannot be read") from None
    if not value:
        raise SyncFailed(f"the credential variable {name} is not set in this deployment")
    if len(value) > MAX_SECRET_CHARS:
        raise SyncFailed(f"the credential in {name} is longer than {MAX_SECRET_CHARS} "
                         "characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SyncFailed(f"the credential in {name} holds a control character")
    return value
