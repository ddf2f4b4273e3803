"""Platform keys are the platform operators': the admin offers and saves them for superusers
only, and the API honours one only when an operator made it (a superuser who still is one, or
a manage.py command); a tenant's staff reach nothing platform-wide in the admin."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from datasets.models import ApiKey, Job, Tenant
from datasets.tenancy.keys import api_key_create
from tests.datasets.builders import api_client

pytestmark = pytest.mark.django_db

ADD = reverse("admin:datasets_apikey_add")
INDEX_VERSIONS = "/api/knowledge/index-versions"
REBUILD = "/api/knowledge/rebuild-hybrid?confirm=REBUILD"
PLAINTEXT = re.compile(r"kb_[0-9a-f]{12}_[A-Za-z0-9_-]+")


def staff_of(client: Client, tenant: Tenant, name: str = "staffer") -> User:
    """A staff user of `tenant` with every permission of the project's models."""
    user = User.objects.create_user(name, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label__in=("datasets", "audit", "retrieval", "evaluation")))
    tenant.staff.add(user)
    client.force_login(user)
    return user


def mint(client: Client, tenant: Tenant, role: str) -> tuple[Any, str]:
    """Add a key on the admin's form: the response, and the plaintext it showed (or "")."""
    response = client.post(ADD, {"tenant": tenant.pk, "name": f"{role} key", "role": role,
                                 "_save": "Save"}, follow=True)
    found = PLAINTEXT.search(response.content.decode())
    return response, found.group(0) if found else ""


def platform_calls_work(secret: str) -> bool:
    """Whether the key reads the index versions and starts a rebuild; asserts that a refusal
    is a 403 that started nothing."""
    operator = api_client(secret)
    listing = operator.get(INDEX_VERSIONS)
    if listing.status_code == 200:
        return True
    assert listing.status_code == 403, listing.content
    assert "platform" in listing.json()["message"]
    rebuild = operator.post(REBUILD)
    assert rebuild.status_code == 403, rebuild.content
    assert not Job.objects.exists()
    return False


@pytest.fixture
def alpha() -> Tenant:
    return Tenant.objects.create(slug="alpha")


def test_tenant_staff_are_not_offered_a_platform_key(client: Client, admin_client: Client,
                                                     alpha: Tenant) -> None:
    staff_of(client, alpha)
    assert 'value="admin"' in client.get(ADD).content.decode()
    assert 'value="platform"' not in client.get(ADD).content.decode()
    assert 'value="platform"' in admin_client.get(ADD).content.decode()


def test_a_forged_post_of_a_platform_key_by_staff_is_refused(client: Client,
                                                             alpha: Tenant) -> None:
    staff_of(client, alpha)
    response, plaintext = mint(client, alpha, "platform")
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert plaintext == "" and not ApiKey.objects.exists()
    # Nor does an existing key of the tenant become one.
    key, _ = api_key_create(tenant=alpha, role="tool")
    url = reverse("admin:datasets_apikey_change", args=[key.pk])
    client.post(url, {"tenant": alpha.pk, "name": "", "role": "platform", "_save": "Save"})
    key.refresh_from_db()
    assert key.role == "tool"
    # An admin key it may make, as before.
    _, plaintext = mint(client, alpha, "admin")
    assert plaintext and ApiKey.objects.get(role="admin").created_by.username == "staffer"


def test_no_key_is_promoted_to_a_platform_key(admin_client: Client, alpha: Tenant) -> None:
    """Not even by a superuser: whoever made the key holds its plaintext."""
    key, _ = api_key_create(tenant=alpha, role="tool")
    url = reverse("admin:datasets_apikey_change", args=[key.pk])
    assert 'value="platform"' not in admin_client.get(url).content.decode()
    response = admin_client.post(url, {"tenant": alpha.pk, "role": "platform", "_save": "Save"})
    assert "Select a valid choice" in response.content.decode()
    key.refresh_from_db()
    assert key.role == "tool"


def test_staff_see_no_platform_key_even_of_their_tenant(client: Client, alpha: Tenant) -> None:
    platform, _ = api_key_create(tenant=alpha, role="platform", name="operators' key")
    staff_of(client, alpha)
    listing = client.get(reverse("admin:datasets_apikey_changelist")).content.decode()
    assert platform.prefix not in listing
    change = client.get(reverse("admin:datasets_apikey_change", args=[platform.pk]), follow=True)
    assert "doesn’t exist" in change.content.decode()


def test_a_superusers_platform_key_works_until_its_maker_is_no_operator(
        admin_client: Client, alpha: Tenant) -> None:
    _, plaintext = mint(admin_client, alpha, "platform")
    assert plaintext and platform_calls_work(plaintext)
    maker = User.objects.get(username="admin")
    assert ApiKey.objects.get(role="platform").created_by == maker
    # The key of someone who is no superuser (any more) is no platform key: the API refuses
    # what a tenant's staff could not have made.
    User.objects.filter(pk=maker.pk).update(is_superuser=False)
    assert not platform_calls_work(plaintext)
    User.objects.filter(pk=maker.pk).update(is_superuser=True, is_active=False)
    assert not platform_calls_work(plaintext)
    User.objects.filter(pk=maker.pk).update(is_active=True)
    assert platform_calls_work(plaintext)
    maker.delete()  # the key stays, made in the admin by nobody now
    assert ApiKey.objects.get(role="platform").created_by is None
    assert not platform_calls_work(plaintext)


def test_a_commands_platform_key_works(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("create_api_key", "--tenant", "operators", "--role", "platform")
    assert platform_calls_work(capsys.readouterr().out.split()[-1])


def test_the_service_refuses_a_platform_key_for_a_user_who_is_no_superuser(
        alpha: Tenant) -> None:
    from django.core.exceptions import PermissionDenied

    staffer = User.objects.create_user("staffer", is_staff=True)
    with pytest.raises(PermissionDenied):
        api_key_create(tenant=alpha, role="platform", created_by=staffer)
    assert not ApiKey.objects.exists()


def test_tenant_staff_reach_nothing_platform_wide_in_the_admin(client: Client,
                                                               alpha: Tenant) -> None:
    other = Tenant.objects.create(slug="bravo")
    platform_job = Job.objects.create(kind=Job.Kind.REBUILD)  # no tenant
    staff_of(client, alpha)
    for url in (reverse("admin:retrieval_indexversion_changelist"),
                reverse("admin:retrieval_indexversion_operations"),
                reverse("admin:datasets_tenant_add")):
        assert client.get(url).status_code == 403, url
    assert client.post(reverse("admin:retrieval_indexversion_operations"),
                       {"operation": "reconcile"}).status_code == 403
    assert client.get(reverse("admin:datasets_job_changelist")).context["cl"].result_count == 0
    assert client.get(reverse("admin:datasets_job_change", args=[platform_job.pk]),
                      follow=True).redirect_chain[-1][0] == reverse("admin:index")
    tenants = client.get(reverse("admin:datasets_tenant_changelist")).content.decode()
    assert "alpha" in tenants and "bravo" not in tenants
    assert client.get(reverse("admin:datasets_tenant_change", args=[other.pk]),
                      follow=True).redirect_chain[-1][0] == reverse("admin:index")
    suite = client.get(reverse("admin:evaluation_evaluationrun_add"), {"kind": "suite"})
    assert suite.status_code == 403
    index = client.get(reverse("admin:index")).content.decode()
    assert "Index operations" not in index and "Index versions" not in index
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_keys_stored_before_their_origin_was_recorded_keep_what_the_admin_log_says() -> None:
    """The migration: a key the admin's log says a user added was made in the admin by that
    user; any other was made by a command (an operator), as every key outside the admin is."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("datasets", "0009_job_kind_evaluate")], [
        ("datasets", "0010_api_key_created_by")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    tenant = old.get_model("datasets", "Tenant").objects.create(slug="old")
    keys = old.get_model("datasets", "ApiKey").objects
    by_staff = keys.create(tenant=tenant, prefix="aaaa", key_hash="a", role="platform")
    by_command = keys.create(tenant=tenant, prefix="bbbb", key_hash="b", role="platform")
    staffer = User.objects.create_user("old-staffer", is_staff=True)
    LogEntry.objects.create(user=staffer, content_type=ContentType.objects.get_for_model(ApiKey),
                            object_id=str(by_staff.pk), object_repr="key",
                            action_flag=ADDITION)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    call_command("migrate", verbosity=0)  # leave the schema as the other tests expect it
    by_staff, by_command = (ApiKey.objects.get(prefix=p) for p in ("aaaa", "bbbb"))
    assert (by_staff.origin, by_staff.created_by) == ("admin", staffer)
    assert (by_command.origin, by_command.created_by) == ("command", None)
