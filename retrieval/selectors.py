"""Reads of RagConfig and the index versions."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q, QuerySet

from retrieval.config import RagSettings
from retrieval.models import IndexVersion, RagConfig


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
    rows = list(RagConfig.objects.filter(scope, tenant_id=tenant_id))
    # The override, when present, sorts before the default.
    rows.sort(key=lambda row: row.dataset_id is None)
    if not rows:
        return RagSettings(), None
    return rows[0].to_settings(), rows[0].version


def index_versions() -> QuerySet[IndexVersion]:
    return IndexVersion.objects.order_by("-created_at")
