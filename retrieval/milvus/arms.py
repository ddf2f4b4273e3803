"""The search arms on one collection (the KnowledgeSearchPort): dense, BM25 and both fused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from retrieval.analysis import bm25_text
from retrieval.fusion import weighted_rrf
from retrieval.milvus.collections import collection_fields
from retrieval.milvus.connection import MilvusConnection, VectorStoreUnavailable
from retrieval.milvus.expressions import fields_used, filter_expression, quote
from retrieval.types import SearchFilters, SearchHit, SearchRequest

_OUTPUT = ("id", "content", "metadata")


class IndexOutdated(VectorStoreUnavailable):
    """The serving collection lacks a field the search needs: a rebuild adds it."""


class MilvusSearch:
    def __init__(self, connection: MilvusConnection, collection: str) -> None:
        self.connection = connection
        self.collection = collection

    def _expression(self, filters: SearchFilters) -> str:
        missing = fields_used(filters.metadata) - collection_fields(self.connection,
                                                                    self.collection)
        if missing:
            raise IndexOutdated(
                f"the serving index {self.collection} was built before chunks carried "
                f"{', '.join(sorted(missing))}: rebuild it (manage.py rebuild_hybrid_knowledge "
                "--confirm REBUILD) to filter on them")
        return filter_expression(filters)

    def fetch(self, filters: SearchFilters, *, limit: int, ids: Sequence[str] = (),
              doc_id: int | None = None, content: bool = True) -> list[SearchHit]:
        """Chunks by evidence key or of one document, within the caller's filters."""
        expr = self._expression(filters)
        if ids:
            expr += f" and id in [{', '.join(quote(i) for i in ids)}]"
        if doc_id is not None:
            expr += f" and doc_id == {int(doc_id)}"
        rows = self.connection.call("query", lambda c: c.query(
            self.collection, filter=expr, limit=limit, timeout=self.connection.timeout,
            output_fields=list(_OUTPUT if content else ("id", "metadata"))),
            collection=self.collection)
        return [SearchHit(chunk_id=str(row["id"]), content=str(row.get("content", "")),
                          metadata=dict(row.get("metadata") or {}), rank=0, score=0.0)
                for row in rows]

    def search(self, request: SearchRequest) -> list[SearchHit]:
        expr = self._expression(request.filters)
        if request.mode == "hybrid":
            return self._hybrid(expr, request)
        found = self._dense(expr, request) if request.mode == "dense" else \
            self._bm25(expr, request)
        return [SearchHit(chunk_id=str(item["id"]), content=str(item["entity"].get("content", "")),
                          metadata=dict(item["entity"].get("metadata") or {}), rank=rank,
                          score=abs(float(item["distance"])),  # BM25 distances are negative
                          dense_l2=float(item["distance"]) if request.mode == "dense" else None)
                for rank, item in enumerate(found, 1)]

    def _search(self, expr: str, request: SearchRequest, *, data: Any, field: str,
                params: dict[str, Any], output: Sequence[str]) -> list[dict[str, Any]]:
        return list(self.connection.call("search", lambda c: c.search(
            self.collection, data=[data], anns_field=field, filter=expr, limit=request.limit,
            output_fields=list(output), search_params=params,
            timeout=self.connection.timeout), collection=self.collection)[0])

    def _dense(self, expr: str, request: SearchRequest) -> list[dict[str, Any]]:
        return self._search(expr, request, data=request.query_vector, field="vector",
                            params={"metric_type": "L2", "params": {"nprobe": 16}},
                            output=_OUTPUT)

    def _bm25(self, expr: str, request: SearchRequest,
              output: Sequence[str] = _OUTPUT) -> list[dict[str, Any]]:
        return self._search(expr, request, data=bm25_text(request.query_text),
                            field="sparse_vector", params={"metric_type": "BM25"}, output=output)

    def _hybrid(self, expr: str, request: SearchRequest) -> list[SearchHit]:
        """Dense ANN and BM25 as two searches, fused here with weighted RRF.

        Two plain searches cost about what one `hybrid_search` does on Milvus Lite, and the
        fusion can then weight a weak embedder down (RRFRanker has no weights).
        """
        dense = self._dense(expr, request)
        sparse = self._bm25(expr, request, output=[*_OUTPUT, "vector"])
        items = {str(item["id"]): item for item in [*sparse, *dense]}
        query = np.asarray(request.query_vector, dtype=np.float32)
        fused = weighted_rrf([str(i["id"]) for i in dense], [str(i["id"]) for i in sparse],
                             k=request.rrf_k, dense_weight=request.dense_weight,
                             bm25_weight=request.bm25_weight, limit=request.limit)
        hits = []
        for rank, candidate in enumerate(fused, 1):
            entity = items[candidate.id].get("entity", {})
            if candidate.dense_rank is not None:
                dense_l2 = float(dense[candidate.dense_rank - 1]["distance"])
            else:  # found by BM25 only: measure it the way Milvus does (squared L2)
                vector = np.asarray(entity["vector"], dtype=np.float32)
                dense_l2 = float(np.sum((vector - query) ** 2))
            hits.append(SearchHit(chunk_id=candidate.id, content=str(entity.get("content", "")),
                                  metadata=dict(entity.get("metadata") or {}), rank=rank,
                                  score=candidate.score, dense_l2=dense_l2))
        return hits
