"""LookupKnowledgeTool: one lookup = the retrieval-only graph of its config, then assembly."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from django.utils import timezone

from datasets.documents.validity import Validity
from datasets.ingestion.language import Language
from retrieval.analysis import normalize_text
from retrieval.chat import ChatModel
from retrieval.index.search import VectorSearchService
from retrieval.lookup.graph.executor import GraphExecutor
from retrieval.lookup.graph.model_judge import ModelQualityJudge
from retrieval.lookup.graph.model_transform import ModelQueryTransformer
from retrieval.lookup.graph.plan import build_graph
from retrieval.lookup.graph.ports import QueryTransformPort, RerankPort
from retrieval.lookup.graph.query_transform import DeterministicQueryTransformer
from retrieval.lookup.graph.recency import RecencyPrior
from retrieval.lookup.graph.retrievers import REGISTRY
from retrieval.lookup.graph.run import (
    BACKEND_ERRORS,
    Clock,
    GraphParts,
    GraphRun,
    LiveDocuments,
    StageFailed,
)
from retrieval.lookup.graph.translate import QueryTranslator
from retrieval.lookup.pack import KnowledgeContextPacker
from retrieval.lookup.post_process import KnowledgeEvidencePostProcessor
from retrieval.lookup.relevance import THRESHOLDS, gate_in_force, model_for
from retrieval.lookup.synonyms import NO_SYNONYMS, Synonyms
from retrieval.lookup.transform import L0Index
from retrieval.ragconfig.config import RagConfigConverter
from retrieval.ragconfig.settings import RagSettings
from retrieval.types import (
    ContextPack,
    EvidenceStatus,
    LookupResult,
    QueryHints,
    RelevanceLevel,
    RetryDecision,
    SearchFilters,
)

EMPTY_PACK = ContextPack(items=(), total_chars=0, truncated=False)
# Where the searched documents hold both, a lookup may choose between a question's answer and
# its translation's (judge_translation): only then are answers rated.
BOTH_LANGUAGES = frozenset(language.value for language in Language)
# A lookup's topic for the knowledge gaps page (audit/gaps.py): a few short terms per call.
TOPIC_TERMS = 5
TOPIC_TERM_CHARS = 64


@dataclass(frozen=True)
class LookupRequest:
    query: str
    filters: SearchFilters  # tenant and datasets: from the caller's key, never the body
    tool_call_id: str = ""  # the canonical record's key (types.call_id)
    session_id: str = ""


class LookupKnowledgeTool:
    """One lookup with one configuration. Backend failures become UNAVAILABLE, never EMPTY."""

    def __init__(self, *, search: VectorSearchService | None, l0_index: Callable[[], L0Index],
                 live_documents: LiveDocuments, settings: RagSettings,
                 config_version: int | None = None,
                 reranker: RerankPort | None = None, chat: ChatModel | None = None,
                 synonyms: Synonyms = NO_SYNONYMS, translation_model: ChatModel | None = None,
                 languages: frozenset[str] = frozenset(),
                 validity: Mapping[int, Validity] | None = None) -> None:
        self.search = search  # None: nothing to search (the result is EMPTY or UNAVAILABLE)
        self.l0_index = l0_index
        self.live_documents = live_documents
        self.settings = settings
        self.config_version = config_version
        self.reranker = reranker  # None: this process has no reranker (KB_RERANK_BASE_URL)
        # None: no chat model (KB_CHAT_BASE_URL); the rules transform queries and grade evidence
        self.chat = chat
        self.synonyms = synonyms  # the tenant's groups, for the BM25 query
        # The model that translates the question (chat.py translation_model_for; None: none)
        # and the languages of the searched documents, which say whether it is asked.
        self.translation_model = translation_model
        self.languages = languages
        # How current each servable document is: what the recency prior reads.
        self.validity = validity or {}
        self.graph = build_graph(settings, REGISTRY)

    def run(self, request: LookupRequest) -> LookupResult:
        assert self.search is not None
        s = self.settings
        embedder = self.search.embedder
        gate, model = gate_in_force(s.relevance_gate, embedder.name)
        reference, precise = (float(getattr(s, name)) for name in THRESHOLDS[gate])
        parts = GraphParts(
            registry=REGISTRY, search=self.search,
            post=KnowledgeEvidencePostProcessor(
                s.return_n, s.max_chunks_per_document, reference, precise,
                max_l2_distance=s.max_l2_distance or embedder.max_l2_distance, model=model,
                rater=model_for(embedder.name) if self.graph.judge_translation
                and BOTH_LANGUAGES <= self.languages else None,
                orderer=model_for(embedder.name) if s.relevance_order else None),
            packer=KnowledgeContextPacker(s.max_context_chars, s.max_excerpt_chars),
            l0_index=self.l0_index, live_documents=self.live_documents,
            weights={"VECTOR": s.dense_weight, "BM25": s.bm25_weight}, rrf_k=s.rrf_k,
            reranker=self.reranker, transformer=self._transformer(),
            judge=ModelQualityJudge(self.chat) if self.chat else None, synonyms=self.synonyms,
            translator=QueryTranslator(model=self.translation_model,
                                       tenant_id=request.filters.tenant_id),
            languages=self.languages,
            recency=RecencyPrior(s.recency_half_life_days, self.validity, timezone.localdate())
            if s.recency_half_life_days else None)
        clock = Clock()
        log = GraphRun(plan=self.graph.describe())
        try:
            outcome = GraphExecutor(self.graph, parts, log).run(request.query, request.filters,
                                                                clock)
        except (*BACKEND_ERRORS, StageFailed) as exc:
            error = str(exc) if isinstance(exc, StageFailed) else f"{type(exc).__name__}: {exc}"
            return self._assemble(request, EvidenceStatus.UNAVAILABLE, RelevanceLevel.NONE,
                                  EMPTY_PACK, QueryHints(), request.filters,
                                  RetryDecision(ran=False, reason="the lookup failed"), clock,
                                  log, error=error)
        pack = outcome.pack
        status = EvidenceStatus.READY if pack.items else EvidenceStatus.EMPTY
        level = outcome.result.relevance_level if pack.items else RelevanceLevel.NONE
        return replace(self._assemble(request, status, level, pack, outcome.hints,
                                      outcome.filters, outcome.retry, clock, log),
                       mode=outcome.mode,
                       ranked=tuple(c.evidence_key for c in outcome.chunks),
                       topic_terms=topic_terms(outcome.hints, outcome.result.vocabulary))

    def _transformer(self) -> Callable[[str, L0Index], QueryTransformPort]:
        if self.chat is None:
            return DeterministicQueryTransformer
        return partial(ModelQueryTransformer, model=self.chat)

    def empty_result(self, request: LookupRequest, *, reason: str) -> LookupResult:
        """EMPTY without a search: `reason` says why there was nothing to search."""
        return self._assemble(request, EvidenceStatus.EMPTY, RelevanceLevel.NONE, EMPTY_PACK,
                              QueryHints(), request.filters,
                              RetryDecision(ran=False, reason=reason), Clock(), None)

    def unavailable_result(self, request: LookupRequest, *, error: str) -> LookupResult:
        """UNAVAILABLE before any stage ran: what was needed to search is broken."""
        return self._assemble(request, EvidenceStatus.UNAVAILABLE, RelevanceLevel.NONE, EMPTY_PACK,
                              QueryHints(), request.filters,
                              RetryDecision(ran=False, reason="not searched"), Clock(), None,
                              error=error)

    def _assemble(self, request: LookupRequest, status: EvidenceStatus,
                  level: RelevanceLevel, pack: ContextPack, hints: QueryHints,
                  filters: SearchFilters, retry: RetryDecision, clock: Clock,
                  log: GraphRun | None, error: str = "") -> LookupResult:
        return LookupResult(
            tool_call_id=request.tool_call_id,
            session_id=request.session_id, query=request.query,
            evidence_status=status, relevance_level=level, pack=pack, hints=hints,
            filters=filters, mode=self.graph.label(), retry=retry,
            traces=tuple(clock.traces), config=RagConfigConverter.to_dict(self.settings),
            config_version=self.config_version, error=error,
            timings_ms=dict(clock.timings), graph=log.as_dict() if log else {})


def topic_terms(hints: QueryHints, vocabulary: Sequence[str]) -> tuple[str, ...]:
    """What a lookup was about, in words of the tenant's own documents: the L0 domains and
    keywords (frontmatter), then the query's words its candidates contain; each once, folded,
    at most TOPIC_TERMS of at most TOPIC_TERM_CHARS."""
    terms = dict.fromkeys(normalize_text(t).strip()
                          for t in (*hints.domains, *hints.keywords, *vocabulary))
    return tuple(t for t in terms if 0 < len(t) <= TOPIC_TERM_CHARS)[:TOPIC_TERMS]


def as_unavailable(result: LookupResult, *, error: str) -> LookupResult:
    """The answer when what came after the search failed: no evidence is handed out that the
    platform could not stand behind (the guard must be able to confirm it later)."""
    return replace(result, evidence_status=EvidenceStatus.UNAVAILABLE,
                   relevance_level=RelevanceLevel.NONE, pack=EMPTY_PACK, error=error)
