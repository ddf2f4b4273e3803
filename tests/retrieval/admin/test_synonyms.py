"""The synonym groups' admin: tenant staff list, add, edit and delete their tenants' groups
only; a superuser all of them; every write goes through the service."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from datasets.models import Tenant
from retrieval.models import SynonymGroup, SynonymRevision
from retrieval.ragconfig.synonyms import synonym_group_save

pytestmark = pytest.mark.django_db


@pytest.fixture
def groups() -> tuple[SynonymGroup, SynonymGroup]:
    alpha, bravo = Tenant.objects.create(slug="alpha"), Tenant.objects.create(slug="bravo")
    return (synonym_group_save(tenant=alpha, terms="从库 = replica", changed_by="a"),
            synonym_group_save(tenant=bravo, terms="证书 = certificate", changed_by="b"))


def staff_of(client: Client, tenant: Tenant) -> User:
    user = User.objects.create_user("staffer", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="retrieval", content_type__model="synonymgroup"))
    tenant.staff.add(user)
    client.force_login(user)
    return user


def change_url(group: SynonymGroup) -> str:
    return reverse("admin:retrieval_synonymgroup_change", args=[group.pk])


def test_staff_see_and_edit_their_tenants_groups_only(
        client: Client, groups: tuple[SynonymGroup, SynonymGroup]) -> None:
    alpha, bravo = groups
    staff_of(client, alpha.tenant)
    listing = client.get(reverse("admin:retrieval_synonymgroup_changelist")).content.decode()
    assert "replica" in listing and "certificate" not in listing and "bravo" not in listing

    # Another tenant's group is a group that does not exist: not shown, not changed, not
    # deleted.
    assert "doesn’t exist" in client.get(change_url(bravo), follow=True).content.decode()
    client.post(change_url(bravo), {"terms": "证书 = cert"})
    client.post(reverse("admin:retrieval_synonymgroup_delete", args=[bravo.pk]),
                {"post": "yes"})
    assert SynonymGroup.objects.get(pk=bravo.pk).terms == "证书 = certificate"

    # Nor can a group be added for it.
    client.post(reverse("admin:retrieval_synonymgroup_add"),
                {"tenant": bravo.tenant.pk, "terms": "挂了 = down"})
    assert not SynonymGroup.objects.filter(terms__contains="down").exists()

    # Their own: edited through the service (its revision changes, the editor is named).
    before = SynonymRevision.objects.get(tenant=alpha.tenant).revision
    response = client.post(change_url(alpha), {"terms": "从库，replica，slave"})
    assert response.status_code == 302, response.content
    alpha.refresh_from_db()
    assert (alpha.terms, alpha.updated_by) == ("从库 = replica = slave", "staffer")
    assert SynonymRevision.objects.get(tenant=alpha.tenant).revision != before


def test_a_group_the_service_refuses_is_a_form_error(
        client: Client, groups: tuple[SynonymGroup, SynonymGroup]) -> None:
    alpha, _ = groups
    staff_of(client, alpha.tenant)
    add = reverse("admin:retrieval_synonymgroup_add")
    for terms, why in (("replica", "two terms at least"), ("Replica = 从库", "already")):
        response = client.post(add, {"tenant": alpha.tenant.pk, "terms": terms})
        assert response.status_code == 200 and why in response.content.decode()
    assert SynonymGroup.objects.filter(tenant=alpha.tenant).count() == 1


def test_a_superuser_manages_every_tenants_groups(
        admin_client: Client, groups: tuple[SynonymGroup, SynonymGroup]) -> None:
    alpha, bravo = groups
    listing = admin_client.get(reverse("admin:retrieval_synonymgroup_changelist"))
    assert "replica" in listing.content.decode() and "certificate" in listing.content.decode()
    response = admin_client.post(reverse("admin:retrieval_synonymgroup_add"),
                                 {"tenant": bravo.tenant.pk, "terms": "挂了 = down = crash"})
    assert response.status_code == 302
    response = admin_client.post(reverse("admin:retrieval_synonymgroup_delete",
                                         args=[alpha.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert sorted(SynonymGroup.objects.values_list("terms", flat=True)) == [
        "挂了 = down = crash", "证书 = certificate"]
