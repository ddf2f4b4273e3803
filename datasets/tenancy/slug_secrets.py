"""A tenant's slug names its secrets: KB_CHAT_API_KEY_<SLUG> is the one chat-key variable its
RAG configs may name (retrieval checks that at use time), KB_SOURCE_SECRET_<SLUG>[_<NAME>] the
credentials its sources may name (checked when a source is saved and when it syncs), so a
rename moves them with it;
KB_SOURCE_ROOTS binds source folders to it (`SLUG=/path`, a parent's `/path/<slug>/`).

A rename is refused while it would hand a key or a folder over: when the new slug's variable is
set already (it is someone's key) or folders are bound to the new slug, while anything of the
tenant names a key variable — the apps above datasets say what of theirs does
(slug_use_register, from their AppConfig.ready) — and while folders are bound to the old slug
(the next tenant of that name would read them). Only superusers rename a tenant at all
(datasets/admin/pages.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from datasets.models import Source, Tenant
from datasets.sources.locations import rename_refusals
from datasets.sources.secrets import slug_refusals

KEY_VARIABLE_PREFIX = "KB_CHAT_API_KEY_"

# tenant → why its slug is in use (one sentence each); [] when nothing of it names the slug
SlugUse = Callable[[Tenant], list[str]]
_uses: list[SlugUse] = []


def key_variable_of(slug: str) -> str:
    """The chat-key variable a slug names: KB_CHAT_API_KEY_<SLUG>, "-" as "_"."""
    return KEY_VARIABLE_PREFIX + slug.upper().replace("-", "_")


def slug_use_register(use: SlugUse) -> None:
    if use not in _uses:
        _uses.append(use)


def tenant_rename_refusals(*, tenant: Tenant, slug: str) -> list[str]:
    """Why `tenant` may not be renamed to `slug` ([] when it may)."""
    refusals = [reason for use in _uses for reason in use(tenant)]
    variable = key_variable_of(slug)
    if variable in os.environ:
        refusals.append(f"{variable} is set in this deployment: it is someone's chat key, and "
                        f"a tenant renamed to {slug} would be sent it. Unset it first (and set "
                        f"it again after the rename if it is meant for this tenant).")
    named = list(Source.objects.filter(dataset__tenant=tenant).exclude(secret_env="")
                 .values_list("name", flat=True)[:3])
    if named:
        refusals.append(f"its sources {', '.join(named)} name credential variables of its "
                        "slug: clear them first, and name the new slug's after the rename.")
    refusals += slug_refusals(slug, tenant=tenant)
    return refusals + rename_refusals(old=tenant.slug, new=slug)
