"""The graph's ports to the stages behind them: translation, query transform, rerank, quality
judge, neighbours."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from retrieval.lookup.graph.quality import Quality
from retrieval.lookup.graph.translate import Direction, Translation
from retrieval.types import QueryHints, ScoredChunk, SearchFilters


class Transformed(Protocol):
    @property
    def queries(self) -> tuple[str, ...]: ...

    @property
    def note(self) -> str: ...


class TranslatePort(Protocol):
    """retrieval.lookup.graph.translate.QueryTranslator: the question in the other language;
    never raises (a failure is a Translation that says why); `timeout_s` bounds a model."""

    def translate(self, question: str, direction: Direction, *,
                  timeout_s: float) -> Translation: ...


class QueryTransformPort(Protocol):
    """The queries to search; `timeout_s`, what is left of the deadline, bounds a model."""

    def transform(self, query: str, hints: QueryHints, *,
                  timeout_s: float | None = None) -> Transformed: ...


class RerankPort(Protocol):
    """retrieval.lookup.rerank.Reranker: best first, at most top_n; raises on any failure."""

    name: str

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int,
               timeout_s: float) -> Sequence[Ranked]: ...


class Ranked(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def score(self) -> float: ...


class NeighbourPort(Protocol):
    def expand(self, chunks: Sequence[ScoredChunk], filters: SearchFilters, *,
               budget: int, excerpt_chars: int) -> tuple[ScoredChunk, ...]: ...


class QualityJudgePort(Protocol):
    """retrieval.lookup.graph.model_judge.ModelQualityJudge: a grade of the evidence; raises on any
    failure."""

    def assess(self, query: str, chunks: Sequence[ScoredChunk], *,
               timeout_s: float) -> Quality: ...
