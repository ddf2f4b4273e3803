"""Reads of RagConfig, the RAG agents and the index versions."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q, QuerySet

from datasets.models import Tenant
from datasets.selectors import tenant_key_variable
from retrieval.config import RagConfigError, RagSettings
from retrieval.models import IndexVersion, RagAgent, RagConfig, RagConfigChange


def rag_config_for(*, tenant_id: int, dataset_ids: Sequence[int]) -> tuple[RagSettings, int | None]:
    """The settings of one lookup and the version of the row they came from.

    A dataset override applies only when exactly one dataset is searched: a search over
    several datasets has one result list, so it cannot honour several configs. Otherwise the
    tenant default, else the built-in defaults (version None). A stored row that no longer
    validates raises RagConfigError rather than being used half-right.
    """
    distinct = set(dataset_ids)
    scope = Q(dataset__isnull=True)
    if len(distinct) == 1:
        scope |= Q(dataset_id=next(iter(distinct)))
    rows = list(RagConfig.objects.filter(scope, tenant_id=tenant_id).select_related("tenant"))
    # The override, when present, sorts before the default.
    rows.sort(key=lambda row: row.dataset_id is None)
    if not rows:
        return RagSettings(), None
    settings = rows[0].to_settings()
    errors = chat_key_env_error(rows[0].tenant, settings.chat_api_key_env)
    if errors:
        raise RagConfigError(errors)
    return settings, rows[0].version


def chat_key_env_error(tenant: Tenant, name: str) -> dict[str, str]:
    """A config may name only its tenant's own key variable: never one that would send
    another tenant's key to an endpoint this config chose."""
    if not name:
        return {}
    own = tenant_key_variable(tenant)
    if name == own:
        return {}
    return {"chat_api_key_env": f"must be {own}, this tenant's key variable" if own else
            "this tenant's slug names the same key variable as another tenant's: no key "
            "variable can be this tenant's alone"}


def default_config_version(*, tenant: Tenant, version: int) -> RagConfigChange | None:
    """Version `version` of the tenant's default config (its history), if it has one."""
    return RagConfigChange.objects.filter(config__tenant=tenant, config__dataset__isnull=True,
                                          version=version).first()


def index_versions() -> QuerySet[IndexVersion]:
    return IndexVersion.objects.order_by("-created_at")


def rag_agent_named(*, tenant_id: int, names: Sequence[str]) -> RagAgent | None:
    """The tenant's RagAgent named by the first of `names` that names one (any case)."""
    wanted = [name.strip() for name in names if name.strip()]
    if not wanted:
        return None
    match = Q()
    for name in wanted:
        match |= Q(name__iexact=name)
    agents = {agent.name.casefold(): agent
              for agent in RagAgent.objects.filter(match, tenant_id=tenant_id)}
    return next((agents[n.casefold()] for n in wanted if n.casefold() in agents), None)
