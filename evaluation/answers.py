"""`evaluate --answers`: the RAG answer measured on a suite whose queries carry gold answers.

Each judged query with gold answers is looked up with the agent's own settings (the relevance
gate on, the agent's evidence count) and answered from that evidence as `POST /api/rag/answer`
does. Measured: answer accuracy (a gold answer is contained in the answer), citation precision
(cited evidence that contains a gold answer) and the share of each answer status.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from evaluation.benchmarks import Timing
from evaluation.suites import EvalIndex, Progress, Suite
from retrieval.answers.answer import AnswerStatus
from retrieval.answers.service import answer_from
from retrieval.chat import ChatModel
from retrieval.index import milvus
from retrieval.index.embedders import Embedder
from retrieval.index.search import VectorSearchService
from retrieval.lookup.project import LookupViews
from retrieval.lookup.service import lookup_knowledge

_SPACE = re.compile(r"\s+")


@dataclass
class AnswerReport:
    suite: str
    embedder: str
    generator: str
    queries: int
    metrics: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"suite": self.suite, "mode": "answers", "embedder": self.embedder,
                "generator": self.generator, "queries": self.queries, **self.metrics,
                "latency_p50_ms": self.latency_ms.get("p50"),
                "latency_p95_ms": self.latency_ms.get("p95")}


def _folded(text: str) -> str:
    return _SPACE.sub("", text).lower()


def contains_gold(text: str, gold: tuple[str, ...]) -> bool:
    folded = _folded(text)
    return any(_folded(answer) and _folded(answer) in folded for answer in gold)


def evaluate_answers(*, suite: Suite, index: EvalIndex, embedder: Embedder,
                     model: ChatModel | None, max_queries: int | None,
                     progress: Progress) -> AnswerReport:
    search = VectorSearchService(port=milvus.searcher(index.collection), embedder=embedder)
    judged = [q for q in suite.queries if q in suite.qrels and q in suite.answers][:max_queries]
    statuses = dict.fromkeys(AnswerStatus, 0)
    correct = cited = cited_with_gold = 0
    latencies: list[float] = []
    generator = model.name if model is not None else "extractive"
    for number, query_id in enumerate(judged, 1):
        gold = suite.answers[query_id]
        started = time.perf_counter()
        result = lookup_knowledge(filters=index.filters, query=suite.queries[query_id],
                                  search=search)
        answered = answer_from(LookupViews.of(result), model=model, started=started)
        latencies.append((time.perf_counter() - started) * 1000)
        if result.error:
            raise RuntimeError(f"query {query_id} failed: {result.error}")
        statuses[answered.status] += 1
        if answered.status is AnswerStatus.ANSWERED and answered.draft is not None:
            correct += contains_gold(answered.draft.answer, gold)
            excerpts = {e.document_id: e.excerpt for e in answered.lookup.view.evidence}
            cited += len(answered.citations)
            cited_with_gold += sum(contains_gold(excerpts.get(c, ""), gold)
                                   for c in answered.citations)
        if number % 50 == 0 or number == len(judged):
            progress(f"queries {number}/{len(judged)}: answer accuracy so far "
                     f"{correct / number:.4f}")
    count = max(len(judged), 1)
    timing = Timing.of(latencies)
    metrics = {"answer_accuracy": round(correct / count, 4),
               "citation_precision": round(cited_with_gold / cited, 4) if cited else 0.0,
               **{f"share_{status.value.lower()}": round(n / count, 4)
                  for status, n in statuses.items()}}
    return AnswerReport(suite=suite.name, embedder=embedder.name, generator=generator,
                        queries=len(judged), metrics=metrics,
                        latency_ms={"p50": timing.p50, "p95": timing.p95})
