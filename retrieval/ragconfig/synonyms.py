"""Writes of a tenant's synonym groups: parsed, validated, bounded, and each one bumping the
tenant's synonym revision so that every lookup process reads the groups again."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable

from django.db import transaction

from datasets.models import Tenant
from retrieval.analysis import MIN_TERM_CHARS, normalize_text
from retrieval.ragconfig.models import (
    MAX_SYNONYM_TERM_CHARS,
    MAX_SYNONYM_TERMS,
    SYNONYM_SEPARATOR,
    SynonymGroup,
    SynonymRevision,
)

# Each group is matched against every question of the tenant: bounded, like its terms.
MAX_SYNONYM_GROUPS = 500
# "=" and ",", also as Chinese input methods type them (＝ ， 、), or one term a line.
_SEPARATORS = re.compile(r"[=,＝，、\n]")


class SynonymError(ValueError):
    """A group that cannot be saved; the message says why, in words an admin can act on."""


def synonym_terms(text: str | Iterable[str]) -> tuple[str, ...]:
    """The terms of one group, as written ("从库 = replica = slave", or a list of terms),
    checked: 2 to MAX_SYNONYM_TERMS distinct terms of 2 to MAX_SYNONYM_TERM_CHARS characters.
    Raises SynonymError."""
    pieces = _SEPARATORS.split(text) if isinstance(text, str) else list(text)
    terms = tuple(" ".join(p.split()) for p in pieces if p.strip())
    seen: dict[str, str] = {}
    for term in terms:
        if _SEPARATORS.search(term):
            raise SynonymError(f"{term!r}: a term cannot contain = or ,")
        if len(term) > MAX_SYNONYM_TERM_CHARS:
            raise SynonymError(f"{term[:20]!r}…: a term has {MAX_SYNONYM_TERM_CHARS} "
                               "characters at most")
        if len(normalize_text(term)) < MIN_TERM_CHARS:
            # A one-character term would match nearly every question (analysis.contains_term
            # ignores it).
            raise SynonymError(f"{term!r}: a term has {MIN_TERM_CHARS} characters at least")
        key = normalize_text(term)
        if key in seen:
            raise SynonymError(f"{term!r} is in the group twice (as {seen[key]!r})")
        seen[key] = term
    if len(terms) < 2:
        raise SynonymError('a group names two terms at least, e.g. "从库 = replica"')
    if len(terms) > MAX_SYNONYM_TERMS:
        raise SynonymError(f"a group has {MAX_SYNONYM_TERMS} terms at most")
    return terms


def synonym_group_check(*, tenant: Tenant, terms: str | Iterable[str],
                        group: SynonymGroup | None = None) -> tuple[str, ...]:
    """The group's terms if the tenant may save them (as a new group, or as `group`'s terms):
    valid, not a group the tenant has already, and within MAX_SYNONYM_GROUPS. Raises
    SynonymError."""
    checked = synonym_terms(terms)
    stored = group if group is not None and group.pk is not None else None  # None: a new one
    if stored is not None and stored.tenant_id != tenant.pk:
        raise SynonymError("the group belongs to another tenant")
    others = SynonymGroup.objects.filter(tenant=tenant)
    if stored is not None:
        others = others.exclude(pk=stored.pk)
    if others.filter(terms_key=_key(checked)).exists():
        raise SynonymError("the tenant has this group already")
    if stored is None and others.count() >= MAX_SYNONYM_GROUPS:
        raise SynonymError(f"a tenant has {MAX_SYNONYM_GROUPS} synonym groups at most")
    return checked


def synonym_group_save(*, tenant: Tenant, terms: str | Iterable[str], changed_by: str,
                       group: SynonymGroup | None = None) -> SynonymGroup:
    """Create a group of the tenant, or replace the terms of `group`, one of its groups.
    Raises SynonymError (synonym_group_check)."""
    with transaction.atomic():
        # Serialises the tenant's synonym writes: the bound and the duplicate check hold.
        Tenant.objects.select_for_update().only("pk").get(pk=tenant.pk)
        checked = synonym_group_check(tenant=tenant, terms=terms, group=group)
        row = group or SynonymGroup(tenant=tenant)
        row.terms = SYNONYM_SEPARATOR.join(checked)
        row.terms_key = _key(checked)
        row.updated_by = changed_by
        row.save()
        _bump(tenant.pk)
    return row


def _key(terms: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(sorted(normalize_text(t) for t in terms)).encode()
                          ).hexdigest()


def synonym_group_delete(*, group: SynonymGroup) -> None:
    with transaction.atomic():
        Tenant.objects.select_for_update().only("pk").get(pk=group.tenant_id)
        group.delete()
        _bump(group.tenant_id)


def _bump(tenant_id: int) -> None:
    SynonymRevision.objects.update_or_create(tenant_id=tenant_id,
                                             defaults={"revision": uuid.uuid4().hex})
