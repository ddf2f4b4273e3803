"""RagConfig admin: converter errors beside the field; saves go through the service."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.admin.sites import AdminSite
from django.contrib.auth.models import Permission, User
from django.forms.models import model_to_dict
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils.html import escape

from datasets.models import Dataset, Job, Tenant
from retrieval.admin.ragconfig import RagAgentForm, RagConfigAdmin, RagConfigForm
from retrieval.models import IndexVersion, RagAgent, RagConfig, RagConfigChange
from retrieval.ragconfig.config import RagConfigConverter
from retrieval.ragconfig.services import rag_config_update
from retrieval.ragconfig.settings import SETTING_NAMES, RagSettings
from tests.conftest import BOTH_RUNTIMES
from tests.datasets.admin.test_pages import assert_flat, assert_read_only_page, tenant_dataset

pytestmark = pytest.mark.django_db


def form_data(tenant: Tenant, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = RagConfigConverter.to_dict(RagSettings())
    data["metadata_filters"] = "{}"
    data["max_l2_distance"] = ""  # empty: the embedder's calibration
    data.update({"tenant": tenant.pk, "dataset": "", **overrides})
    # unchecked checkboxes are absent from a POST
    return {k: v for k, v in data.items() if v is not False}


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="acme")


def test_the_defaults_posted_are_read_back_as_the_defaults(tenant: Tenant) -> None:
    form = RagConfigForm(data=form_data(tenant))
    assert form.is_valid(), form.errors
    values = form.setting_values()
    assert set(values) == set(SETTING_NAMES)  # every knob is on the form
    assert RagConfigConverter.to_settings(values) == RagSettings()


def test_cross_field_error_is_shown_beside_the_field(tenant: Tenant) -> None:
    form = RagConfigForm(data=form_data(tenant, enable_correction="on"))
    assert not form.is_valid()
    assert "requires enable_quality_assessment" in form.errors["enable_correction"][0]

    form = RagConfigForm(data=form_data(tenant, retrieve_k=3, return_n=5))
    assert not form.is_valid()
    assert "at least return_n" in form.errors["retrieve_k"][0]


def test_converter_rules_beyond_model_fields(tenant: Tenant) -> None:
    form = RagConfigForm(data=form_data(tenant, metadata_filters='{"tenant_id": "9"}',
                                        enabled_retrievers=[]))
    assert not form.is_valid()
    assert "not a filterable key" in form.errors["metadata_filters"][0]
    assert "at least one" in form.errors["enabled_retrievers"][0]


def test_a_tenants_chat_key_variable_is_its_own(tenant: Tenant) -> None:
    form = RagConfigForm(data=form_data(tenant, chat_api_key_env="KB_CHAT_API_KEY_GLOBEX"))
    assert not form.is_valid()
    assert "KB_CHAT_API_KEY_ACME" in form.errors["chat_api_key_env"][0]
    assert RagConfigForm(data=form_data(tenant, chat_api_key_env="KB_CHAT_API_KEY_ACME")
                         ).is_valid()


def test_a_rag_agents_settings_are_checked_by_the_converter(tenant: Tenant) -> None:
    ok = RagAgentForm(data={"tenant": tenant.pk, "name": "AgenticRAG ops",
                            "agentic_graph": "SIMPLIFIED", "max_retry_count": 1})
    assert ok.is_valid(), ok.errors
    assert ok.save().overrides() == {"agentic_graph": "SIMPLIFIED", "agentic_max_retry_count": 1}
    bad = RagAgentForm(data={"tenant": tenant.pk, "name": "x<script>", "max_retry_count": 50,
                             "chat_model": "two words"})
    assert not bad.is_valid()
    assert set(bad.errors) == {"name", "max_retry_count", "chat_model"}


def test_second_tenant_default_is_refused(tenant: Tenant) -> None:
    RagConfig.objects.create(tenant=tenant)
    form = RagConfigForm(data=form_data(tenant))
    assert not form.is_valid()
    assert "already has a default" in form.errors["dataset"][0]


def test_dataset_of_another_tenant_is_refused(tenant: Tenant) -> None:
    other = Dataset.objects.create(tenant=Tenant.objects.create(slug="other"), name="x")
    form = RagConfigForm(data=form_data(tenant, dataset=other.pk))
    assert not form.is_valid()
    assert "another tenant" in form.errors["dataset"][0]


def test_save_model_records_who_and_what(tenant: Tenant) -> None:
    user = User.objects.create_superuser("admin", "a@example.com", "pw-123456")
    request = RequestFactory().post("/")
    request.user = user
    model_admin = RagConfigAdmin(RagConfig, AdminSite())

    form = RagConfigForm(data=form_data(tenant, return_n=4))
    assert form.is_valid(), form.errors
    obj = form.save(commit=False)
    model_admin.save_model(request, obj, form, change=False)
    assert obj.pk and obj.version == 1 and obj.updated_by == "admin"

    stored = RagConfig.objects.get(pk=obj.pk)
    form = RagConfigForm(data=form_data(tenant, return_n=2), instance=stored)
    assert form.is_valid(), form.errors
    obj = form.save(commit=False)
    model_admin.save_model(request, obj, form, change=True)
    assert (obj.version, obj.return_n) == (2, 2)
    change = RagConfigChange.objects.get(config=obj, version=2)
    assert change.changed_by == "admin" and change.changed_fields() == {"return_n": (4, 2)}


def test_admin_pages_create_and_show_history(admin_client: Any, tenant: Tenant) -> None:
    add_url = reverse("admin:retrieval_ragconfig_add")
    assert admin_client.get(add_url).status_code == 200

    data = form_data(tenant, return_n=4, enabled_retrievers=["VECTOR", "BM25"],
                     retrieval_execution_mode="PARALLEL")
    data.update({"changes-TOTAL_FORMS": "0", "changes-INITIAL_FORMS": "0"})
    response = admin_client.post(add_url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    config = RagConfig.objects.get(tenant=tenant)
    assert (config.version, config.enabled_retrievers, config.updated_by) == (
        1, ["VECTOR", "BM25"], "admin")

    change_url = reverse("admin:retrieval_ragconfig_change", args=[config.pk])
    data.update(return_n=3)
    data.pop("tenant"), data.pop("dataset")  # the scope is read-only once created
    data.update({"changes-TOTAL_FORMS": "1", "changes-INITIAL_FORMS": "1",
                 "changes-0-id": str(config.changes.get().pk), "changes-0-config": config.pk})
    response = admin_client.post(change_url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    page = admin_client.get(change_url).content.decode()
    assert "return_n: 4 → 3" in page

    bad = admin_client.post(change_url, {**data, "enable_correction": "on"})
    assert bad.status_code == 200
    assert "requires enable_quality_assessment" in bad.content.decode()
    assert RagConfig.objects.get(pk=config.pk).version == 2


def as_posted(value: Any) -> Any:
    """A form value as a browser submits what the widget shows."""
    if value is None:
        return ""
    return value if isinstance(value, list) else str(value)


@BOTH_RUNTIMES
def test_the_add_form_starts_from_the_defaults_and_saves_them(runtime: str, admin_client: Any,
                                                             tenant: Tenant) -> None:
    add_url = reverse("admin:retrieval_ragconfig_add")
    form = admin_client.get(add_url).context["adminform"].form
    shown = {name: form[name].value() for name in SETTING_NAMES}  # as the widgets show them
    assert {**shown, "metadata_filters": json.loads(shown["metadata_filters"])} == (
        RagConfigConverter.to_dict(RagSettings()))

    # Pick the tenant, change nothing else, Save (an unticked checkbox is not posted).
    data = {name: as_posted(value) for name, value in shown.items() if value is not False}
    data.update({"tenant": tenant.pk, "changes-TOTAL_FORMS": "0", "changes-INITIAL_FORMS": "0"})
    response = admin_client.post(add_url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert RagConfig.objects.get(tenant=tenant).to_settings() == RagSettings()


@BOTH_RUNTIMES
def test_every_setting_explains_itself_in_the_group_of_its_stage(
        runtime: str, admin_client: Any) -> None:
    fields = [f for f in RagConfig._meta.concrete_fields if not f.primary_key]
    assert [f.name for f in fields if not f.help_text] == []
    html = admin_client.get(reverse("admin:retrieval_ragconfig_add")).content.decode()
    for name in SETTING_NAMES:
        text = str(RagConfig._meta.get_field(name).help_text)
        assert f"<div>{escape(text)}</div>" in html, name  # under the field, as text
        assert "not used" not in text.lower(), name  # every field does what it says
    grouped = [name for _, group in RagConfigAdmin.fieldsets[1:] for name in group["fields"]]
    assert sorted(grouped) == sorted(SETTING_NAMES)  # each setting once, in its stage's group
    for title, _ in RagConfigAdmin.fieldsets[1:]:
        assert f">{title}<" in html


def rag_config(n: int) -> RagConfig:
    dataset = tenant_dataset(n)
    # Every other one a dataset override: the list names its dataset and tenant.
    return RagConfig.objects.create(tenant=dataset.tenant, dataset=dataset if n % 2 else None)


def index_version(n: int) -> IndexVersion:
    return IndexVersion.objects.create(collection_name=f"kb_v{n}", embedder="use", dimension=8,
                                       chunk_size=800, chunk_overlap=100,
                                       status=IndexVersion.Status.RETIRED)


PAGES = [
    ("/admin/retrieval/ragconfig/", rag_config),
    ("/admin/retrieval/ragconfigchange/",
     lambda n: RagConfigChange.objects.create(config=rag_config(n), version=1, after={})),
    ("/admin/retrieval/indexversion/", index_version),
    ("/admin/retrieval/ragagent/",
     lambda n: RagAgent.objects.create(tenant=Tenant.objects.create(slug=f"t{n}"),
                                       name=f"AgenticRAG {n}")),
]


@pytest.mark.parametrize(("url", "add_row"), PAGES, ids=[p[0] for p in PAGES])
def test_lists_do_not_query_per_row(admin_client: Client, url: str, add_row: Any) -> None:
    assert_flat(admin_client, url, add_row)


READ_ONLY = [("/admin/retrieval/indexversion/", index_version),
             ("/admin/retrieval/ragconfigchange/",
              lambda n: RagConfigChange.objects.create(config=rag_config(n), version=1, after={}))]


@BOTH_RUNTIMES
@pytest.mark.parametrize(("url", "add_row"), READ_ONLY, ids=[p[0] for p in READ_ONLY])
def test_read_only_pages_show_no_save_button(runtime: str, admin_client: Client, url: str,
                                             add_row: Any) -> None:
    row = add_row(1)
    assert_read_only_page(admin_client, f"{url}{row.pk}/change/")
    response = admin_client.post(f"{url}{row.pk}/change/", {"status": "active", "version": 9})
    assert response.status_code == 403
    assert model_to_dict(type(row).objects.get(pk=row.pk)) == model_to_dict(row)


@BOTH_RUNTIMES
def test_each_history_row_shows_its_own_version(runtime: str, admin_client: Client,
                                                tenant: Tenant) -> None:
    config = rag_config_update(config=None, tenant=tenant, values={}, changed_by="a")
    for n in (4, 3):
        config = rag_config_update(config=config, tenant=tenant, values={"return_n": n},
                                   changed_by="b")
    assert config.version == 3
    html = admin_client.get("/admin/retrieval/ragconfigchange/").content.decode()
    rows = re.findall(r'<th class="field-config_scope"><a [^>]*><span [^>]*>([^<]*)</span></a>'
                      r'</th><td class="field-version"><a [^>]*>(\d+)</a></td>', html)
    assert rows == [("acme/default", "3"), ("acme/default", "2"), ("acme/default", "1")]
    assert "acme/default v" not in html  # no row named with the latest version

    first = config.changes.get(version=1)
    page = admin_client.get(f"/admin/retrieval/ragconfigchange/{first.pk}/change/")
    html = page.content.decode()
    assert "acme/default</a> (now at version 3)" in html and "acme/default v" not in html

    listed = admin_client.get("/admin/retrieval/ragconfig/").content.decode()
    assert re.findall(r'<th class="field-scope"><a [^>]*><span [^>]*>([^<]*)</span></a></th>',
                      listed) == ["acme/default"]


def test_change_page_does_not_query_per_history_row(admin_client: Client) -> None:
    config = rag_config(1)
    assert_flat(admin_client, reverse("admin:retrieval_ragconfig_change", args=[config.pk]),
                lambda n: RagConfigChange.objects.create(config=config, version=n + 1,
                                                         before={"return_n": n},
                                                         after={"return_n": n + 1}))


def test_only_superusers_roll_back_or_drop_index_versions(admin_client: Client,
                                                         client: Client) -> None:
    version = index_version(1)
    url = reverse("admin:retrieval_indexversion_changelist")
    actions = admin_client.get(url).context["action_form"].fields["action"].choices
    assert {"rollback", "drop"} <= set(dict(actions))

    staff = User.objects.create_user("operator", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_indexversion", "change_indexversion"]))
    client.force_login(staff)
    assert client.get(url).status_code == 403  # platform-wide: not even the list
    for action in ["rollback", "drop"]:
        client.post(url, {"action": action, "_selected_action": [version.pk]})
    assert IndexVersion.objects.get().status == IndexVersion.Status.RETIRED
    assert not Job.objects.exists()


# --- rollback to an earlier version -------------------------------------------------------

def history(tenant: Tenant) -> RagConfig:
    """acme/default at version 3: v1 the defaults, v2 return_n 4, v3 return_n 3 + dense only."""
    config = rag_config_update(config=None, tenant=tenant, values={}, changed_by="a")
    config = rag_config_update(config=config, tenant=tenant, values={"return_n": 4},
                               changed_by="b")
    return rag_config_update(config=config, tenant=tenant, changed_by="c", values={
        "return_n": 3, "enabled_retrievers": ["VECTOR"]})


@BOTH_RUNTIMES
def test_rolling_back_writes_a_new_version_equal_to_the_old(runtime: str, admin_client: Client,
                                                            tenant: Tenant) -> None:
    config = history(tenant)
    second = config.changes.get(version=2)
    page = admin_client.get(reverse("admin:retrieval_ragconfigchange_change", args=[second.pk]))
    assert 'value="Roll back to version 2"' in page.content.decode()

    done = admin_client.post(reverse("admin:retrieval_ragconfigchange_rollback",
                                     args=[second.pk]), follow=True)
    config.refresh_from_db()
    assert config.version == 4 and config.updated_by == "admin"
    assert RagConfigConverter.to_dict(config.to_settings()) == second.after
    latest = config.changes.get(version=4)
    assert (latest.note, latest.before, latest.after) == (
        "rollback to version 2", config.changes.get(version=3).after, second.after)
    text = done.content.decode()
    assert "The config acme/default is at version 4, equal to version 2." in text
    assert "rollback to version 2: enabled_retrievers: " in text  # the history says why
    assert "return_n: 3 → 4" in text

    again = admin_client.post(reverse("admin:retrieval_ragconfigchange_rollback",
                                      args=[second.pk]), follow=True)
    assert "already equal to version 2: nothing changed" in again.content.decode()
    assert RagConfig.objects.get().version == 4


def test_fields_added_after_a_version_take_their_defaults(tenant: Tenant) -> None:
    from retrieval.ragconfig.drafts import rag_config_rollback

    config = history(tenant)
    old = config.changes.get(version=2)
    old.after = {k: v for k, v in old.after.items() if k != "agentic_graph"}  # before 0010
    old.save()
    rag_config_update(config=config, tenant=tenant, changed_by="d",
                      values={"agentic_graph": "SIMPLIFIED"})
    restored = rag_config_rollback(change=old, changed_by="e").config  # no gate: it serves
    assert restored.agentic_graph == RagSettings().agentic_graph and restored.return_n == 4


def test_a_version_todays_rules_refuse_is_not_restored(admin_client: Client,
                                                       tenant: Tenant) -> None:
    config = history(tenant)
    old = config.changes.get(version=2)
    old.after = {**old.after, "chat_api_key_env": "KB_CHAT_API_KEY_OTHER"}  # not acme's
    old.save()
    done = admin_client.post(reverse("admin:retrieval_ragconfigchange_rollback",
                                     args=[old.pk]), follow=True)
    assert "Version 2 cannot be restored as it was: chat_api_key_env" in \
        done.content.decode()
    assert RagConfig.objects.get().version == 3


def test_rolling_back_needs_a_post_and_the_right_to_change_configs(
        client: Client, admin_client: Client, tenant: Tenant) -> None:
    config = history(tenant)
    url = reverse("admin:retrieval_ragconfigchange_rollback",
                  args=[config.changes.get(version=1).pk])
    assert admin_client.get(url).status_code == 403
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(
        codename__in=["view_ragconfig", "view_ragconfigchange"]))
    tenant.staff.add(viewer)
    client.force_login(viewer)
    page = client.get(reverse("admin:retrieval_ragconfigchange_change",
                              args=[config.changes.get(version=1).pk]))
    assert page.status_code == 200 and "Roll back to" not in page.content.decode()
    assert client.post(url).status_code == 403
    assert RagConfig.objects.get().version == 3


def test_the_admin_index_opens_the_console_pages_the_user_may_open(
        admin_client: Client, client: Client) -> None:
    html = admin_client.get(reverse("admin:index")).content.decode()
    console = html.split('id="operator-console"', 1)[1].split("</table>", 1)[0]
    for name in ("hit_test", "evaluationrun_add", "evaluationrun_changelist"):
        assert reverse(f"admin:retrieval_ragconfig_{name}" if name == "hit_test"
                       else f"admin:evaluation_{name}") in console, name
    assert reverse("admin:retrieval_indexversion_operations") in console
    assert reverse("admin:audit_datasets_glance") in console
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_ragconfig"))
    client.force_login(viewer)
    mine = client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:retrieval_ragconfig_hit_test") in mine
    assert reverse("admin:retrieval_indexversion_operations") not in mine
    assert reverse("admin:evaluation_evaluationrun_add") not in mine


def test_a_versions_page_lists_what_it_changed(admin_client: Client, tenant: Tenant) -> None:
    config = history(tenant)
    page = admin_client.get(reverse("admin:retrieval_ragconfigchange_change", args=[
        config.changes.get(version=2).pk])).content.decode()
    diff = page.split('id="version-diff"', 1)[1].split("</table>", 1)[0]
    assert diff.count("<tr>") == 2  # the header and the one setting version 2 changed


def test_no_rollback_is_offered_to_the_settings_that_serve(admin_client: Client,
                                                           tenant: Tenant) -> None:
    """The serving version's page offered "Roll back to version 3", which changed nothing."""
    config = history(tenant)  # version 3 serves

    def page(version: int) -> str:
        return admin_client.get(reverse("admin:retrieval_ragconfigchange_change", args=[
            config.changes.get(version=version).pk])).content.decode()

    assert "Roll back to" not in page(3)
    assert "Version 3 is the version of acme/default that serves now" in page(3)
    assert 'value="Roll back to version 2"' in page(2)
    admin_client.post(reverse("admin:retrieval_ragconfigchange_rollback",
                              args=[config.changes.get(version=2).pk]))
    # Version 4 serves, equal to version 2: version 2 has nothing to roll back to any more.
    assert "Roll back to" not in page(2) and "Start an A/B test" not in page(2)
    assert "Version 2 has the settings of version 4, which serves now" in page(2)
    assert 'value="Roll back to version 3"' in page(3)
    history_rows = admin_client.get(reverse("admin:retrieval_ragconfig_change",
                                            args=[config.pk])).content.decode()
    assert re.findall(r">(view[^<]*)</a>", history_rows) == [
        "view (serves now)", *["view, roll back to it"] * 3]


def test_the_drafts_question_is_a_labelled_field_not_in_a_row_of_buttons(
        admin_client: Client, tenant: Tenant) -> None:
    """It sat in a submit row, whose stylesheet paints every input as a button: it looked
    like one."""
    config = history(tenant)
    html = admin_client.get(reverse("admin:retrieval_ragconfig_change",
                                    args=[config.pk])).content.decode()
    rows = re.findall(r'<div class="submit-row"[^>]*>(.*?)</div>', html, re.S)
    assert any('name="_hit_test_draft"' in row for row in rows)  # the button is a button
    assert not any('name="_hit_test_question"' in row for row in rows)
    assert '<label for="draft-question">Question:</label>' in html
    assert re.search(r'<input type="text" name="_hit_test_question" id="draft-question" '
                     r'class="vTextField"', html)
