"""MilvusHybridKnowledgeStore: the one vector back end (seed 000 §4–§5).

One collection per index version (`biz_v3`), an alias (`biz`) that lookups search. Filter
fields are scalars with INVERTED indexes (a JSON-path filter is ~50x slower on Milvus Lite),
and every expression is built here from typed values, never from request text.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from pymilvus import DataType, Function, FunctionType, MilvusClient
from pymilvus.exceptions import MilvusException

from retrieval.analysis import bm25_text
from retrieval.fusion import weighted_rrf
from retrieval.types import SearchFilters, SearchHit, SearchRequest

logger = logging.getLogger(__name__)

MAX_CONTENT = 16_000
MAX_SEARCH_TEXT = 20_000
_OUTPUT = ["id", "content", "metadata"]
RELEASED = 101  # "collection not loaded"
# pymilvus pings idle channels every 10 s; the Milvus Lite server keeps gRPC's default policy
# (no ping without a call more often than every 5 min) and answers with GOAWAY "too many
# pings". pymilvus then finds its shared channel broken and the next connect fails.
_GRPC = {"grpc.keepalive_permit_without_calls": 0}


class VectorStoreUnavailable(Exception):
    """Milvus failed or cannot be reached; a lookup answers UNAVAILABLE, never 'no results'."""


@dataclass(frozen=True)
class ChunkRow:
    id: str  # evidence key "{docId}#chunk-{n}"
    tenant_id: int
    dataset_id: int
    doc_id: int
    activated: bool
    category: str
    content: str
    search_text: str
    vector: list[float]
    metadata: dict[str, Any]


def quote(value: str) -> str:
    """A Milvus string literal: the value can never end the string or add a clause."""
    return json.dumps(value, ensure_ascii=False)


def filter_expression(filters: SearchFilters) -> str:
    if not filters.dataset_ids:
        raise ValueError("a search needs at least one dataset")
    datasets = ", ".join(str(int(d)) for d in filters.dataset_ids)
    expr = (f"tenant_id == {int(filters.tenant_id)} and dataset_id in [{datasets}]"
            " and activated == true")
    if filters.category:
        expr += f" and category == {quote(filters.category)}"
    return expr


def _entities(rows: Sequence[ChunkRow]) -> list[dict[str, Any]]:
    """Rows as Milvus entities; BM25 reads the analysed text (retrieval/analysis.py)."""
    return [row.__dict__ | {"content": row.content[:MAX_CONTENT],
                            "search_text": bm25_text(row.search_text[:MAX_SEARCH_TEXT])}
            for row in rows]


class MilvusHybridKnowledgeStore:
    def __init__(self, *, uri: str, token: str = "", alias: str = "biz",
                 timeout: float = 10.0) -> None:
        self.uri = uri
        self.alias = alias
        self.timeout = timeout
        self._token = token
        self._client: MilvusClient | None = None
        # Milvus Lite loses acknowledged rows with concurrent writers: one write at a time.
        self._write_lock = threading.Lock()
        self._connect_lock = threading.Lock()

    @property
    def is_local(self) -> bool:
        return not self.uri.startswith(("http://", "https://", "tcp://", "unix:"))

    def client(self) -> MilvusClient:
        with self._connect_lock:
            if self._client is None:
                if self.is_local:
                    os.makedirs(os.path.dirname(os.path.abspath(self.uri)), exist_ok=True)
                try:
                    self._client = MilvusClient(uri=self.uri, token=self._token,
                                                timeout=self.timeout, grpc_options=_GRPC)
                except Exception as exc:  # pymilvus raises several unrelated types here
                    raise VectorStoreUnavailable(f"cannot connect to Milvus: {exc}") from exc
                try:
                    self._load_serving()
                except VectorStoreUnavailable:
                    # Searches retry the load and answer UNAVAILABLE; everything else (a
                    # rebuild into a new collection, the recovery) must still get a client.
                    logger.exception("the serving collection cannot be loaded")
            return self._client

    def _load_serving(self) -> None:
        """Milvus Lite comes back with every collection released: load what lookups search."""
        target = self.alias_target()
        if target and self._client is not None:
            self._call("load_collection", self._client.load_collection, target)

    def close(self) -> None:
        with self._connect_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return fn(*args, timeout=self.timeout, **kwargs)
            except MilvusException as exc:
                if exc.code != RELEASED or what == "load_collection":
                    raise
                # The server restarted under us and forgot what was loaded: load, try again.
                self._load_serving()
                return fn(*args, timeout=self.timeout, **kwargs)
        except VectorStoreUnavailable:
            raise
        except MilvusException as exc:
            logger.warning("milvus %s failed: %s", what, exc)
            raise VectorStoreUnavailable(f"Milvus {what} failed: {exc.message}") from exc
        except Exception as exc:  # grpc and connection errors surface with their own types
            logger.warning("milvus %s failed: %r", what, exc)
            raise VectorStoreUnavailable(f"Milvus {what} failed: {type(exc).__name__}") from exc

    # --- collections and the alias ---------------------------------------------------------

    def create_collection(self, name: str, dimension: int) -> None:
        client = self.client()
        if self._call("has_collection", client.has_collection, name):
            return
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
        schema.add_field("tenant_id", DataType.INT64)
        schema.add_field("dataset_id", DataType.INT64)
        schema.add_field("doc_id", DataType.INT64)
        schema.add_field("activated", DataType.BOOL)
        schema.add_field("category", DataType.VARCHAR, max_length=100)
        schema.add_field("content", DataType.VARCHAR, max_length=MAX_CONTENT * 4)
        schema.add_field("search_text", DataType.VARCHAR, max_length=MAX_SEARCH_TEXT * 4,
                         enable_analyzer=True, analyzer_params={"tokenizer": "jieba"})
        schema.add_field("sparse_vector", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
        schema.add_field("metadata", DataType.JSON)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                     input_field_names=["search_text"],
                                     output_field_names=["sparse_vector"]))
        index = client.prepare_index_params()
        index.add_index("vector", index_type="IVF_FLAT", metric_type="L2", params={"nlist": 128})
        index.add_index("sparse_vector", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        for field in ("tenant_id", "dataset_id", "doc_id", "activated", "category"):
            index.add_index(field, index_type="INVERTED")
        self._call("create_collection", client.create_collection, name, schema=schema)
        # sync=False: pymilvus would poll index state with an RPC Milvus Lite lacks
        # (AllocTimestamp), retrying for seconds per index.
        self._call("create_index", client.create_index, name, index, sync=False)
        self._call("load_collection", client.load_collection, name)

    def collections(self) -> list[str]:
        return list(self._call("list_collections", self.client().list_collections))

    def alias_target(self) -> str | None:
        client = self._client or self.client()
        # Ask before describing: describing a missing alias is an error pymilvus logs loudly.
        aliases = self._call("list_aliases", client.list_aliases).get("aliases", [])
        if self.alias not in aliases:
            return None
        return str(self._call("describe_alias", client.describe_alias,
                              self.alias)["collection_name"])

    def point_alias(self, collection: str) -> None:
        """Switch lookups to `collection` in one step; readers see the old or the new one."""
        client = self.client()
        if self.alias_target() is None:
            self._call("create_alias", client.create_alias, collection, self.alias)
        else:
            self._call("alter_alias", client.alter_alias, collection, self.alias)

    def drop_collection(self, name: str) -> None:
        # Milvus Lite drops the target when given an alias name: only real names, and
        # never the one the alias points at.
        if name == self.alias or name == self.alias_target():
            raise ValueError(f"refusing to drop {name!r}: it is the alias or what it serves")
        self._call("drop_collection", self.client().drop_collection, name)

    def load(self, collection: str | None = None) -> None:
        """Collections come back unloaded after a Milvus Lite restart; searches need them."""
        name = collection or self.alias_target()
        if name:
            self._call("load_collection", self.client().load_collection, name)

    def count(self, collection: str | None = None) -> int:
        rows = self._call("count", self.client().query, collection or self.alias,
                          filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    # --- writes ----------------------------------------------------------------------------

    def upsert(self, rows: Sequence[ChunkRow], *, collection: str | None = None) -> None:
        if not rows:
            return
        data = _entities(rows)
        name = collection or self.alias
        with self._write_lock:
            self._call("upsert", self.client().upsert, name, data)
            # Unflushed rows are searched 50-200x slower, and a flush makes them durable.
            self._call("flush", self.client().flush, name)

    def replace_documents(self, doc_ids: Sequence[int], rows: Sequence[ChunkRow], *,
                          collection: str | None = None) -> None:
        """The documents' chunks become exactly `rows`: upsert, delete leftovers, one flush.

        Leftovers (a document that now has fewer chunks) are found by the scalar doc_id and
        deleted by primary key, so no orphan chunk stays searchable.
        """
        name = collection or self.alias
        data = _entities(rows)
        ids = ", ".join(str(int(d)) for d in doc_ids)
        with self._write_lock:
            if data:
                self._call("upsert", self.client().upsert, name, data)
            current = self._call("query", self.client().query, name,
                                 filter=f"doc_id in [{ids}]", output_fields=["id"])
            stale = sorted({str(r["id"]) for r in current} - {row.id for row in rows})
            if stale:
                self._call("delete", self.client().delete, name, ids=stale)
            # Unflushed rows are searched 50-200x slower on Milvus Lite.
            self._call("flush", self.client().flush, name)

    def delete_document(self, doc_id: int, *, collection: str | None = None) -> None:
        """Delete a document's chunks by the scalar doc_id (not a JSON filter)."""
        name = collection or self.alias
        with self._write_lock:
            self._call("delete", self.client().delete, name, filter=f"doc_id == {int(doc_id)}")
            self._call("flush", self.client().flush, name)

    def set_document_activation(self, doc_id: int, activated: bool,
                                *, collection: str | None = None) -> int:
        name = collection or self.alias
        rows = self._call("query", self.client().query, name, filter=f"doc_id == {int(doc_id)}",
                          output_fields=["id"])
        if not rows:
            return 0
        data = [{"id": row["id"], "activated": activated} for row in rows]
        with self._write_lock:
            self._call("upsert", self.client().upsert, name, data, partial_update=True)
            self._call("flush", self.client().flush, name)
        return len(data)

    def chunk_ids(self, doc_id: int, *, collection: str | None = None) -> list[str]:
        rows = self._call("query", self.client().query, collection or self.alias,
                          filter=f"doc_id == {int(doc_id)}", output_fields=["id"])
        return sorted(str(row["id"]) for row in rows)

    # --- search (the KnowledgeSearchPort) ---------------------------------------------------

    def search(self, request: SearchRequest, *, collection: str | None = None) -> list[SearchHit]:
        expr = filter_expression(request.filters)
        name = collection or self.alias
        if request.mode == "hybrid":
            return self._hybrid(name, expr, request)
        if request.mode == "dense":
            found = self._dense(name, expr, request)
        else:
            found = self._bm25(name, expr, request)
        return [SearchHit(chunk_id=str(item["id"]), content=str(item["entity"].get("content", "")),
                          metadata=dict(item["entity"].get("metadata") or {}), rank=rank,
                          score=abs(float(item["distance"])),  # BM25 distances are negative
                          dense_l2=float(item["distance"]) if request.mode == "dense" else None)
                for rank, item in enumerate(found, 1)]

    def _dense(self, name: str, expr: str, request: SearchRequest) -> list[dict[str, Any]]:
        return list(self._call(
            "search", self.client().search, name, data=[request.query_vector],
            anns_field="vector", filter=expr, limit=request.limit, output_fields=_OUTPUT,
            search_params={"metric_type": "L2", "params": {"nprobe": 16}})[0])

    def _bm25(self, name: str, expr: str, request: SearchRequest,
              output: Sequence[str] = tuple(_OUTPUT)) -> list[dict[str, Any]]:
        return list(self._call(
            "search", self.client().search, name, data=[bm25_text(request.query_text)],
            anns_field="sparse_vector", filter=expr, limit=request.limit,
            output_fields=list(output), search_params={"metric_type": "BM25"})[0])

    def _hybrid(self, name: str, expr: str, request: SearchRequest) -> list[SearchHit]:
        """Dense ANN and BM25 as two searches, fused here with weighted RRF.

        Two plain searches cost about what one `hybrid_search` does on Milvus Lite, and the
        fusion can then weight a weak embedder down (RRFRanker has no weights).
        """
        dense = self._dense(name, expr, request)
        sparse = self._bm25(name, expr, request, output=[*_OUTPUT, "vector"])
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


class CollectionSearch:
    """The search port on one named collection (an evaluation index), not the serving alias."""

    def __init__(self, store: MilvusHybridKnowledgeStore, collection: str) -> None:
        self.store = store
        self.collection = collection

    def search(self, request: SearchRequest) -> list[SearchHit]:
        return self.store.search(request, collection=self.collection)


_stores: dict[int, MilvusHybridKnowledgeStore] = {}
_stores_lock = threading.Lock()


def get_store() -> MilvusHybridKnowledgeStore:
    """One store per process (a forked worker must not reuse its parent's gRPC channel)."""
    pid = os.getpid()
    with _stores_lock:
        store = _stores.get(pid)
        if store is None:
            store = MilvusHybridKnowledgeStore(
                uri=settings.MILVUS_URI, token=settings.MILVUS_TOKEN,
                alias=settings.MILVUS_COLLECTION, timeout=settings.MILVUS_TIMEOUT_SECONDS)
            _stores.clear()
            _stores[pid] = store
        return store


def reset_store() -> None:
    """Close the process's client: tests and commands that switch MILVUS_URI call this."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
