"""VectorSearchService: the serving index's search port and the embedder of its model."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.index.embedders import Embedder
from retrieval.types import KnowledgeSearchPort, SearchMode


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
