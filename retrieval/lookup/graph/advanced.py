"""The advanced retriever (seed 003 §6): the whole retrieval graph as one retriever, for callers
outside the graph (an agent's RAG node, another service). Registered as `advanced`, so the
graph's own retrieval node refuses it: the graph never runs inside itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from retrieval.lookup.graph.registry import RetrieverCall, RetrieverRegistry, RetrieverSpec
from retrieval.types import LookupResult, SearchFilters, SearchHit

RunGraph = Callable[[str, SearchFilters], LookupResult]


class AdvancedRetriever:
    spec: ClassVar[RetrieverSpec] = RetrieverSpec(
        name="ADVANCED", needs_vector=False, parallel=False, advanced=True)

    def __init__(self, *, run_graph: RunGraph) -> None:
        self.run_graph = run_graph

    def retrieve(self, call: RetrieverCall) -> list[SearchHit]:
        result = self.run_graph(call.query, call.filters)
        return [SearchHit(chunk_id=item.chunk.evidence_key, content=item.excerpt,
                          metadata={"docId": item.chunk.doc_id,
                                    "chunkIndex": item.chunk.chunk_index,
                                    "title": item.chunk.title,
                                    "breadcrumb": item.chunk.breadcrumb,
                                    "location": (item.chunk.location.as_dict()
                                                 if item.chunk.location else None),
                                    "source": item.chunk.source,
                                    "datasetId": item.chunk.dataset_id,
                                    "commit": item.chunk.commit},
                          rank=rank, score=item.chunk.quality, dense_l2=item.chunk.dense_l2)
                for rank, item in enumerate(result.pack.items[:call.limit], 1)]


def register_advanced(registry: RetrieverRegistry) -> None:
    registry.register(AdvancedRetriever.spec, AdvancedRetriever)
