"""RagConfig: service writes, history, selector precedence, database constraints."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from datasets.models import Dataset, Tenant
from retrieval.models import RagConfig, RagConfigChange
from retrieval.ragconfig.config import RagConfigError
from retrieval.ragconfig.selectors import ServingConfig, rag_config_for
from retrieval.ragconfig.services import rag_config_ensure_default, rag_config_update
from retrieval.ragconfig.settings import RagSettings
from tests.conftest import BOTH_RUNTIMES

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="acme")


@pytest.fixture
def dataset(tenant: Tenant) -> Dataset:
    return Dataset.objects.create(tenant=tenant, name="runbooks")


def test_create_then_update_bumps_version_and_records_history(tenant: Tenant) -> None:
    config = rag_config_update(config=None, tenant=tenant, values={"return_n": "3"},
                               changed_by="alice")
    assert (config.version, config.return_n, config.updated_by) == (1, 3, "alice")
    first = RagConfigChange.objects.get(config=config)
    assert first.before is None and first.after["return_n"] == 3

    config = rag_config_update(config=config, tenant=tenant,
                               values={"enable_rerank": "1", "rerank_top_n": 10},
                               changed_by="bob")
    config.refresh_from_db()
    assert (config.version, config.enable_rerank, config.rerank_top_n) == (2, True, 10)
    change = RagConfigChange.objects.get(config=config, version=2)
    assert change.changed_by == "bob"
    assert change.changed_fields() == {"enable_rerank": (False, True), "rerank_top_n": (5, 10)}


def test_config_none_updates_the_existing_default_instead_of_a_second_one(
        tenant: Tenant) -> None:
    rag_config_update(config=None, tenant=tenant, values={"return_n": 3}, changed_by="a")
    rag_config_update(config=None, tenant=tenant, values={"return_n": 4}, changed_by="b")
    assert RagConfig.objects.filter(tenant=tenant, dataset__isnull=True).count() == 1
    assert RagConfig.objects.get(tenant=tenant).version == 2


def test_unchanged_values_do_not_bump_the_version(tenant: Tenant) -> None:
    config = rag_config_update(config=None, tenant=tenant, values={}, changed_by="a")
    again = rag_config_update(config=config, tenant=tenant, values={"return_n": "5"},
                              changed_by="b")
    assert again.version == 1 and RagConfigChange.objects.count() == 1


@BOTH_RUNTIMES
def test_ensure_default_makes_what_serves_visible_once(runtime: str, tenant: Tenant,
                                                      dataset: Dataset) -> None:
    rag_config_update(config=None, tenant=tenant, dataset=dataset, values={"return_n": 3},
                      changed_by="a")
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[]) == ServingConfig(RagSettings(), None)

    config = rag_config_ensure_default(tenant=tenant, changed_by="demo")
    assert (config.dataset, config.version, config.updated_by) == (None, 1, "demo")
    assert config.to_settings() == RagSettings()  # what served before it existed
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[]) == ServingConfig(
        RagSettings(), 1, config_id=config.pk)
    assert RagConfigChange.objects.get(config=config).before is None

    # Called again (a demo run twice) after an operator's edit: that row, untouched.
    rag_config_update(config=config, tenant=tenant, values={"return_n": 4}, changed_by="op")
    again = rag_config_ensure_default(tenant=tenant, changed_by="demo")
    assert again.pk == config.pk and (again.version, again.return_n) == (2, 4)
    assert RagConfig.objects.filter(tenant=tenant, dataset__isnull=True).count() == 1


def test_invalid_values_write_nothing(tenant: Tenant) -> None:
    with pytest.raises(RagConfigError) as info:
        rag_config_update(config=None, tenant=tenant,
                          values={"enable_fallback": "yes please", "return_n": 0},
                          changed_by="a")
    assert set(info.value.errors) == {"enable_fallback", "return_n"}
    assert not RagConfig.objects.exists() and not RagConfigChange.objects.exists()


def test_dataset_of_another_tenant_is_rejected(tenant: Tenant) -> None:
    other = Dataset.objects.create(tenant=Tenant.objects.create(slug="other"), name="x")
    with pytest.raises(RagConfigError) as info:
        rag_config_update(config=None, tenant=tenant, dataset=other, values={},
                          changed_by="a")
    assert "dataset" in info.value.errors


def test_selector_precedence(tenant: Tenant, dataset: Dataset) -> None:
    other = Dataset.objects.create(tenant=tenant, name="faq")
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[dataset.pk]) == ServingConfig(
        RagSettings(), None)

    rag_config_update(config=None, tenant=tenant, values={"return_n": 3}, changed_by="a")
    rag_config_update(config=None, tenant=tenant, dataset=dataset,
                      values={"return_n": 4, "enabled_retrievers": ["VECTOR"]}, changed_by="a")
    rag_config_update(config=None, tenant=tenant, dataset=dataset, values={"return_n": 2},
                      changed_by="a")

    serving = rag_config_for(tenant_id=tenant.pk, dataset_ids=[dataset.pk])
    assert (serving.settings.return_n, serving.settings.enabled_retrievers,
            serving.version) == (2, ("VECTOR",), 2)
    # several datasets, or one without an override: the tenant default
    serving = rag_config_for(tenant_id=tenant.pk, dataset_ids=[dataset.pk, other.pk])
    assert (serving.settings.return_n, serving.settings.enabled_retrievers,
            serving.version) == (3, ("HYBRID",), 1)
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[other.pk]).settings.return_n == 3
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[]).settings.return_n == 3


def test_selector_ignores_other_tenants(tenant: Tenant) -> None:
    other = Tenant.objects.create(slug="other")
    rag_config_update(config=None, tenant=other, values={"return_n": 3}, changed_by="a")
    assert rag_config_for(tenant_id=tenant.pk, dataset_ids=[]) == ServingConfig(RagSettings(), None)


def test_model_defaults_match_the_settings_defaults(tenant: Tenant) -> None:
    assert RagConfig(tenant=tenant).to_settings() == RagSettings()


def test_a_hand_edited_row_is_rejected_not_half_trusted(tenant: Tenant) -> None:
    RagConfig.objects.create(tenant=tenant, enable_correction=True)
    with pytest.raises(RagConfigError):
        rag_config_for(tenant_id=tenant.pk, dataset_ids=[])


def test_a_config_names_only_its_own_tenants_key_variable(tenant: Tenant) -> None:
    """Else a config could send another tenant's key to an endpoint it chose."""
    Tenant.objects.create(slug="globex")
    eu = Tenant.objects.create(slug="acme-eu")
    saved = rag_config_update(config=None, tenant=eu, changed_by="t",
                              values={"chat_api_key_env": "KB_CHAT_API_KEY_ACME_EU"})
    assert saved.chat_api_key_env == "KB_CHAT_API_KEY_ACME_EU"
    for foreign in ("KB_CHAT_API_KEY_GLOBEX", "KB_CHAT_API_KEY_ACME_EU"):
        with pytest.raises(RagConfigError, match="chat_api_key_env"):
            rag_config_update(config=None, tenant=tenant, changed_by="t",
                              values={"chat_api_key_env": foreign})
    # A hand-edited row is refused when read: its lookups answer UNAVAILABLE.
    RagConfig.objects.create(tenant=tenant, chat_api_key_env="KB_CHAT_API_KEY_GLOBEX")
    with pytest.raises(RagConfigError, match="KB_CHAT_API_KEY_ACME, this tenant's"):
        rag_config_for(tenant_id=tenant.pk, dataset_ids=[])
    # Two slugs that give one variable name: neither may name it.
    Tenant.objects.create(slug="acme_eu")
    with pytest.raises(RagConfigError, match="same key variable as another tenant"):
        rag_config_for(tenant_id=eu.pk, dataset_ids=[])


@pytest.mark.parametrize("values", [{"retrieve_k": 3, "return_n": 5}, {"rrf_k": 0},
                                    {"reference_threshold": 1.5},
                                    {"reference_threshold": 0.7, "precise_threshold": 0.6}])
def test_database_check_constraints(tenant: Tenant, values: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        RagConfig.objects.create(tenant=tenant, **values)


def test_one_override_per_dataset_in_the_database(tenant: Tenant, dataset: Dataset) -> None:
    RagConfig.objects.create(tenant=tenant, dataset=dataset)
    with pytest.raises(IntegrityError), transaction.atomic():
        RagConfig.objects.create(tenant=tenant, dataset=dataset)


def test_deleting_the_dataset_removes_its_override_and_history(
        tenant: Tenant, dataset: Dataset) -> None:
    config = rag_config_update(config=None, tenant=tenant, dataset=dataset, values={},
                               changed_by="a")
    dataset.delete()
    assert not RagConfig.objects.filter(pk=config.pk).exists()
    assert not RagConfigChange.objects.exists()
