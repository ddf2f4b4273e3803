"""The hit-testing page as a target: a link (a GET) runs nothing and calls no model, a run is a
POST with its CSRF token, a draft needs the change permission, the question reaches no log,
and the versions offered are those that exist."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from retrieval.ragconfig.services import rag_config_update
from tests.retrieval.chat_server import ChatServer, chat_server
from tests.retrieval.conftest import Imported

pytestmark = pytest.mark.django_db
QUESTION = "nginx 502 bad gateway upstream connection refused"
URL = "admin:retrieval_ragconfig_hit_test"


@pytest.fixture
def listener() -> Iterator[ChatServer]:
    """A chat endpoint the policy allows (this test's model): whatever reaches it is a model
    call the page made."""
    with chat_server() as server:
        yield server


def draft_for(server: ChatServer) -> str:
    return json.dumps({"chat_base_url": server.url, "enable_query_transform": True,
                       "query_transform_strategy": "REWRITE"})


def staff_of(client: Client, acme: Imported, *codenames: str) -> User:
    staff = User.objects.create_user("viewer", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    acme.tenant.staff.add(staff)
    client.force_login(staff)
    return staff


def test_a_link_with_a_draft_runs_nothing(admin_client: Client, acme: Imported,
                                          listener: ChatServer) -> None:
    # The link: one click made the server send the prompt (and the key) to the draft's
    # endpoint.
    page = admin_client.get(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION,
                                           "draft": draft_for(listener)})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="hit-test-form"' in html
    assert 'id="hit-answer"' not in html
    assert listener.requests == []


def test_a_link_runs_no_serving_config_with_a_model_either(admin_client: Client, acme: Imported,
                                                           listener: ChatServer) -> None:
    rag_config_update(config=None, tenant=acme.tenant, changed_by="a", values={
        "chat_base_url": listener.url, "enable_query_transform": True,
        "query_transform_strategy": "REWRITE"})
    page = admin_client.get(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION})
    assert 'id="hit-answer"' not in page.content.decode()
    assert listener.requests == []

    ran = admin_client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION})
    assert 'id="hit-answer"' in ran.content.decode() and len(listener.requests) == 1


def test_a_post_without_its_csrf_token_is_refused(acme: Imported,
                                                  listener: ChatServer) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("root", password="x"))
    form = client.get(reverse(URL)).content.decode()
    assert re.search(r'<form method="post"[^>]*id="hit-test-form">', form)
    assert 'name="csrfmiddlewaretoken"' in form
    refused = client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION,
                                         "draft": draft_for(listener)})
    assert refused.status_code == 403
    assert listener.requests == []


def test_view_only_staff_run_the_serving_config_but_no_draft(client: Client, acme: Imported,
                                                             listener: ChatServer) -> None:
    staff_of(client, acme, "view_ragconfig")
    refused = client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION,
                                         "draft": draft_for(listener)})
    assert refused.status_code == 403
    config = rag_config_update(config=None, tenant=acme.tenant, values={}, changed_by="a")
    from tests.retrieval.admin.test_ragconfig import form_data
    from_form = client.post(reverse("admin:retrieval_ragconfig_change", args=[config.pk]), {
        **form_data(acme.tenant, chat_base_url=listener.url, enable_query_transform="on"),
        "_hit_test_draft": "1", "_hit_test_question": QUESTION})
    assert from_form.status_code == 403
    assert listener.requests == []

    plain = client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION})
    assert plain.status_code == 200 and 'id="hit-answer"' in plain.content.decode()


def test_staff_who_may_change_configs_run_a_draft(client: Client, acme: Imported,
                                                  listener: ChatServer) -> None:
    staff_of(client, acme, "view_ragconfig", "change_ragconfig")
    ran = client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": QUESTION,
                                     "draft": draft_for(listener)})
    assert ran.status_code == 200 and 'id="hit-answer"' in ran.content.decode()
    assert len(listener.requests) == 1  # the draft's query transform


def test_the_question_reaches_no_log(admin_client: Client, acme: Imported,
                                     caplog: pytest.LogCaptureFixture) -> None:
    question = "nginx 502 bad gateway upstream zq-secret-marker"
    with caplog.at_level(logging.DEBUG):
        ran = admin_client.post(reverse(URL), {"tenant": acme.tenant.pk, "question": question})
    assert 'id="hit-answer"' in ran.content.decode()
    assert ran.request["PATH_INFO"] == reverse(URL)
    assert "zq-secret-marker" not in ran.request.get("QUERY_STRING", "")  # the logged line
    assert not [r for r in caplog.records if "zq-secret-marker" in r.getMessage()]


def test_the_versions_offered_are_those_of_the_tenants_configs(admin_client: Client,
                                                               acme: Imported) -> None:
    config = rag_config_update(config=None, tenant=acme.tenant, values={"return_n": 1},
                               changed_by="a")
    rag_config_update(config=config, tenant=acme.tenant, values={"return_n": 5},
                      changed_by="b")
    form = admin_client.get(reverse(URL)).content.decode()
    for name in ("version", "compare"):
        select = form.split(f'name="{name}"', 1)[1].split("</select>", 1)[0]
        assert '<optgroup label="acme/default">' in select, name
        for change in config.changes.all():
            assert f'<option value="{change.pk}">' in select, name
    assert 'type="number"' not in form
