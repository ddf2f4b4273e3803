"""The lookup a caller may make: scope from the API key, config from the DB, then the tool."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import DatabaseError

from audit.canonical import canonical_store, ready_evidence
from datasets.documents.evidence import EvidenceKey
from datasets.documents.selectors import (
    dataset_names,
    datasets_in_scope,
    db_id,
    document_of,
    live_doc_ids,
)
from datasets.models import Tenant
from datasets.tenancy.keys import Caller
from datasets.tenancy.permissions import ANONYMOUS, Access
from kbplatform.errors import ApiError, ErrorCode, ServiceUnavailable
from retrieval.chat import chat_model_for, translation_model_for
from retrieval.index import milvus
from retrieval.index.embedders import EmbeddingError
from retrieval.index.search import VectorSearchService
from retrieval.index.versions import IndexNotReady, serving_index_of
from retrieval.lookup.l0 import DocumentsView, documents_view
from retrieval.lookup.project import LookupViews
from retrieval.lookup.rerank import configured_reranker
from retrieval.lookup.revisions import lookup_revisions
from retrieval.lookup.synonyms import NO_SYNONYMS, Synonyms, tenant_synonyms
from retrieval.lookup.tool import LookupKnowledgeTool, LookupRequest, as_unavailable
from retrieval.lookup.transform import L0Index
from retrieval.ragconfig.config import (
    MODE_OVERRIDES,
    RagConfigConverter,
    RagConfigError,
    metadata_filter,
)
from retrieval.ragconfig.filters import undeclared_refusal
from retrieval.ragconfig.selectors import checked_settings, rag_config_for
from retrieval.ragconfig.settings import RagSettings
from retrieval.types import (
    CallFilters,
    EvidenceStatus,
    LookupResult,
    RelevanceLevel,
    SearchFilters,
    SearchMode,
    call_id,
)

logger = logging.getLogger(__name__)
MAX_COVERED_TOPICS = 8  # what an EMPTY answer names of what the searched datasets cover


def lookup_scope(*, caller: Caller, requested: Sequence[int] | None,
                 narrowed: CallFilters) -> SearchFilters:
    """Tenant and datasets come from the key; `requested` and the call's filters (`narrowed`,
    compared inside the Milvus query) may only narrow them.

    A filter on a field the tenant did not declare filterable is refused (400).
    A dataset the key may not read (another tenant's, out of its scope, deactivated) is
    refused in exactly the words of one that does not exist: the answer reveals nothing.
    """
    allowed = caller.readable_dataset_ids()
    if requested:
        wanted = sorted(set(requested))
        unknown = [d for d in wanted if d not in allowed]
        if unknown:
            raise ApiError(f"unknown dataset ids: {unknown}", code=ErrorCode.UNKNOWN_DATASET)
        allowed = wanted
    declared_fields_checked(caller, narrowed)
    return SearchFilters(tenant_id=caller.tenant.pk, dataset_ids=tuple(allowed), call=narrowed,
                         access=caller.access)


def declared_fields_checked(caller: Caller, narrowed: CallFilters) -> None:
    """A 400 when the call filters on a field its tenant did not declare filterable."""
    refusal = undeclared_refusal(narrowed, caller.tenant.filterable_fields)
    if refusal:
        raise ApiError(refusal, code=ErrorCode.INVALID,
                       extra={"fields": {"filters": {"fields": [refusal]}}})


@dataclass(frozen=True)
class _Setup:
    settings: RagSettings
    config_version: int | None
    filters: SearchFilters  # the key's scope, narrowed by the config's kb_scope and filters
    search: VectorSearchService | None  # None: nothing has been indexed yet
    view: DocumentsView | None  # None: no dataset to search
    experiment: tuple[int, str] | None  # (A/B test, arm) of this call, when one runs
    synonyms: Synonyms  # the tenant's synonym groups
    config_id: int | None  # the RagConfig row that serves; None: the built-in defaults
    index_version: int | None  # the serving index version searched; None: given, or none


class _Unavailable(Exception):
    """Something a lookup needs is broken: it answers UNAVAILABLE with this reason."""


def _setup(filters: SearchFilters, overrides: dict[str, Any] | None, mode: SearchMode | None,
           search: VectorSearchService | None, routing_key: str) -> _Setup:
    revisions = lookup_revisions(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids)
    try:
        serving = rag_config_for(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                                 routing_key=routing_key, revisions=revisions.configs)
    except RagConfigError as exc:
        # A stored config that no longer validates (a hand edit, a tightened rule) is a broken
        # backend like a down Milvus: UNAVAILABLE (503) with the reason for the audit; never
        # a 500, never EMPTY, never a search with half-right settings.
        logger.error("tenant %s: the stored RagConfig does not validate: %s",
                     filters.tenant_id, exc)
        raise _Unavailable(f"RagConfigError: {exc}") from exc
    settings = serving.settings
    if mode is not None:
        overrides = {**MODE_OVERRIDES[mode], **(overrides or {})}
    if overrides:
        settings = _overridden(settings, overrides, filters.tenant_id)
    index_version = None
    if search is None and revisions.index is not None:
        try:
            # The serving version's own embedder and collection: never a query vector of
            # one model against the vectors of another.
            index = serving_index_of(revisions.index)
            search = VectorSearchService(port=milvus.searcher(index.collection),
                                         embedder=index.embedder)
            index_version = revisions.index.pk
        except IndexNotReady:
            search = None
    filters = configured_filters(filters, settings)
    view = (documents_view(tenant_id=filters.tenant_id, dataset_ids=filters.dataset_ids,
                           revisions=revisions) if filters.dataset_ids else None)
    synonyms = (tenant_synonyms(tenant_id=filters.tenant_id, revisions=revisions)
                if view is not None else NO_SYNONYMS)
    return _Setup(settings, serving.version, filters, search, view, serving.experiment,
                  synonyms, serving.config_id, index_version)


def _overridden(settings: RagSettings, overrides: dict[str, Any], tenant_id: int
                ) -> RagSettings:
    """`overrides` (an earlier version's, a draft's, an evaluation's) over the settings, held
    to the rules of a stored config: values that would not save fail the lookup."""
    try:
        settings = RagConfigConverter.to_settings(overrides, base=settings)
        # Never another tenant's key to the endpoint a draft or an old version names (the
        # tenant is read only then: evaluations pass overrides on every lookup).
        tenant = (Tenant.objects.filter(pk=tenant_id).first()
                  if settings.chat_api_key_env else None)
        if tenant is not None:
            checked_settings(tenant=tenant, values={}, base=settings)
    except RagConfigError as exc:
        raise _Unavailable(f"RagConfigError: {exc}") from exc
    return settings


@dataclass(frozen=True)
class ServedWith:
    """What a lookup of some filters would serve with (lookup_settings)."""

    settings: RagSettings
    languages: frozenset[str]  # of the documents its caller may read


def lookup_settings(filters: SearchFilters, *, mode: SearchMode | None = None,
                    overrides: dict[str, Any] | None = None) -> ServedWith:
    """The settings a lookup of `filters` serves with (`mode` and `overrides` over the config,
    held to a stored config's rules) and the languages of the documents it may read, as the
    lookup itself works them out: evaluation asks the translation model as a lookup would
    (evaluation/hit_test.py). RagConfigError when the config or an override does not hold."""
    try:
        setup = _setup(filters, overrides, mode, None, "")
    except _Unavailable as exc:
        raise RagConfigError({"config": str(exc.__cause__ or exc)}) from exc
    return ServedWith(setup.settings, setup.view.languages(filters.access)
                      if setup.view is not None else frozenset())


def configured_filters(filters: SearchFilters, settings: RagSettings) -> SearchFilters:
    """The config's kb_scope (the datasets in it) and metadata_filters (compared inside the
    Milvus query) narrow the key's scope; nothing here can widen it."""
    dataset_ids = filters.dataset_ids
    if settings.kb_scope and dataset_ids:
        dataset_ids = datasets_in_scope(tenant_id=filters.tenant_id, dataset_ids=dataset_ids,
                                        kb_scope=settings.kb_scope)
    return replace(filters, dataset_ids=dataset_ids,
                   metadata=metadata_filter(settings.metadata_filters))


def lookup_knowledge(*, filters: SearchFilters, query: str, tool_call_id: str = "",
                     session_id: str = "", mode: SearchMode | None = None,
                     overrides: dict[str, Any] | None = None,
                     search: VectorSearchService | None = None) -> LookupResult:
    """Run one lookup. `overrides` and `search` (evaluation only) replace the config values
    and the serving index for this call. Its session (else its call id) routes it to an arm of
    the config's A/B test, when one runs."""
    request = LookupRequest(query=query, filters=filters, tool_call_id=call_id(tool_call_id),
                            session_id=session_id)
    try:
        # Routed by the ids the caller gave: a lookup without any serves the config itself.
        setup = _setup(filters, overrides, mode, search, session_id or tool_call_id)
    except (_Unavailable, EmbeddingError, DatabaseError) as exc:
        broken = str(exc) if isinstance(exc, _Unavailable) else f"{type(exc).__name__}: {exc}"
        tool = _tool(RagSettings(), None, None, None)
        return replace(tool.unavailable_result(request, error=broken), config={})
    request = replace(request, filters=setup.filters)
    if setup.view is not None:
        request = replace(request, filters=_narrowed(setup.filters, setup.view))
    tool = _tool(setup.settings, setup.config_version, setup.search, setup.view,
                 setup.synonyms, filters.access)
    if setup.view is None or setup.search is None:
        # Nothing to search: EMPTY, without a search that would need a dataset or an index.
        result = tool.empty_result(request, reason="no readable dataset")
    elif request.filters.call.documents == ():
        result = tool.empty_result(request, reason="the call's filters leave no document "
                                                   "that may be served here")
    else:
        result = tool.run(request)
    if result.evidence_status is EvidenceStatus.EMPTY and setup.view is not None:
        result = _guided(result, setup.view.l0_for(filters.access))
    if result.evidence_status is EvidenceStatus.READY and setup.view is not None:
        result = _described(result, setup.view)
    return replace(result, experiment=setup.experiment, config_id=setup.config_id,
                   index_version=setup.index_version)


def _guided(result: LookupResult, l0: L0Index) -> LookupResult:
    """An EMPTY answer that helps the agent: the datasets it searched and the topics they
    cover, nearest to the question first (its L0 hints, then the documents of the candidates
    its search found): all of them the key's own."""
    near = (EvidenceKey.parse(key) for trace in result.traces for key, _ in trace.candidates)
    doc_ids = dict.fromkeys(parsed.doc_id for parsed in near if parsed is not None)
    return replace(
        result, searched=tuple(dataset_names(tenant_id=result.filters.tenant_id,
                                             dataset_ids=result.filters.dataset_ids)),
        covered_topics=l0.nearest_domains(result.hints, doc_ids, MAX_COVERED_TOPICS))


def _described(result: LookupResult, view: DocumentsView) -> LookupResult:
    """Each served chunk with what it says of its document, from the view: its link
    (datasets/documents/links.py) and how current it is (datasets/documents/validity.py)."""
    items = []
    for item in result.pack.items:
        chunk = item.chunk
        doc_id = db_id(chunk.doc_id)
        link = view.links.get(doc_id) if doc_id is not None else None
        url = link.evidence_url(location=chunk.location, lines=chunk.lines) if link else ""
        validity = view.validity.get(doc_id) if doc_id is not None else None
        items.append(replace(item, chunk=replace(chunk, url=url, validity=validity)))
    return replace(result, pack=replace(result.pack, items=tuple(items)))


def _narrowed(filters: SearchFilters, view: DocumentsView) -> SearchFilters:
    """The documents no lookup may serve left out, those restricted to others too, and the
    call's `document_ids` cut to those this lookup may serve in these datasets (another
    tenant's id, or one restricted to others, is dropped like an unknown one), and to those
    its source / format / tags match."""
    call = filters.call
    readable = view.readable(filters.access)
    allowed = view.matching(call.match) & readable if call.match else readable
    if call.documents is not None:
        call = replace(call, documents=tuple(d for d in call.documents if d in allowed))
    elif call.match:
        call = replace(call, documents=tuple(sorted(allowed)))
    return replace(filters, excluded_doc_ids=view.excluded,
                   withheld=view.withheld(filters.access), call=call)


@dataclass(frozen=True)
class Trim:
    """What a caller keeps of a READY answer before it is stored and handed out (the drop-in
    backends' top_k and score threshold): at most `limit` items, each of at least
    `min_quality`; none left is EMPTY."""

    limit: int
    min_quality: float = 0.0

    def applied(self, result: LookupResult) -> LookupResult:
        if result.evidence_status is not EvidenceStatus.READY:
            return result
        items = tuple(item for item in result.pack.items
                      if item.chunk.quality >= self.min_quality)[:self.limit]
        if len(items) == len(result.pack.items):
            return result
        pack = replace(result.pack, items=items,
                       total_chars=sum(len(item.excerpt) for item in items))
        if items:
            return replace(result, pack=pack)
        return replace(result, pack=pack, evidence_status=EvidenceStatus.EMPTY,
                       relevance_level=RelevanceLevel.NONE)


def served_lookup(*, filters: SearchFilters, query: str, tool_call_id: str = "",
                  session_id: str = "", overrides: dict[str, Any] | None = None,
                  trim: Trim | None = None) -> LookupViews:
    """A lookup whose READY evidence the guard can confirm later: the call is stored as its
    canonical invocation first (what `trim` keeps of it), and evidence that could not be
    stored is not handed out. An agent's call without an id gets one here, so that an A/B
    test can route it too."""
    result = lookup_knowledge(filters=filters, query=query, tool_call_id=call_id(tool_call_id),
                              session_id=session_id, overrides=overrides)
    kept = trim.applied(result) if trim is not None else result
    served = LookupViews.of(kept)
    if trim is not None and kept is not result:
        # The caller asked for less than the answer held: like a call its own filters
        # narrowed, what it lacks is no knowledge gap of the datasets (audit/gaps.py).
        dropped = len(result.pack.items) - len(kept.pack.items)
        served = replace(served, record=replace(served.record, narrowed=True, details={
            **served.record.details, "trim": {"limit": trim.limit,
                                              "min_quality": trim.min_quality,
                                              "dropped": dropped}}))
    try:
        canonical_store(served.record)
    except ServiceUnavailable:
        served = LookupViews.of(as_unavailable(
            kept, error="the canonical invocation store is unavailable"))
    return served


def confirmed_evidence(*, tenant_id: int, readable: Sequence[int], access: Access,
                       document_ids: Sequence[str], tool_call_id: str = "",
                       session_id: str = "") -> list[str]:
    """The evidence guard: of `document_ids`, those that were READY evidence of the call (or
    session), from a dataset in `readable`, of a document that may still be served to
    `access`."""
    datasets = ready_evidence(tenant_id=tenant_id, document_ids=document_ids,
                              tool_call_id=tool_call_id, session_id=session_id)
    in_scope = [key for key, dataset in datasets.items() if dataset in readable]
    doc_ids = {document_of(key) for key in in_scope}
    live = live_doc_ids(tenant_id=tenant_id, dataset_ids=readable,
                        doc_ids={d for d in doc_ids if d is not None}, access=access)
    return [key for key in in_scope if document_of(key) in live]


def _tool(settings: RagSettings, version: int | None, search: VectorSearchService | None,
          view: DocumentsView | None, synonyms: Synonyms = NO_SYNONYMS,
          access: Access = ANONYMOUS) -> LookupKnowledgeTool:
    config = RagConfigConverter.to_dict(settings)
    return LookupKnowledgeTool(
        search=search, l0_index=lambda: view.l0_for(access) if view else L0Index(()),
        live_documents=lambda f, ids: set(ids) & view.readable(f.access) if view else set(),
        settings=settings, config_version=version, reranker=configured_reranker(),
        chat=chat_model_for(config), synonyms=synonyms,
        translation_model=translation_model_for(config),
        languages=view.languages(access) if view else frozenset(),
        validity=view.validity if view else None)
