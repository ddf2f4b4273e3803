"""Writes to Milvus (the KnowledgeWritePort): a document's chunks, its activation, its removal.

Every method takes the cross-process writer lock itself (retrieval/index/writer_lock.py), so no
caller can write without it; callers that must read the database and write as one step take
the same lock around both (it is reentrant). Every write ends with a flush: unflushed rows are
searched 50-200x slower on Milvus Lite 3.x, and a flush makes them durable.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from retrieval.analysis import bm25_text
from retrieval.index.milvus.collections import (
    MAX_CONTENT,
    MAX_SEARCH_TEXT,
    VARCHAR_BYTES,
    collection_layout,
    partition_exists,
)
from retrieval.index.milvus.connection import MilvusConnection, VectorStoreRejected
from retrieval.index.milvus.expressions import READERS_FIELD, TEXT_FIELDS, ints
from retrieval.index.writer_lock import milvus_writer


@dataclass(frozen=True)
class ChunkRow:
    id: str  # evidence key "{docId}#chunk-{n}"
    tenant_id: int
    dataset_id: int
    doc_id: int
    # Always true: activation is filtered by doc_id at query time (expressions.py). The
    # field stays in the schema so that collections built before keep their layout.
    activated: bool
    category: str
    content: str
    search_text: str
    vector: list[float]
    metadata: dict[str, Any]
    # What RagConfig.metadata_filters compare (with category above).
    domain: str = ""
    business_key: str = ""
    file_name: str = ""
    updated_at: int = 0  # epoch seconds of the document's last content change
    readers: tuple[str, ...] = ()  # who may read the document; empty: every caller


@dataclass(frozen=True)
class StoredChunk:
    """What reconciliation compares: one Milvus row without its text and vectors."""

    id: str
    doc_id: int
    dataset_id: int
    content_hash: str
    readers: tuple[str, ...] | None = None  # None: the collection was built without them


class KnowledgeWritePort(Protocol):
    """What indexing, rebuild and reconciliation write through (MilvusWriter below)."""

    def replace_documents(self, doc_ids: Sequence[int], rows: Sequence[ChunkRow], *,
                          collection: str, scope: str = "all") -> None: ...

    def delete_ids(self, ids: Sequence[str], *, collection: str, scope: str = "all",
                   flush: bool = True) -> None: ...

    def delete_document(self, doc_id: int, *, collection: str, scope: str = "all") -> None: ...

    def stored_chunks(self, collection: str, *,
                      batch_size: int = 1000) -> Iterator[StoredChunk]: ...


# What one upsert call carries at most: the texts' and the vector's bytes. Each call costs Milvus
# 2.5's engine time that grows with the collection (it finds the rows an upsert replaces): at
# 100 rows a call, a 2,000-row batch took 2.3 s into 20,000 rows and 6.8 s into 100,000.
UPSERT_BYTES = 4 * 2**20


def _entities(rows: Sequence[ChunkRow], fields: frozenset[str]) -> list[dict[str, Any]]:
    """Rows as Milvus entities of a collection with `fields` (one built before a field was
    added does not get it); BM25 reads the analysed text (retrieval/analysis.py)."""
    return [_within_declared({k: list(v) if isinstance(v, tuple) else v
                              for k, v in row.__dict__.items() if k in fields}
                             | {"content": row.content[:MAX_CONTENT],
                                # Stemming and lower-casing may lengthen a text: cut what the
                                # field receives.
                                "search_text": bm25_text(
                                    row.search_text[:MAX_SEARCH_TEXT])[:MAX_SEARCH_TEXT]})
            for row in rows]


def _bounded(entities: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The entities in calls of at most UPSERT_BYTES each (one larger entity alone)."""
    batch: list[dict[str, Any]] = []
    size = 0
    for entity in entities:
        bytes_ = (len(entity["content"].encode()) + len(entity["search_text"].encode())
                  + 4 * len(entity["vector"]))
        if batch and size + bytes_ > UPSERT_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(entity)
        size += bytes_
    if batch:
        yield batch


def _within_declared(entity: dict[str, Any]) -> dict[str, Any]:
    """The entity, refused as a Milvus server refuses it when a VarChar is longer than its
    field declares (an engine that stores it silently must not decide what is kept). The
    texts cut above to a quarter of their bytes in characters always fit."""
    for field in ("id", *TEXT_FIELDS):
        size, limit = len(str(entity.get(field, "")).encode()), VARCHAR_BYTES[field]
        if size > limit:
            raise VectorStoreRejected(f"Milvus refused upsert: the {field} of {entity['id'][:128]}"
                                      f" is {size} bytes, over the {limit} its field declares")
    return entity


class MilvusWriter:
    def __init__(self, connection: MilvusConnection) -> None:
        self.connection = connection

    def _upsert(self, collection: str, batch: list[dict[str, Any]], partition: str | None
                ) -> None:
        self.connection.call("upsert", lambda c: c.upsert(
            collection, batch, partition_name=partition or "", timeout=self.connection.timeout))

    def _partition(self, collection: str, tenant_id: int) -> str | None:
        """The tenant's partition, made on its first row (under the writer lock; asked every
        time, as a write is never served from what this process once knew)."""
        partition = collection_layout(self.connection, collection).partition(tenant_id)
        if partition is not None and not partition_exists(self.connection, collection,
                                                          partition, ask=True):
            self.connection.call("create_partition", lambda c: c.create_partition(
                collection, partition, timeout=self.connection.timeout))
            self.connection.partitions.pop(collection, None)
        return partition

    def _flush(self, collection: str) -> None:
        self.connection.call("flush", lambda c: c.flush(collection,
                                                        timeout=self.connection.timeout))

    def _ids_of(self, collection: str, doc_ids: Sequence[int]) -> set[str]:
        if not doc_ids:  # `doc_id in []` fails an assertion of Milvus 2.5's engine
            return set()
        rows = self.connection.call("query", lambda c: c.query(
            collection, filter=f"doc_id in {ints(doc_ids)}", output_fields=["id"],
            timeout=self.connection.timeout), collection=collection)
        return {str(row["id"]) for row in rows}

    def replace_documents(self, doc_ids: Sequence[int], rows: Sequence[ChunkRow], *,
                          collection: str, scope: str = "all") -> None:
        """The documents' chunks become exactly `rows`: upsert, delete leftovers, one flush.

        Leftovers (a document that now has fewer chunks) are found by the scalar doc_id and
        deleted by primary key, so no orphan chunk stays searchable.
        """
        fields = collection_layout(self.connection, collection).fields
        by_tenant: dict[int, list[ChunkRow]] = {}
        for row in rows:
            by_tenant.setdefault(row.tenant_id, []).append(row)
        with milvus_writer(scope):
            for tenant_id, own in by_tenant.items():
                # Always into the tenant's partition: an upsert elsewhere would leave the
                # old row where the tenant's searches look.
                partition = self._partition(collection, tenant_id)
                # A bounded request each: a 2,000-chunk document is a few calls of one timeout.
                for batch in _bounded(_entities(own, fields)):
                    self._upsert(collection, batch, partition)
            stale = sorted(self._ids_of(collection, doc_ids) - {row.id for row in rows})
            if stale:
                self.delete_ids(stale, collection=collection, scope=scope, flush=False)
            self._flush(collection)

    def delete_ids(self, ids: Sequence[str], *, collection: str, scope: str = "all",
                   flush: bool = True) -> None:
        with milvus_writer(scope):
            self.connection.call("delete", lambda c: c.delete(
                collection, ids=list(ids), timeout=self.connection.timeout))
            if flush:
                self._flush(collection)

    def delete_document(self, doc_id: int, *, collection: str, scope: str = "all") -> None:
        """Delete a document's chunks by the scalar doc_id (not a JSON filter)."""
        with milvus_writer(scope):
            self.connection.call("delete", lambda c: c.delete(
                collection, filter=f"doc_id == {int(doc_id)}", timeout=self.connection.timeout))
            self._flush(collection)

    def stored_chunks(self, collection: str, *, batch_size: int = 1000) -> Iterator[StoredChunk]:
        """Every row of `collection`, a batch at a time (reconciliation)."""
        readers = READERS_FIELD in collection_layout(self.connection, collection).fields
        iterator = self.connection.call("query_iterator", lambda c: c.query_iterator(
            collection, batch_size=batch_size, filter="",
            output_fields=["id", "doc_id", "dataset_id", "metadata",
                           *([READERS_FIELD] if readers else [])],
            timeout=self.connection.timeout), collection=collection)
        try:
            while True:
                batch = self.connection.call("query_iterator", lambda c: iterator.next())
                if not batch:
                    return
                for row in batch:
                    yield StoredChunk(id=str(row["id"]), doc_id=int(row["doc_id"]),
                                      dataset_id=int(row["dataset_id"]),
                                      content_hash=str((row.get("metadata") or {})
                                                       .get("contentHash", "")),
                                      readers=tuple(row.get(READERS_FIELD) or ())
                                      if readers else None)
        finally:
            iterator.close()
