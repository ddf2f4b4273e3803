"""One graph run: what it runs on (its parts) and gives (its outcome), its deadline, the stage
clock, the audit's account of what ran, and the errors that end a stage."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from retrieval.index.embedders import EmbeddingError
from retrieval.index.milvus.connection import VectorStoreUnavailable
from retrieval.index.search import VectorSearchService
from retrieval.lookup.graph.neighbours import NeighbourExpander
from retrieval.lookup.graph.ports import (
    NeighbourPort,
    QualityJudgePort,
    QueryTransformPort,
    RerankPort,
    TranslatePort,
)
from retrieval.lookup.graph.quality import Quality
from retrieval.lookup.graph.query_transform import DeterministicQueryTransformer
from retrieval.lookup.graph.recency import RecencyPrior
from retrieval.lookup.graph.registry import (
    RetrieverEvent,
    RetrieverRegistry,
    RetrieverRun,
    RetrieverTimeout,
)
from retrieval.lookup.pack import KnowledgeContextPacker
from retrieval.lookup.post_process import KnowledgeEvidencePostProcessor
from retrieval.lookup.synonyms import NO_SYNONYMS, Synonyms
from retrieval.lookup.transform import L0Index
from retrieval.types import (
    ContextPack,
    PostProcessed,
    QueryHints,
    RetryDecision,
    ScoredChunk,
    SearchFilters,
    StageTrace,
)

# Failures no fallback can help: the fallback needs the same backend.
BACKEND_ERRORS = (VectorStoreUnavailable, EmbeddingError, DatabaseError)
# The fallback gets at least this much time, even when the deadline has passed.
FALLBACK_GRACE_MS = 2000


class GraphTimeout(TimeoutError):
    pass


class Deadline:
    def __init__(self, millis: float) -> None:
        self.millis = millis
        self.ends = time.monotonic() + millis / 1000

    def remaining_s(self) -> float:
        return max(self.ends - time.monotonic(), 0.0)

    def check(self, stage: str) -> None:
        if time.monotonic() >= self.ends:
            raise GraphTimeout(f"the deadline of {self.millis:.0f} ms passed before {stage}")


class Clock:
    """Stage timings and traces of one lookup."""

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
                                      candidates=candidates, note=note,
                                      dropped=result.dropped if result else ()))


@dataclass
class GraphRun:
    """What the graph did: the audit's account of it (JSON-ready)."""

    plan: dict[str, Any]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    fallback: str = ""
    translation: dict[str, Any] | None = None  # what the translation stage did (no text)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def listen(self, event: RetrieverEvent) -> None:  # a retriever listener
        with self.lock:
            self.events.append({"event": event.kind, "retriever": event.retriever,
                                "elapsed_ms": round(event.elapsed_ms, 2), "hits": event.hits,
                                **({"error": event.error} if event.error else {})})

    def as_dict(self) -> dict[str, Any]:
        return {"plan": self.plan, "attempts": self.attempts, "retrievers": self.events,
                "fallback": self.fallback or None, "translation": self.translation}


class StageUnavailable(RuntimeError):
    """An optional stage cannot run (e.g. rerank on, no reranker configured)."""


class StageFailed(RuntimeError):
    """A stage failed and the graph may not fall back: the lookup answers UNAVAILABLE."""


def await_runs(runs: Sequence[RetrieverRun], deadline: Deadline) -> None:
    """Wait until every run answered; the first to outlive its own timeout_s, or the deadline
    passing, fails the stage (the caller gives the unfinished runs up)."""
    while True:
        pending = [run for run in runs if not run.future.done()]
        if not pending:
            return
        now = time.monotonic()
        for run in pending:
            if run.overdue(now) and run.abandon(f"no answer within its timeout_s of "
                                                f"{run.timeout_s} s"):
                raise RetrieverTimeout(f"{run.name} did not answer within its timeout_s of "
                                       f"{run.timeout_s} s")
        if deadline.remaining_s() <= 0:
            raise GraphTimeout(f"{len(pending)} retriever call(s) did not answer before the "
                               f"deadline of {deadline.millis:.0f} ms")
        dues = [run.due - now for run in pending if run.due is not None]
        wait([run.future for run in pending], timeout=min([deadline.remaining_s(), *dues]))


LiveDocuments = Callable[[SearchFilters, Collection[int]], set[int]]


@dataclass(frozen=True)
class GraphOutcome:
    result: PostProcessed
    chunks: tuple[ScoredChunk, ...]  # result.chunks with their neighbours
    pack: ContextPack
    hints: QueryHints
    filters: SearchFilters
    retry: RetryDecision
    quality: Quality | None
    mode: str


@dataclass(frozen=True)
class GraphParts:
    """What the executor runs on; built once per lookup by the lookup service."""

    registry: RetrieverRegistry
    search: VectorSearchService
    post: KnowledgeEvidencePostProcessor
    packer: KnowledgeContextPacker
    l0_index: Callable[[], L0Index]
    live_documents: LiveDocuments
    weights: dict[str, float]
    rrf_k: int
    # A query transform strategy and the L0 index → the transformer (deterministic by default;
    # the LLM-backed strategies implement the same port).
    transformer: Callable[[str, L0Index], QueryTransformPort] = DeterministicQueryTransformer
    reranker: RerankPort | None = None
    # None: the rules grade the evidence (quality.py); else the chat model's judge.
    judge: QualityJudgePort | None = None
    # A neighbour expansion mode, its window and the search port → the expander.
    neighbours: Callable[..., NeighbourPort] = NeighbourExpander
    # The tenant's synonym groups: their terms widen the BM25 query (lookup/synonyms.py).
    synonyms: Synonyms = NO_SYNONYMS
    # The question in the other language (graph/translate.py), for documents written in
    # `languages` (the searched datasets'); None: no translation stage.
    translator: TranslatePort | None = None
    languages: frozenset[str] = frozenset()
    # The recency prior (graph/recency.py); None: off.
    recency: RecencyPrior | None = None
