"""The builder: a validated RagSettings → the retrieval graph to run (seed 003 §3).

A graph is plain data: which stages run, with what. The executor runs it; the audit records
`describe()`. Invalid combinations never get here: the converter's cross-field rules refuse
them when a config is saved.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from retrieval.lookup.graph.registry import NestedGraphError, RetrieverRegistry
from retrieval.ragconfig.settings import RagSettings

# The correction stage never widens past this (it is also the converter's top for retrieve_k).
MAX_DEPTH = 200


@dataclass(frozen=True)
class RetrieverStep:
    name: str
    arguments: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class RetrievalGraph:
    """What one attempt runs, plus what the whole lookup runs around it."""

    transform: str | None  # a query transform strategy, or None
    bilingual: bool  # BM25 also searches the question's words in the other language
    # translate_query: the most a translation of the question may take; None: off
    translation_budget_ms: int | None
    # judge_translation: the translation is also searched alone, and the relevance model
    # chooses between its answer and the question's (executor.py `_attempt`)
    judge_translation: bool
    execution: str  # SIMPLE | PARALLEL | SEQUENTIAL | HYBRID
    retrievers: tuple[RetrieverStep, ...]
    per_retriever: int  # max_results: what each retriever fetches
    min_score: float  # the similarity a retriever's candidate needs (seed 003 §2)
    aggregation: str  # MERGE | RANK | DEDUPLICATE (when there is more than one list)
    pool: int  # retrieve_k: candidates kept after aggregation
    rerank_top_n: int | None
    assess: bool  # grade the evidence set (enable_quality_assessment)
    quality_threshold: float  # for the grade, SEQUENTIAL and correction
    max_attempts: int  # 1 + max_retry_count when correction is on
    category_filter: bool  # the L0 category hint may narrow the first search
    neighbours: tuple[str, int] | None  # (ADJACENT | SECTION, window)
    fallback: bool
    timeout_ms: int
    plain_hybrid: RetrieverStep  # the tenant's hybrid search: fallback and correction use it

    def describe(self) -> dict[str, object]:
        return {
            "transform": self.transform, "bilingual": self.bilingual,
            "translation_budget_ms": self.translation_budget_ms,
            "judge_translation": self.judge_translation,
            "execution": self.execution,
            "retrievers": [{"name": r.name, **dict(r.arguments)} for r in self.retrievers],
            "per_retriever": self.per_retriever, "min_score": self.min_score,
            "aggregation": self.aggregation, "pool": self.pool,
            "rerank_top_n": self.rerank_top_n, "assess": self.assess,
            "quality_threshold": self.quality_threshold,
            "max_attempts": self.max_attempts, "category_filter": self.category_filter,
            "neighbours": list(self.neighbours) if self.neighbours else None,
            "fallback": self.fallback, "timeout_ms": self.timeout_ms,
        }

    def label(self) -> str:
        """The search it runs, in the words of evaluate's --mode: "hybrid", "dense", …"""
        names = [r.name for r in self.retrievers]
        if self.execution == "HYBRID" or dict(self.retrievers[0].arguments).get(
                "fusion") == "milvus":
            return "milvus_hybrid"
        if self.execution == "SIMPLE" and len(names) == 1:
            return {"VECTOR": "dense", "BM25": "bm25", "HYBRID": "hybrid"}.get(names[0],
                                                                                names[0])
        return f"{self.execution.lower()}:{'+'.join(names)}"

    def corrected(self, attempt: int) -> tuple[RetrievalGraph, str]:
        """The plan of correction attempt `attempt` (1, 2, …) and what changed.

        Odd attempts widen (deeper lists, no category hint); even ones also change the
        retrievers: a single retriever is swapped for the hybrid search, the hybrid search
        for its two arms side by side. The caller's metadata filters and scope never change.
        """
        wider = replace(self, per_retriever=min(self.per_retriever * 2, MAX_DEPTH),
                        pool=min(self.pool * 2, MAX_DEPTH), category_filter=False)
        if attempt % 2 == 1:
            return wider, (f"wider: per retriever {wider.per_retriever}, pool {wider.pool}, "
                           "no category hint")
        names = [r.name for r in self.retrievers]
        if names == ["HYBRID"] or self.execution == "HYBRID":
            steps: tuple[RetrieverStep, ...] = (RetrieverStep("VECTOR"), RetrieverStep("BM25"))
            switched = replace(wider, execution="PARALLEL", retrievers=steps,
                               aggregation="RANK", transform=self.transform or "EXPAND")
        else:
            switched = replace(wider, execution="SIMPLE", retrievers=(self.plain_hybrid,),
                               transform=self.transform or "EXPAND")
        described = ", ".join(r.name for r in switched.retrievers)
        return switched, (f"other retrievers: {switched.execution} {described}, "
                          f"query transform {switched.transform}, wider")


def _hybrid_arguments(s: RagSettings, *, fusion: str = "app"
                      ) -> tuple[tuple[str, object], ...]:
    return (("rrf_k", s.rrf_k), ("dense_weight", s.dense_weight),
            ("bm25_weight", s.bm25_weight), ("fusion", fusion), ("method", s.fusion_method))


def build_graph(settings: RagSettings, registry: RetrieverRegistry) -> RetrievalGraph:
    if settings.retrieval_execution_mode == "HYBRID":
        # Milvus fuses the two arms in one request: the HYBRID retriever with Milvus's fusion.
        steps: tuple[RetrieverStep, ...] = (
            RetrieverStep("HYBRID", _hybrid_arguments(settings, fusion="milvus")),)
    else:
        steps = tuple(RetrieverStep(name, _hybrid_arguments(settings) if name == "HYBRID"
                                    else ()) for name in settings.enabled_retrievers)
    for step in steps:
        spec = registry.spec(step.name)
        if spec.advanced:
            raise NestedGraphError(f"{step.name} runs the whole graph: not inside it")
        spec.arguments(dict(step.arguments))  # fail here, not mid-lookup
    correcting = settings.enable_quality_assessment and settings.enable_correction
    return RetrievalGraph(
        transform=settings.query_transform_strategy if settings.enable_query_transform
        else None,
        bilingual=settings.bilingual_bm25,
        translation_budget_ms=settings.translation_budget_ms if settings.translate_query
        else None,
        judge_translation=settings.translate_query and settings.judge_translation,
        execution=settings.retrieval_execution_mode,
        retrievers=steps,
        per_retriever=settings.max_results,
        min_score=settings.min_score,
        aggregation=settings.aggregation_strategy,
        pool=settings.retrieve_k,
        rerank_top_n=settings.rerank_top_n if settings.enable_rerank else None,
        assess=settings.enable_quality_assessment,
        quality_threshold=settings.quality_threshold,
        max_attempts=1 + (settings.max_retry_count if correcting else 0),
        category_filter=True,
        neighbours=(None if settings.neighbour_expansion == "NONE"
                    else (settings.neighbour_expansion, settings.neighbour_window)),
        fallback=settings.enable_fallback,
        timeout_ms=settings.timeout_millis,
        plain_hybrid=RetrieverStep("HYBRID", _hybrid_arguments(settings)),
    )


def fallback_graph(graph: RetrievalGraph) -> RetrievalGraph:
    """The plain hybrid search the graph falls back to: one retriever, nothing optional."""
    return replace(graph, transform=None, execution="SIMPLE",
                   retrievers=(graph.plain_hybrid,), rerank_top_n=None, assess=False,
                   max_attempts=1, neighbours=None, judge_translation=False,
                   fallback=False)
