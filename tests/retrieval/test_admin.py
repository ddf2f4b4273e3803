"""RagConfig admin: converter errors beside the field; saves go through the service."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.sites import AdminSite
from django.contrib.auth.models import User
from django.test import RequestFactory
from django.urls import reverse

from datasets.models import Dataset, Tenant
from retrieval.admin import RagConfigAdmin, RagConfigForm
from retrieval.config import RagConfigConverter, RagSettings
from retrieval.models import RagConfig, RagConfigChange

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


def test_valid_form(tenant: Tenant) -> None:
    form = RagConfigForm(data=form_data(tenant))
    assert form.is_valid(), form.errors


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

    data = form_data(tenant, return_n=4, enabled_retrievers=["VECTOR", "BM25"])
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
