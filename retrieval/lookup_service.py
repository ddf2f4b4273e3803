"""The lookup a caller may make: scope from the API key, config from the DB, then the tool."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from datasets.auth import Caller
from datasets.models import Dataset
from kbplatform.errors import ApiError
from retrieval.config import RagConfigConverter, RagConfigError, RagSettings
from retrieval.embedders import get_embedder
from retrieval.l0 import l0_index_for
from retrieval.lookup import LookupKnowledgeTool, LookupRequest
from retrieval.search import VectorSearchService
from retrieval.selectors import rag_config_for
from retrieval.store import get_store
from retrieval.types import LookupResult, SearchFilters, SearchMode

logger = logging.getLogger(__name__)


def lookup_scope(*, caller: Caller, requested: Sequence[int] | None) -> SearchFilters:
    """Tenant and datasets come from the key; `requested` may only narrow them."""
    tenant_id = caller.tenant.pk
    allowed = caller.readable_dataset_ids()
    if requested:
        wanted = sorted(set(requested))
        known = dict(Dataset.objects.filter(pk__in=wanted).values_list("pk", "tenant_id"))
        unknown = [d for d in wanted if d not in known]
        if unknown:
            raise ApiError(f"unknown dataset ids: {unknown}", code="unknown_dataset")
        denied = [d for d in wanted if d not in allowed]
        if denied:
            # Another tenant's dataset, one out of the key's scope, or a deactivated one.
            raise ApiError(f"this API key may not read datasets {denied}", code="forbidden",
                           status_code=403)
        allowed = wanted
    return SearchFilters(tenant_id=tenant_id, dataset_ids=tuple(allowed))


def lookup_knowledge(*, filters: SearchFilters, query: str, tool_call_id: str = "",
                     session_id: str = "", mode: SearchMode | None = None,
                     overrides: dict[str, Any] | None = None,
                     search: VectorSearchService | None = None) -> LookupResult:
    """Run one lookup. `overrides` and `search` (evaluation only) replace the config values
    and the serving index for this call."""
    broken = ""
    try:
        settings, version = rag_config_for(tenant_id=filters.tenant_id,
                                           dataset_ids=filters.dataset_ids)
    except RagConfigError as exc:
        # A stored config that no longer validates (a hand edit, a tightened rule) is a broken
        # backend like a down Milvus: UNAVAILABLE (503) with the reason for the audit; never
        # a 500, never EMPTY, never a search with half-right settings.
        logger.error("tenant %s: the stored RagConfig does not validate: %s",
                     filters.tenant_id, exc)
        settings, version, broken = RagSettings(), None, f"RagConfigError: {exc}"
    if overrides and not broken:
        settings = RagConfigConverter.to_settings(overrides, base=settings)
    tool = LookupKnowledgeTool(
        search=search or VectorSearchService(port=get_store(), embedder=get_embedder()),
        l0_index=lambda: l0_index_for(tenant_id=filters.tenant_id,
                                      dataset_ids=filters.dataset_ids),
        settings=settings, config_version=version, mode=mode)
    request = LookupRequest(query=query, filters=filters, tool_call_id=tool_call_id,
                            session_id=session_id)
    if broken:
        return replace(tool.unavailable_result(request, error=broken), config={})
    if not filters.dataset_ids:
        # A key that can read nothing gets EMPTY, without a search that would need a dataset.
        return tool.empty_result(request)
    return tool.run(request)
