"""Retrieval quality on BEIR-format suites, through the platform's own ingestion and lookup.

The corpus goes through the real pipeline (markdown → splitter → embedder → Milvus) into an
isolated tenant and a collection of its own per embedder; every query goes through the same
`lookup_knowledge` service the REST endpoint uses. Scoring is at document level: a chunk
counts for its document, once, at its best rank.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from datasets.documents.evidence import EvidenceKey
from datasets.documents.services import (
    configured_chunking,
    content_hash,
    document_indexed_hash_set,
    document_store,
    tenant_get_or_create,
)
from datasets.models import Dataset, Document
from datasets.tenancy.permissions import PLATFORM
from evaluation.benchmarks import Timing
from retrieval.index import milvus
from retrieval.index.embedders import Embedder, get_embedder
from retrieval.index.search import VectorSearchService
from retrieval.index.sync import prepare, write_prepared
from retrieval.index.versions import SPLITTER
from retrieval.index.writer_lock import milvus_writer
from retrieval.lookup.service import lookup_knowledge
from retrieval.types import LookupResult, SearchFilters, SearchMode

Progress = Callable[[str], None]


class SuiteError(ValueError):
    """The folder is not a BEIR suite (missing or malformed file)."""


@dataclass(frozen=True)
class Suite:
    name: str
    corpus: dict[str, tuple[str, str]]  # id → (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]  # query id → {doc id: grade}
    # Gold answers of the queries that carry them (metadata.answers, e.g. CMRC 2018).
    answers: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _jsonl(path: Path) -> Iterator[dict[str, object]]:
    if not path.is_file():
        raise SuiteError(f"{path} is missing")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SuiteError(f"{path}:{number} is not JSON: {exc.msg}") from exc


def load_suite(folder: Path) -> Suite:
    corpus = {str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or ""))
              for d in _jsonl(folder / "corpus.jsonl")}
    queries: dict[str, str] = {}
    answers: dict[str, tuple[str, ...]] = {}
    for q in _jsonl(folder / "queries.jsonl"):
        queries[str(q["_id"])] = str(q["text"])
        metadata = q.get("metadata")
        gold = metadata.get("answers") if isinstance(metadata, dict) else None
        if isinstance(gold, list) and gold:
            answers[str(q["_id"])] = tuple(str(a) for a in gold)
    qrels_path = folder / "qrels" / "test.tsv"
    if not qrels_path.is_file():
        raise SuiteError(f"{qrels_path} is missing")
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    qrels = {q: rel for q, rel in qrels.items() if q in queries}
    if not corpus or not qrels:
        raise SuiteError(f"{folder} has no documents or no judged queries")
    name = re.sub(r"[^a-z0-9]+", "_", folder.resolve().name.lower()).strip("_") or "suite"
    return Suite(name=name, corpus=corpus, queries=queries, qrels=qrels, answers=answers)


# --- metrics -------------------------------------------------------------------------------

def ndcg_at(ranking: list[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(grade / math.log2(i + 2) for i, grade in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranking: list[str], relevant: dict[str, int], k: int) -> float:
    return len(set(ranking[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def mrr_at(ranking: list[str], relevant: dict[str, int], k: int) -> float:
    return next((1.0 / (i + 1) for i, doc in enumerate(ranking[:k]) if doc in relevant), 0.0)


# --- loading the corpus --------------------------------------------------------------------

@dataclass
class EvalIndex:
    filters: SearchFilters
    collection: str
    source_of_doc: dict[str, str]  # Milvus docId → corpus id
    indexed_documents: int = 0
    seconds: float = 0.0


def _collection_name(suite: str, embedder: Embedder) -> str:
    """One collection per suite and index spec: a changed splitter or analyzer starts afresh."""
    slug = re.sub(r"[^a-z0-9]+", "_", embedder.name.lower()).strip("_")
    chunking = configured_chunking()
    spec = f"{SPLITTER}/{chunking.size}/{chunking.overlap}"
    if chunking.whole_document:  # so that collections built before keep their names
        spec += f"/{chunking.whole_document}"
    return f"eval_{suite}_{slug}_{hashlib.sha256(spec.encode()).hexdigest()[:8]}"[:200]


def eval_marker(document: Document, collection: str) -> str:
    """What an evaluation document's indexed_hash holds: its content in that collection (one
    collection per suite and embedder, so the content hash alone cannot tell)."""
    return hashlib.sha256(f"{document.content_hash}:{collection}".encode()).hexdigest()


def _markdown(title: str, text: str) -> bytes:
    return (f"# {title}\n\n{text}\n" if title.strip() else f"{text}\n").encode("utf-8")


def eval_index_load(*, suite: Suite, embedder: Embedder, progress: Progress,
                    batch_size: int = 64) -> EvalIndex:
    """Store and index the corpus; what is already indexed and unchanged is skipped."""
    collections = milvus.collections()
    started = time.perf_counter()
    collection = _collection_name(suite.name, embedder)
    # A collection that is new (or was lost) holds nothing, whatever the rows say.
    fresh = collection not in collections.names()
    with milvus_writer():
        collections.create(collection, embedder.dimension)
    tenant = tenant_get_or_create(slug=f"eval-{suite.name.replace('_', '-')}"[:63])
    dataset, _ = Dataset.objects.get_or_create(
        tenant=tenant, name=re.sub(r"[^a-z0-9_-]+", "-", collection.lower())[:100],
        defaults={"evaluation": True, "description": f"evaluation suite {suite.name}"})
    existing = {d.source_path: d for d in Document.objects.filter(dataset=dataset)}
    stale: list[Document] = []
    for number, (doc_id, (title, text)) in enumerate(suite.corpus.items(), 1):
        raw = _markdown(title, text)
        document = existing.get(doc_id)
        if document is None or document.content_hash != content_hash(raw):
            document = document_store(dataset=dataset, file_name="corpus.md", raw=raw,
                                      max_bytes=len(raw) + 1, source_path=doc_id,
                                      replace=True, queue=False).document
        if fresh or document.indexed_hash != eval_marker(document, collection) \
                or document.status != Document.Status.READY:
            stale.append(document)
        if number % 1000 == 0:
            progress(f"stored {number}/{len(suite.corpus)} documents")
    collections.load(collection)
    for start in range(0, len(stale), batch_size):
        prepared = prepare(stale[start:start + batch_size], chunking=configured_chunking(),
                           embedder=embedder)
        written = write_prepared(prepared, collection=collection)
        for document in written:
            document_indexed_hash_set(document_id=document.pk,
                                      indexed_hash=eval_marker(document, collection))
        progress(f"indexed {min(start + batch_size, len(stale))}/{len(stale)} changed documents")
    sources = dict(Document.objects.filter(dataset=dataset).values_list("doc_id", "source_path"))
    return EvalIndex(filters=SearchFilters(tenant_id=tenant.pk, dataset_ids=(dataset.pk,),
                                           access=PLATFORM),
                     collection=collection,
                     source_of_doc={str(k): v for k, v in sources.items()},
                     indexed_documents=len(stale), seconds=time.perf_counter() - started)


# --- running the queries -------------------------------------------------------------------

@dataclass
class EvalReport:
    suite: str
    mode: str
    embedder: str
    queries: int
    metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    index: dict[str, object] = field(default_factory=dict)
    # Queries whose lookup wanted the question's translation, by its outcome ("translated",
    # "failed", "no model", …: retrieval/lookup/graph/translate.py Outcome); the others
    # wanted none.
    translations: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"suite": self.suite, "mode": self.mode, "embedder": self.embedder,
                "queries": self.queries, **self.metrics,
                "latency_p50_ms": self.latency_ms.get("p50"),
                "latency_p95_ms": self.latency_ms.get("p95"), "config": self.config,
                "index": self.index, "translations": self.translations}


def translation_outcome(result: LookupResult) -> str | None:
    """How asking a model for the question's translation ended ("translated", "no model",
    …: retrieval/lookup/graph/translate.py Outcome); None when no model was asked."""
    translation = result.graph.get("translation")
    return str(translation["outcome"]) if translation else None


def translations_line(outcomes: Mapping[str, int]) -> str:
    """How many questions asked a model for their translation, by outcome ("2 translated,
    1 no model"): a figure measured without the model it assumed says so."""
    return ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items())) or (
        "no question asked a model")


def ranked_documents(result: LookupResult, source_of_doc: dict[str, str]) -> list[str]:
    """The final evidence list (before packing), as corpus ids at their best rank."""
    ranking: list[str] = []
    for key in result.ranked:
        parsed = EvidenceKey.parse(key)
        source = source_of_doc.get(parsed.doc_id) if parsed else None
        if source is not None and source not in ranking:
            ranking.append(source)
    return ranking


def evaluation_overrides(depth: int, given: dict[str, object] | None) -> dict[str, object]:
    """Deeper lists than the agent's, and no relevance gate: ranking is what is measured.
    What the caller sets (`evaluate --set`) wins, so that every field can be measured."""
    return {"max_results": depth, "retrieve_k": depth, "return_n": depth,
            "max_chunks_per_document": 1, "reference_threshold": 0.0,
            "precise_threshold": 0.0, "model_reference_threshold": 0.0,
            "model_precise_threshold": 0.0, **(given or {})}


def document_scores(ranking: list[str], relevant: dict[str, int]) -> dict[str, float]:
    """One query's figures from its document ranking and its judged documents."""
    return {"ndcg@10": ndcg_at(ranking, relevant, 10),
            "recall@10": recall_at(ranking, relevant, 10),
            "recall@100": recall_at(ranking, relevant, 100),
            "mrr@10": mrr_at(ranking, relevant, 10)}


@dataclass(frozen=True)
class QueryScore:
    query_id: str
    result: LookupResult
    ranking: list[str]  # corpus ids, best first
    scores: dict[str, float]
    latency_ms: float


def judged_queries(suite: Suite, max_queries: int | None) -> list[str]:
    return [q for q in suite.queries if q in suite.qrels][:max_queries]


def suite_scores(*, suite: Suite, index: EvalIndex, embedder: Embedder, queries: list[str],
                 overrides: dict[str, object], mode: SearchMode | None = None
                 ) -> Iterator[QueryScore]:
    """Each query's lookup in the suite's collection, scored; a failed lookup raises."""
    search = VectorSearchService(port=milvus.searcher(index.collection), embedder=embedder)
    for query_id in queries:
        started = time.perf_counter()
        result = lookup_knowledge(filters=index.filters, query=suite.queries[query_id],
                                  mode=mode, overrides=overrides, search=search)
        latency = (time.perf_counter() - started) * 1000
        if result.error:
            raise RuntimeError(f"query {query_id} failed: {result.error}")
        ranking = ranked_documents(result, index.source_of_doc)
        yield QueryScore(query_id, result, ranking,
                         document_scores(ranking, suite.qrels[query_id]), latency)


def evaluate(*, suite: Suite, index: EvalIndex, embedder: Embedder, mode: SearchMode,
             depth: int, max_queries: int | None, progress: Progress,
             overrides: dict[str, object] | None = None) -> EvalReport:
    overrides = evaluation_overrides(depth, overrides)
    judged = judged_queries(suite, max_queries)
    sums = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    latencies: list[float] = []
    translations: Counter[str] = Counter()
    scored = suite_scores(suite=suite, index=index, embedder=embedder, queries=judged,
                          overrides=overrides, mode=mode)
    for number, score in enumerate(scored, 1):
        latencies.append(score.latency_ms)
        outcome = translation_outcome(score.result)
        if outcome:
            translations[outcome] += 1
        for name in sums:
            sums[name] += score.scores[name]
        if number % 50 == 0 or number == len(judged):
            progress(f"queries {number}/{len(judged)}: nDCG@10 so far "
                     f"{sums['ndcg@10'] / number:.4f}")
    count = max(len(judged), 1)
    timing = Timing.of(latencies)
    return EvalReport(
        suite=suite.name, mode=mode, embedder=embedder.name, queries=len(judged),
        metrics={name: round(total / count, 4) for name, total in sums.items()},
        latency_ms={"p50": timing.p50, "p95": timing.p95},
        config={key: value for key, value in overrides.items()},
        index={"collection": index.collection, "documents": len(suite.corpus),
               "indexed_now": index.indexed_documents, "load_seconds": round(index.seconds, 1)},
        translations=dict(sorted(translations.items())))


def embedder_for(name: str | None) -> Embedder:
    return get_embedder(name or settings.KB_EMBEDDER)
