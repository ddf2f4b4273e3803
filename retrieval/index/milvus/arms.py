"""The search arms on one collection (the KnowledgeSearchPort): dense, BM25 and both fused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrieval.analysis import bm25_text
from retrieval.fusion import ADAPT_TOP_HITS, adaptive_dense_share, convex, weighted_rrf
from retrieval.index.milvus.collections import (
    BM25_SEARCH,
    DENSE_SEARCH,
    MilvusCollections,
    collection_layout,
    tenant_partitions,
)
from retrieval.index.milvus.connection import MilvusConnection, VectorStoreUnavailable
from retrieval.index.milvus.expressions import (
    READERS_FIELD,
    fields_used,
    filter_expression,
    quote,
)
from retrieval.index.milvus.imports import AnnSearchRequest, RRFRanker
from retrieval.types import SearchFilters, SearchHit, SearchRequest

_OUTPUT = ("id", "content", "metadata")
# The dense arm of a hybrid search runs on one of these while its BM25 arm runs on the caller's
# thread: Milvus 2.5's engine serves both at once (CMRC, 20 hits with their text: 4.8 → 4.0 ms;
# 100 hits: 8.8 → 7.4 ms; docs/benchmarks.md). A search waiting for a free one is only slower.
_DENSE_ARMS = ThreadPoolExecutor(16, thread_name_prefix="kb-dense-arm")
# How Milvus 2.5's engine refuses a BM25 search of a collection without rows (_searched).
_NO_BM25_STATISTICS = "NaN or Inf"


class IndexOutdated(VectorStoreUnavailable):
    """The serving collection lacks a field the search needs: a rebuild adds it."""


class MilvusSearch:
    def __init__(self, connection: MilvusConnection, collection: str) -> None:
        self.connection = connection
        self.collection = collection

    def _expression(self, filters: SearchFilters) -> str:
        layout = collection_layout(self.connection, self.collection)
        missing = fields_used(filters.metadata) | fields_used(filters.call.metadata)
        missing -= layout.fields
        if missing:
            raise IndexOutdated(
                f"the serving index {self.collection} was built before chunks carried "
                f"{', '.join(sorted(missing))}: rebuild it (manage.py rebuild_hybrid_knowledge "
                "--confirm REBUILD) to filter on them")
        return filter_expression(filters, readers_rows=READERS_FIELD in layout.fields)

    def _where(self, filters: SearchFilters) -> _Where | None:
        """The filter and the tenant's partition; None when the tenant has no row here yet."""
        expr = self._expression(filters)
        partitions = tenant_partitions(self.connection, self.collection, filters.tenant_id)
        return None if partitions == [] else _Where(expr, partitions)

    def fetch(self, filters: SearchFilters, *, limit: int, ids: Sequence[str] = (),
              doc_id: int | None = None, content: bool = True) -> list[SearchHit]:
        """Chunks by evidence key or of one document, within the caller's filters."""
        where = self._where(filters)
        if where is None:
            return []
        expr = where.expr
        if ids:
            expr += f" and id in [{', '.join(quote(i) for i in ids)}]"
        if doc_id is not None:
            expr += f" and doc_id == {int(doc_id)}"
        rows = self.connection.call("query", lambda c: c.query(
            self.collection, filter=expr, limit=limit, timeout=self.connection.timeout,
            partition_names=where.partitions,
            output_fields=list(_OUTPUT if content else ("id", "metadata"))),
            collection=self.collection)
        return [SearchHit(chunk_id=str(row["id"]), content=str(row.get("content", "")),
                          metadata=dict(row.get("metadata") or {}), rank=0, score=0.0)
                for row in rows]

    def search(self, request: SearchRequest) -> list[SearchHit]:
        where = self._where(request.filters)
        if where is None:
            return []
        if request.mode == "hybrid":
            return self._hybrid(where, request)
        if request.mode == "milvus_hybrid":
            return self._milvus_hybrid(where, request)
        dense = request.mode == "dense"
        found = self._dense(where, request) if dense else self._bm25(where, request)
        return [_hit(item, rank, abs(float(item["distance"])),  # BM25's distance is negative
                     float(item["distance"]) if dense else None, bm25_match=not dense)
                for rank, item in enumerate(found, 1)]

    def _search(self, where: _Where, request: SearchRequest, *, data: Any, field: str,
                params: dict[str, Any], output: Sequence[str]) -> list[dict[str, Any]]:
        return list(self._searched("search", lambda c: c.search(
            self.collection, data=[data], anns_field=field, filter=where.expr,
            limit=request.limit, output_fields=list(output), search_params=params,
            partition_names=where.partitions, timeout=self.connection.timeout))[0])

    def _searched(self, what: str, fn: Callable[[Any], Any]) -> Any:
        """The search's hits per query; none when it failed only because the collection holds
        no row yet (Milvus 2.5's engine then weighs BM25's terms by an average length of 0 and
        refuses the NaN it makes). The rows are counted only then; any other failure stays one."""
        try:
            return self.connection.call(what, fn, collection=self.collection)
        except VectorStoreUnavailable as exc:
            if _NO_BM25_STATISTICS not in str(exc):
                raise
            if MilvusCollections(self.connection).count(self.collection):
                raise
            return [[]]

    def _dense(self, where: _Where, request: SearchRequest) -> list[dict[str, Any]]:
        return self._search(where, request, data=request.query_vector, field="vector",
                            params=DENSE_SEARCH, output=_OUTPUT)

    def _bm25(self, where: _Where, request: SearchRequest,
              output: Sequence[str] = _OUTPUT) -> list[dict[str, Any]]:
        return self._search(where, request, data=_bm25_query(request),
                            field="sparse_vector", params=BM25_SEARCH, output=output)

    def _hybrid(self, where: _Where, request: SearchRequest) -> list[SearchHit]:
        """Dense ANN and BM25 as two searches, fused here (weighted RRF or CONVEX).

        The two searches run at once, and the fusion can then weight a weak embedder down
        (RRFRanker has no weights). The BM25 arm returns its vectors only when the lookup
        reads the dense distance of a hit found by BM25 alone.
        """
        dense_arm = _DENSE_ARMS.submit(self._dense, where, request)
        sparse = self._bm25(where, request, output=_with_vector(request))
        dense = dense_arm.result()  # its own call has the connection's timeout
        items = {str(item["id"]): item for item in [*sparse, *dense]}
        if request.fusion_method in ("CONVEX", "ADAPTIVE"):
            dense_weight, bm25_weight = request.dense_weight, request.bm25_weight
            if request.fusion_method == "ADAPTIVE" and dense_weight + bm25_weight > 0:
                share = adaptive_dense_share(
                    dense_weight / (dense_weight + bm25_weight), _bm25_query_text(request),
                    [str(i.get("entity", {}).get("content", "")) for i in sparse[:ADAPT_TOP_HITS]])
                dense_weight, bm25_weight = share, 1.0 - share
            fused = convex([(str(i["id"]), float(i["distance"])) for i in dense],
                           [(str(i["id"]), abs(float(i["distance"]))) for i in sparse],
                           dense_weight=dense_weight, bm25_weight=bm25_weight,
                           limit=request.limit)
        else:
            fused = weighted_rrf([str(i["id"]) for i in dense], [str(i["id"]) for i in sparse],
                                 k=request.rrf_k, dense_weight=request.dense_weight,
                                 bm25_weight=request.bm25_weight, limit=request.limit)
        known = {str(item["id"]): float(item["distance"]) for item in dense}
        return [_hit(items[f.id], rank, f.score, known[f.id] if f.id in known
                     else _l2(items[f.id], request.query_vector),
                     bm25_match=f.bm25_rank is not None)
                for rank, f in enumerate(fused, 1)]

    def _milvus_hybrid(self, where: _Where, request: SearchRequest) -> list[SearchHit]:
        """Both arms in one `hybrid_search`, fused by Milvus's RRFRanker(rrf_k)."""
        arms = [AnnSearchRequest([request.query_vector], "vector", DENSE_SEARCH,
                                 request.limit, expr=where.expr),
                AnnSearchRequest([_bm25_query(request)], "sparse_vector",
                                 BM25_SEARCH, request.limit, expr=where.expr)]
        found = self._searched("hybrid_search", lambda c: c.hybrid_search(
            self.collection, arms, RRFRanker(request.rrf_k), limit=request.limit,
            output_fields=_with_vector(request), partition_names=where.partitions,
            timeout=self.connection.timeout))[0]
        return [_hit(item, rank, float(item["distance"]), _l2(item, request.query_vector),
                     bm25_match=None)  # RRFRanker does not say which arm found a hit
                for rank, item in enumerate(found, 1)]


@dataclass(frozen=True)
class _Where:
    """What bounds a search: the filter, and the tenant's partition (None: the whole
    collection, built before tenants had partitions)."""

    expr: str
    partitions: list[str] | None


def _bm25_query_text(request: SearchRequest) -> str:
    return " ".join((request.query_text, *request.bm25_terms))


def _bm25_query(request: SearchRequest) -> str:
    return bm25_text(_bm25_query_text(request))


def _with_vector(request: SearchRequest) -> list[str]:
    return [*_OUTPUT, "vector"] if request.distances else list(_OUTPUT)


def _l2(item: dict[str, Any], query_vector: Sequence[float] | None) -> float | None:
    """Squared L2 of a returned vector to the query, as Milvus's dense arm measures it."""
    vector = item.get("entity", {}).get("vector")
    if vector is None or query_vector is None:
        return None
    difference = np.asarray(vector, dtype=np.float32) - np.asarray(query_vector,
                                                                   dtype=np.float32)
    return float(np.dot(difference, difference))


def _hit(item: dict[str, Any], rank: int, score: float, dense_l2: float | None, *,
         bm25_match: bool | None) -> SearchHit:
    entity = item.get("entity", {})
    return SearchHit(chunk_id=str(item["id"]), content=str(entity.get("content", "")),
                     metadata=dict(entity.get("metadata") or {}), rank=rank, score=score,
                     dense_l2=dense_l2, bm25_match=bm25_match)
