"""VectorSearchService: embeds the query and routes dense | hybrid | bm25 to the search port."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.config import RagSettings
from retrieval.embedders import Embedder
from retrieval.types import KnowledgeSearchPort, SearchFilters, SearchHit, SearchMode, SearchRequest


@dataclass(frozen=True)
class QueryVector:
    text: str
    vector: list[float] | None


class VectorSearchService:
    def __init__(self, *, port: KnowledgeSearchPort, embedder: Embedder) -> None:
        self.port = port
        self.embedder = embedder

    def embed(self, query: str, mode: SearchMode) -> QueryVector:
        # BM25 alone needs no vector: don't pay for one.
        return QueryVector(query, None if mode == "bm25" else self.embedder.embed_query(query))

    def search(self, query: QueryVector, *, mode: SearchMode, settings: RagSettings,
               filters: SearchFilters) -> list[SearchHit]:
        return self.port.search(SearchRequest(
            query_text=query.text, query_vector=query.vector, mode=mode,
            limit=settings.retrieve_k, filters=filters, rrf_k=settings.rrf_k,
            dense_weight=settings.dense_weight, bm25_weight=settings.bm25_weight))
