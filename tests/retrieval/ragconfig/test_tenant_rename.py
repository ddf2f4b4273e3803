"""A tenant's slug names its chat key (KB_CHAT_API_KEY_<SLUG>): tenant staff cannot change it,
and a superuser's rename is refused while it would move a key — the tenant's configs name its
key variable, or the new slug's variable is someone's key already."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from datasets.models import Tenant
from retrieval.ragconfig.config import RagConfigError
from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.chat_server import chat_server
from tests.retrieval.conftest import Imported, client_for

pytestmark = pytest.mark.django_db

KAFKA_LAG = "kafka consumer group lag keeps growing"


def staff_of(client: Client, tenant: Tenant) -> User:
    user = User.objects.create_user("staffer", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=("datasets", "audit", "retrieval", "evaluation")))
    tenant.staff.add(user)
    client.force_login(user)
    return user


def rename(client: Client, tenant: Tenant, slug: str) -> Any:
    return client.post(reverse("admin:datasets_tenant_change", args=[tenant.pk]),
                       {"slug": slug, "name": "renamed", "_save": "Save"})


def test_tenant_staff_cannot_change_their_tenants_slug(client: Client) -> None:
    alpha = Tenant.objects.create(slug="alpha")
    staff_of(client, alpha)
    page = client.get(reverse("admin:datasets_tenant_change", args=[alpha.pk])).content.decode()
    assert 'name="slug"' not in page and "alpha" in page  # shown, not editable
    response = rename(client, alpha, "gamma")  # a forged POST
    assert response.status_code == 302
    alpha.refresh_from_db()
    assert (alpha.slug, alpha.name) == ("alpha", "renamed")


def test_a_superusers_rename_is_refused_while_it_would_move_a_chat_key(
        admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    alpha = Tenant.objects.create(slug="alpha")
    config = rag_config_update(config=None, tenant=alpha, changed_by="test",
                               values={"chat_api_key_env": "KB_CHAT_API_KEY_ALPHA"})
    response = rename(admin_client, alpha, "gamma")
    assert response.status_code == 200
    assert "KB_CHAT_API_KEY_ALPHA" in response.content.decode()
    rag_config_update(config=config, tenant=alpha, changed_by="test",
                      values={"chat_api_key_env": ""})
    monkeypatch.setenv("KB_CHAT_API_KEY_GAMMA", "gamma-secret")
    response = rename(admin_client, alpha, "gamma")
    assert response.status_code == 200
    assert "KB_CHAT_API_KEY_GAMMA is set" in response.content.decode()
    alpha.refresh_from_db()
    assert alpha.slug == "alpha"
    monkeypatch.delenv("KB_CHAT_API_KEY_GAMMA")
    assert rename(admin_client, alpha, "gamma").status_code == 302
    alpha.refresh_from_db()
    assert alpha.slug == "gamma"


def test_a_renamed_tenants_config_never_sends_another_tenants_key(
        acme: Imported, make_key: Any, client: Client, admin_client: Client, settings: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: acme's staff rename acme to gamma and name gamma's key variable; the
    listener at acme's endpoint must only ever see acme's key."""
    monkeypatch.setenv("KB_CHAT_API_KEY_ACME", "acme-secret")
    monkeypatch.setenv("KB_CHAT_API_KEY_GAMMA", "gamma-secret")
    agent = client_for(make_key("acme")[1])
    with chat_server() as own:
        settings.KB_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]  # the local listener
        rag_config_update(config=None, tenant=acme.tenant, changed_by="test",
                          values={"chat_base_url": own.url,
                                  "chat_api_key_env": "KB_CHAT_API_KEY_ACME"})

        def answer() -> str:
            response = agent.post("/api/rag/answer", {"query": KAFKA_LAG}, format="json")
            assert response.status_code == 200, response.content
            return str(own.requests[-1]["authorization"])

        assert answer() == "Bearer acme-secret"
        staff_of(client, acme.tenant)
        rename(client, acme.tenant, "gamma")
        rename(admin_client, acme.tenant, "gamma")
        with pytest.raises(RagConfigError):
            rag_config_update(config=None, tenant=acme.tenant, changed_by="staffer",
                              values={"chat_api_key_env": "KB_CHAT_API_KEY_GAMMA"})
        assert answer() == "Bearer acme-secret"
    acme.tenant.refresh_from_db()
    assert acme.tenant.slug == "acme"
    assert all(r["authorization"] != "Bearer gamma-secret" for r in own.requests)
