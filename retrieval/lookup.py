"""LookupKnowledgeTool: transform → retrieve → guard → post-process → retry → pack → assemble."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from django.db import DatabaseError

from retrieval.config import RagConfigConverter, RagSettings
from retrieval.embedders import EmbeddingError
from retrieval.milvus.connection import VectorStoreUnavailable
from retrieval.pack import KnowledgeContextPacker
from retrieval.post_process import KnowledgeEvidencePostProcessor
from retrieval.search import QueryVector, VectorSearchService
from retrieval.transform import KnowledgeQueryTransformer, L0Index
from retrieval.types import (
    ContextPack,
    EvidenceStatus,
    LookupResult,
    PostProcessed,
    QueryHints,
    RelevanceLevel,
    RetryDecision,
    SearchFilters,
    SearchHit,
    SearchMode,
    StageTrace,
)

EMPTY_PACK = ContextPack(items=(), total_chars=0, truncated=False)
# Of the hits' document ids, those the database says may be served now.
LiveDocuments = Callable[[SearchFilters, Collection[int]], set[int]]


@dataclass(frozen=True)
class LookupRequest:
    query: str
    filters: SearchFilters  # tenant and datasets: from the caller's key, never the body
    tool_call_id: str = ""
    session_id: str = ""


class _Clock:
    def __init__(self) -> None:
        self.traces: list[StageTrace] = []
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = round((time.perf_counter() - start) * 1000, 2)
            self.timings[name] = round(self.timings.get(name, 0.0) + elapsed, 2)

    def record(self, stage: str, result: PostProcessed | None = None, note: str = "",
               hits: tuple[tuple[str, float], ...] = ()) -> None:
        candidates = hits or tuple((c.evidence_key, round(c.quality, 4))
                                   for c in (result.chunks if result else ()))
        self.traces.append(StageTrace(stage=stage, elapsed_ms=self.timings.get(stage, 0.0),
                                      candidates=candidates, note=note))


class LookupKnowledgeTool:
    """One lookup with one configuration. Backend failures become UNAVAILABLE, never EMPTY."""

    def __init__(self, *, search: VectorSearchService | None, l0_index: Callable[[], L0Index],
                 live_documents: LiveDocuments, settings: RagSettings,
                 config_version: int | None = None, mode: SearchMode | None = None) -> None:
        self.search = search  # None: nothing to search (the result is EMPTY or UNAVAILABLE)
        self.l0_index = l0_index
        self.live_documents = live_documents
        self.settings = settings
        self.config_version = config_version
        self.mode: SearchMode = mode or settings.search_mode  # type: ignore[assignment]
        calibrated = search.embedder.max_l2_distance if search else 2.0
        self.post = KnowledgeEvidencePostProcessor(
            settings.return_n, settings.max_chunks_per_document, settings.reference_threshold,
            settings.precise_threshold,
            max_l2_distance=settings.max_l2_distance or calibrated)
        self.packer = KnowledgeContextPacker(settings.max_context_chars,
                                             settings.max_excerpt_chars)

    def run(self, request: LookupRequest) -> LookupResult:
        clock = _Clock()
        hints = QueryHints()
        retry = RetryDecision(ran=False, reason="no category filter")
        filters = request.filters
        try:
            with clock.stage("transform"):
                hints = KnowledgeQueryTransformer(self.l0_index()).transform(request.query)
            clock.record("transform", note=f"domains={list(hints.domains)} "
                                           f"category={hints.category_filter}")
            with clock.stage("embed"):
                query = self._search().embed(request.query, self.mode)
            if hints.category_filter:
                filtered = replace(filters, category=hints.category_filter)
                result = self._retrieve(query, filtered, hints, clock, "retrieve_filtered")
                retry = self._retry_decision(result)
                if retry.ran:
                    result = self._retrieve(query, filters, hints, clock, "retrieve_unfiltered")
                else:
                    filters = filtered
            else:
                result = self._retrieve(query, filters, hints, clock, "retrieve")
            with clock.stage("pack"):
                pack = self.packer.pack(result.chunks)
            clock.record("pack", hits=tuple((i.chunk.evidence_key, len(i.excerpt))
                                            for i in pack.items))
        except (VectorStoreUnavailable, EmbeddingError, DatabaseError) as exc:
            return self._assemble(request, EvidenceStatus.UNAVAILABLE,
                                  RelevanceLevel.NONE, EMPTY_PACK, hints, filters, retry, clock,
                                  error=f"{type(exc).__name__}: {exc}")
        status = EvidenceStatus.READY if pack.items else EvidenceStatus.EMPTY
        level = result.relevance_level if pack.items else RelevanceLevel.NONE
        return self._assemble(request, status, level, pack, hints, filters, retry,
                              clock)

    def empty_result(self, request: LookupRequest) -> LookupResult:
        return self._assemble(request, EvidenceStatus.EMPTY, RelevanceLevel.NONE, EMPTY_PACK,
                              QueryHints(), request.filters,
                              RetryDecision(ran=False, reason="no readable dataset"), _Clock())

    def unavailable_result(self, request: LookupRequest, *, error: str) -> LookupResult:
        """UNAVAILABLE before any stage ran: what was needed to search is broken."""
        return self._assemble(request, EvidenceStatus.UNAVAILABLE, RelevanceLevel.NONE, EMPTY_PACK,
                              QueryHints(), request.filters,
                              RetryDecision(ran=False, reason="not searched"), _Clock(),
                              error=error)

    def _retrieve(self, query: QueryVector, filters: SearchFilters, hints: QueryHints,
                  clock: _Clock, stage: str) -> PostProcessed:
        with clock.stage(stage):
            hits = self._search().search(query, mode=self.mode, settings=self.settings,
                                         filters=filters)
        clock.record(stage, hits=tuple((h.chunk_id, round(h.score, 6)) for h in hits),
                     note=f"category={filters.category}")
        with clock.stage("guard"):
            served = self._guard(hits, filters)
        if len(served) < len(hits):
            dropped = sorted({h.chunk_id for h in hits} - {h.chunk_id for h in served})
            clock.record("guard", hits=tuple((key, 0.0) for key in dropped),
                         note=f"dropped {len(dropped)} hit(s) of deactivated or deleted "
                              "documents")
        hits = served
        with clock.stage("post_process"):
            result = self.post.process(hits, self.mode, hints)
        clock.record("post_process", result, note=f"top_quality={result.top_quality:.4f}")
        return result

    def _search(self) -> VectorSearchService:
        assert self.search is not None
        return self.search

    def _guard(self, hits: list[SearchHit], filters: SearchFilters) -> list[SearchHit]:
        """Defence in depth: only hits of documents the database says may be served now,
        whatever Milvus holds (its copy follows the database through the indexing queue)."""
        doc_ids = {_doc_id(hit) for hit in hits}
        live = self.live_documents(filters, {d for d in doc_ids if d is not None})
        return [hit for hit in hits if _doc_id(hit) in live]

    def _retry_decision(self, filtered: PostProcessed) -> RetryDecision:
        if not filtered.chunks:
            return RetryDecision(ran=True, reason="the category-filtered search had no evidence")
        if filtered.top_quality < self.settings.reference_threshold:
            return RetryDecision(ran=True, reason=f"top quality {filtered.top_quality:.3f} < "
                                                  f"reference {self.settings.reference_threshold}")
        return RetryDecision(ran=False, reason="the category-filtered search was good enough")

    def _assemble(self, request: LookupRequest, status: EvidenceStatus,
                  level: RelevanceLevel, pack: ContextPack, hints: QueryHints,
                  filters: SearchFilters, retry: RetryDecision, clock: _Clock,
                  error: str = "") -> LookupResult:
        return LookupResult(
            # The agent's id when it sent one, else ours: the canonical record's key.
            tool_call_id=request.tool_call_id or f"call_{uuid.uuid4().hex}",
            session_id=request.session_id, query=request.query,
            evidence_status=status, relevance_level=level, pack=pack, hints=hints,
            filters=filters, mode=self.mode, retry=retry, traces=tuple(clock.traces),
            config=RagConfigConverter.to_dict(self.settings), config_version=self.config_version,
            error=error, timings_ms=dict(clock.timings))


def _doc_id(hit: SearchHit) -> int | None:
    value = str(hit.metadata.get("docId", "")).strip()
    return int(value) if value.isdigit() and len(value) <= 19 else None


def as_unavailable(result: LookupResult, *, error: str) -> LookupResult:
    """The answer when what came after the search failed: no evidence is handed out that the
    platform could not stand behind (the guard must be able to confirm it later)."""
    return replace(result, evidence_status=EvidenceStatus.UNAVAILABLE,
                   relevance_level=RelevanceLevel.NONE, pack=EMPTY_PACK, error=error)
