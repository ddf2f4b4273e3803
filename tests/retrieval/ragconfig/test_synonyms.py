"""Saving a tenant's synonym groups: what the service refuses, and the revision every write
changes (the lookups' cache key)."""

from __future__ import annotations

import pytest

from datasets.models import Tenant
from retrieval.models import SynonymGroup, SynonymRevision
from retrieval.ragconfig import synonyms
from retrieval.ragconfig.synonyms import (
    SynonymError,
    synonym_group_delete,
    synonym_group_save,
    synonym_terms,
)


def test_a_line_of_terms_is_split_on_equals_and_commas_as_typed_in_either_language() -> None:
    assert synonym_terms("从库 = replica =  read   slave") == ("从库", "replica", "read slave")
    assert synonym_terms("证书，certificate, cert＝TLS 证书") == (
        "证书", "certificate", "cert", "TLS 证书")
    assert synonym_terms(["挂了", "down", "crash"]) == ("挂了", "down", "crash")


@pytest.mark.parametrize(("line", "why"), [
    ("replica", "two terms at least"),
    ("replica = ", "two terms at least"),
    ("replica = Replica", "twice"),
    ("从库 = replica = ＲＥＰＬＩＣＡ", "twice"),
    ("replica = " + "x" * 65, "64 characters at most"),
    ("replica = 库", "2 characters at least"),
    (" = ".join(f"term{n}" for n in range(21)), "20 terms at most"),
])
def test_a_group_that_could_not_work_is_refused_with_the_reason(line: str, why: str) -> None:
    with pytest.raises(SynonymError, match=why):
        synonym_terms(line)


@pytest.mark.django_db
def test_a_saved_group_keeps_its_terms_as_written_and_who_wrote_them() -> None:
    tenant = Tenant.objects.create(slug="acme")
    group = synonym_group_save(tenant=tenant, terms="从库, Replica ,slave", changed_by="ops")
    group.refresh_from_db()
    assert group.terms == "从库 = Replica = slave"
    assert group.term_list() == ("从库", "Replica", "slave")
    assert group.updated_by == "ops"


@pytest.mark.django_db
def test_the_same_group_twice_is_refused_but_another_tenant_may_have_it() -> None:
    acme, globex = Tenant.objects.create(slug="acme"), Tenant.objects.create(slug="globex")
    synonym_group_save(tenant=acme, terms="从库 = replica", changed_by="ops")
    with pytest.raises(SynonymError, match="has this group already"):
        synonym_group_save(tenant=acme, terms="REPLICA = 从库", changed_by="ops")
    synonym_group_save(tenant=globex, terms="replica = 从库", changed_by="ops")
    assert SynonymGroup.objects.filter(tenant=acme).count() == 1


@pytest.mark.django_db
def test_an_edit_replaces_the_terms_of_its_group(  ) -> None:
    tenant = Tenant.objects.create(slug="acme")
    group = synonym_group_save(tenant=tenant, terms="从库 = replica", changed_by="ops")
    edited = synonym_group_save(tenant=tenant, terms="从库 = replica = slave", group=group,
                                changed_by="lead")
    assert edited.pk == group.pk
    assert list(SynonymGroup.objects.values_list("terms", "updated_by")) == [
        ("从库 = replica = slave", "lead")]


@pytest.mark.django_db
def test_a_tenant_has_a_bounded_number_of_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synonyms, "MAX_SYNONYM_GROUPS", 3)
    tenant = Tenant.objects.create(slug="acme")
    for n in range(3):
        synonym_group_save(tenant=tenant, terms=f"term{n} = alias{n}", changed_by="ops")
    with pytest.raises(SynonymError, match="3 synonym groups at most"):
        synonym_group_save(tenant=tenant, terms="one = more", changed_by="ops")
    # Editing one of them is not one more.
    group = SynonymGroup.objects.filter(tenant=tenant).first()
    synonym_group_save(tenant=tenant, terms="term0 = alias0 = other0", group=group,
                       changed_by="ops")


@pytest.mark.django_db
def test_every_write_changes_the_tenants_revision() -> None:
    tenant = Tenant.objects.create(slug="acme")

    def revision() -> str | None:
        return (SynonymRevision.objects.filter(tenant=tenant)
                .values_list("revision", flat=True).first())

    assert revision() is None
    group = synonym_group_save(tenant=tenant, terms="从库 = replica", changed_by="ops")
    first = revision()
    synonym_group_save(tenant=tenant, terms="从库 = replica = slave", group=group,
                       changed_by="ops")
    second = revision()
    synonym_group_delete(group=group)
    assert None not in (first, second, revision())
    assert len({first, second, revision()}) == 3
    assert not SynonymGroup.objects.exists()
