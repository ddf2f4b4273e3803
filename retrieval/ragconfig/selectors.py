"""Reads of RagConfig, the RAG agents and the index versions."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q

from datasets.documents.selectors import tenant_key_variable
from datasets.models import Tenant
from retrieval.ragconfig.config import RagConfigConverter, RagConfigError
from retrieval.ragconfig.models import ConfigExperiment, RagAgent, RagConfig, RagConfigChange
from retrieval.ragconfig.settings import RagSettings


@dataclass(frozen=True)
class ServingConfig:
    """What serves one lookup: its settings, the config version they are, and its arm of an
    A/B test (test id, "control" or "candidate") when one runs."""

    settings: RagSettings
    version: int | None
    experiment: tuple[int, str] | None = None
    config_id: int | None = None  # the row that serves; None: the built-in defaults


def ab_arm(experiment: ConfigExperiment, routing_key: str) -> str:
    """The arm of a call: `share` per cent of routing keys, stably (one session, one arm)."""
    digest = hashlib.sha256(f"{experiment.pk}:{routing_key}".encode()).digest()
    candidate = int.from_bytes(digest[:8], "big") % 100 < experiment.share
    return ConfigExperiment.Arm.CANDIDATE if candidate else ConfigExperiment.Arm.CONTROL


def override_dataset(dataset_ids: Sequence[int]) -> int | None:
    """The dataset whose override may serve a lookup over `dataset_ids`: only a search of
    exactly one dataset has one (a search over several has one result list, so it cannot
    honour several configs)."""
    distinct = set(dataset_ids)
    return next(iter(distinct)) if len(distinct) == 1 else None


@dataclass(frozen=True)
class ConfigRevision:
    """What says whether a RagConfig row changed: every save moves `updated_at`, an A/B test
    starts and ends by an update of `experiment_id` alone."""

    pk: int
    dataset_id: int | None
    version: int
    updated_at: datetime  # naive UTC, however the database or the ORM returned it
    experiment_id: int | None

    @classmethod
    def of(cls, pk: int, dataset_id: int | None, version: int, updated_at: datetime | str,
           experiment_id: int | None) -> ConfigRevision:
        at = updated_at if isinstance(updated_at, datetime) else \
            datetime.fromisoformat(updated_at)  # SQLite's text in a raw statement
        if at.tzinfo is not None:
            at = at.astimezone(UTC)
        return cls(pk, dataset_id, version, at.replace(tzinfo=None), experiment_id)


# RagConfig row → (the revision it was read at, when, the row, its settings), in this process.
# A row is read again after ROW_MAX_AGE_SECONDS even when its revision did not move: a change
# made in the database by hand, without `updated_at`, is seen within that time (a change made
# through the platform, by the next lookup).
ROW_MAX_AGE_SECONDS = 30
_rows: dict[int, tuple[ConfigRevision, float, RagConfig, RagSettings]] = {}
_rows_lock = threading.Lock()


def config_revisions(*, tenant_id: int, dataset_ids: Sequence[int]) -> tuple[ConfigRevision, ...]:
    """The revisions of the rows that may serve a lookup over `dataset_ids` (a lookup reads
    them with its other revisions: lookup/revisions.py)."""
    scope = Q(dataset__isnull=True)
    dataset = override_dataset(dataset_ids)
    if dataset is not None:
        scope |= Q(dataset_id=dataset)
    return tuple(ConfigRevision.of(*row) for row in RagConfig.objects.filter(
        scope, tenant_id=tenant_id).order_by().values_list(
        "pk", "dataset_id", "version", "updated_at", "experiment_id"))


def rag_config_for(*, tenant_id: int, dataset_ids: Sequence[int], routing_key: str = "",
                   revisions: Sequence[ConfigRevision] | None = None) -> ServingConfig:
    """The settings of one lookup and the version of the row they came from.

    A dataset override applies only when exactly one dataset is searched (override_dataset).
    Otherwise the tenant default, else the built-in defaults (version None). A stored row
    that no longer validates raises RagConfigError rather than being used half-right. While
    the row runs an A/B test, a call with a `routing_key` (its session, else its call id) is
    routed to an arm; one without (a hit test, an evaluation) gets the config as it serves.
    `revisions`, when the caller read them (config_revisions), spare this the read; the row
    and its settings are read again when its revision changed (ROW_MAX_AGE_SECONDS at most).
    """
    given = revisions is not None
    if revisions is None:
        revisions = config_revisions(tenant_id=tenant_id, dataset_ids=dataset_ids)
    if not revisions:
        return ServingConfig(RagSettings(), None)
    # The override, when present, sorts before the default.
    kept = _row(min(revisions, key=lambda r: r.dataset_id is None))
    if kept is None:  # deleted since its revision was read: read them again
        return (rag_config_for(tenant_id=tenant_id, dataset_ids=dataset_ids,
                               routing_key=routing_key) if given
                else ServingConfig(RagSettings(), None))
    row, settings = kept
    serving = ServingConfig(settings, row.version, config_id=row.pk)
    # The A/B test is read only when it matters, which is rare.
    experiment = (ConfigExperiment.objects.select_related("candidate")
                  .filter(pk=row.experiment_id).first()
                  if row.experiment_id is not None and routing_key else None)
    if experiment is not None:
        arm = ab_arm(experiment, routing_key)
        serving = replace(serving, experiment=(experiment.pk, arm))
        if arm == ConfigExperiment.Arm.CANDIDATE:
            serving = replace(serving, settings=RagConfigConverter.to_settings(
                experiment.candidate.settings()), version=experiment.candidate.version)
    if serving.settings.chat_api_key_env:
        # The tenant as it is now (its slug names its key variable), not the kept row's.
        tenant = Tenant.objects.filter(pk=tenant_id).first()
        errors = (chat_key_env_error(tenant, serving.settings.chat_api_key_env) if tenant
                  else {"tenant": "the tenant no longer exists"})
        if errors:
            raise RagConfigError(errors)
    return serving


def _row(revision: ConfigRevision) -> tuple[RagConfig, RagSettings] | None:
    """The row and its settings as of `revision`; None when the row is gone."""
    now = time.monotonic()
    with _rows_lock:
        kept = _rows.get(revision.pk)
    if kept is not None and kept[0] == revision and now - kept[1] < ROW_MAX_AGE_SECONDS:
        return kept[2], kept[3]
    row = RagConfig.objects.filter(pk=revision.pk).first()
    if row is None:
        return None
    settings = row.to_settings()  # raises RagConfigError: nothing is kept
    with _rows_lock:
        _rows[revision.pk] = (revision, now, row, settings)
    return row, settings


def draft_settings(*, tenant: Tenant, dataset_ids: Sequence[int],
                   version: RagConfigChange | None, draft: str) -> dict[str, Any]:
    """Every setting of a draft: its JSON values over `version` (else the config serving those
    datasets), held to the rules of a save. Raises RagConfigError with the reason."""
    try:
        values = json.loads(draft)
    except (ValueError, RecursionError) as exc:
        raise RagConfigError({"draft": f"not JSON ({str(exc)[:200]})"}) from exc
    if not isinstance(values, dict):
        raise RagConfigError({"draft": 'a JSON object of settings, e.g. {"return_n": 3}'})
    base = (RagConfigConverter.to_settings(version.settings()) if version is not None
            else rag_config_for(tenant_id=tenant.pk, dataset_ids=dataset_ids).settings)
    return RagConfigConverter.to_dict(checked_settings(tenant=tenant, values=values, base=base))


def checked_settings(*, tenant: Tenant, values: Mapping[str, object],
                     base: RagSettings | None = None) -> RagSettings:
    """`values` over `base` (the built-in defaults) as a save of the tenant's config would take
    them: through the converter, and naming no key variable but the tenant's own. Raises
    RagConfigError (field → message)."""
    settings = RagConfigConverter.to_settings(values, base=base or RagSettings())
    errors = chat_key_env_error(tenant, settings.chat_api_key_env)
    if errors:
        raise RagConfigError(errors)
    return settings


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


def configs_naming_a_key_variable(tenant: Tenant) -> list[str]:
    """The tenant's configs that name a chat-key variable, as reasons not to rename it: the
    variable they may name follows the slug (datasets/tenancy/slug_secrets.py)."""
    named = RagConfig.objects.filter(tenant=tenant).exclude(chat_api_key_env="")
    return [f"RAG config {config.scope_label} names {config.chat_api_key_env}, which follows "
            f"the slug: clear its chat_api_key_env first (and name the new variable after "
            f"the rename)." for config in named.select_related("tenant", "dataset")]


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
