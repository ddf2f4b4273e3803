"""Collections and the alias: the schema (seed 000 §5), create, load, point, drop, count.

One collection per index version (`biz_v3`). Filter fields are scalars with INVERTED indexes
(a JSON-path filter was ~50x slower on Milvus Lite 3.x).

A tenant's rows live in one partition (`tenants_{tenant_id % TENANT_PARTITIONS}`, made when its
first row is written) and every search names it: Milvus Lite 3.x evaluated a filter on every
row in the searched partitions, so a lookup's cost follows the caller's rows, not every
tenant's; a partition key did not (it hashes rows into buckets no search prunes). Milvus 2.5's
engine as milvus-lite 2.5.1 serves it (the embedded default) has no partitions: every row is
in one and the tenant filter, an INVERTED index, does the pruning.
The count is bounded by Milvus's limit on partitions (1,024 by default): past it, tenants
share a partition and the tenant filter still separates them. A collection records the count
it was built with; one built before has none, keeps every row in `_default` and is searched
whole until a rebuild.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from datasets.tenancy.permissions import MAX_PRINCIPAL_CHARS, MAX_READERS
from retrieval.index.milvus.connection import MilvusConnection, VectorStoreLacks
from retrieval.index.milvus.expressions import DATE_FIELD, READERS_FIELD, TEXT_FIELDS
from retrieval.index.milvus.imports import DataType, Function, FunctionType

# A Milvus server refuses a VarChar declared longer than this (Milvus Lite 3.x does not check):
# a text field declares 4 bytes a character (UTF-8's most), so it holds at most a quarter.
VARCHAR_MAX_BYTES = 65_535
MAX_CONTENT = 16_000
MAX_SEARCH_TEXT = VARCHAR_MAX_BYTES // 4  # the analysed text (writer.py cuts it after analysis)
MAX_CATEGORY = 100
MAX_DOMAIN = 100
MAX_BUSINESS_KEY = 200
MAX_FILE_NAME = 255
# Each VarChar's declared length in bytes (max_length counts bytes on a Milvus server: the
# text fields leave room for 4-byte characters). The writer holds the fields it does not cut
# to them itself: Milvus 2.5's engine as the milvus-lite 2.5.1 wheel serves it stores a longer
# value silently.
VARCHAR_BYTES = {"id": 128, "category": MAX_CATEGORY, "domain": MAX_DOMAIN * 4,
                 "business_key": MAX_BUSINESS_KEY * 4, "file_name": MAX_FILE_NAME * 4,
                 "content": MAX_CONTENT * 4, "search_text": MAX_SEARCH_TEXT * 4}
# At most Milvus's default limit of partitions a collection (1,024, `_default` included).
TENANT_PARTITIONS = 1000
_PARTITIONS_PROPERTY = "kbplatform.tenant_partitions"
logger = logging.getLogger(__name__)
# The dense index's lists (Milvus Lite 3.x ignored the build parameter and used its default
# of 128), and what a search asks of it: every list, i.e. the exact nearest chunks. Probing 16
# of 128 missed true neighbours (XQuAD zh→en recall@100 0.93 against 0.97, docs/benchmarks.md);
# a tenant's rows are searched in their own partition, so the full scan stays small.
DENSE_LISTS = 128
# BM25's terms: jieba's words. Milvus 2.5's engine also keeps each space and punctuation mark
# as a term, which every chunk then matches (a question of unknown words found every chunk);
# the filter keeps Chinese, letters and digits only. Milvus Lite 3.x drops spaces itself and
# ignores the filter.
ANALYZER: dict[str, Any] = {"tokenizer": "jieba", "filter": ["cnalphanumonly"]}
DENSE_SEARCH: dict[str, Any] = {"metric_type": "L2", "params": {"nprobe": DENSE_LISTS}}
BM25_SEARCH: dict[str, Any] = {"metric_type": "BM25"}


@dataclass(frozen=True)
class Layout:
    """What a collection was built with: its fields and its tenants' partitions."""

    fields: frozenset[str]
    tenant_partitions: int  # 0: built before tenants had partitions

    def partition(self, tenant_id: int) -> str | None:
        """The partition holding the tenant's rows (None: all rows are in `_default`)."""
        if not self.tenant_partitions:
            return None
        return f"tenants_{int(tenant_id) % self.tenant_partitions}"


class MilvusCollections:
    def __init__(self, connection: MilvusConnection, *, alias: str = "biz") -> None:
        self.connection = connection
        self.alias = alias

    def create(self, name: str, dimension: int) -> None:
        """Create `name` with the hybrid schema (nothing happens if it exists)."""
        call, timeout = self.connection.call, self.connection.timeout
        if call("has_collection", lambda c: c.has_collection(name, timeout=timeout)):
            return
        self.connection.forget(name)
        client = self.connection.client()
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=VARCHAR_BYTES["id"])
        schema.add_field("tenant_id", DataType.INT64)
        schema.add_field("dataset_id", DataType.INT64)
        schema.add_field("doc_id", DataType.INT64)
        schema.add_field("activated", DataType.BOOL)
        # With the document's fields that RagConfig.metadata_filters compare (expressions.py).
        for field in TEXT_FIELDS:
            schema.add_field(field, DataType.VARCHAR, max_length=VARCHAR_BYTES[field])
        schema.add_field("updated_at", DataType.INT64)
        schema.add_field("content", DataType.VARCHAR, max_length=VARCHAR_BYTES["content"])
        schema.add_field("search_text", DataType.VARCHAR, max_length=VARCHAR_BYTES["search_text"],
                         enable_analyzer=True, analyzer_params=ANALYZER)
        schema.add_field("sparse_vector", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
        schema.add_field("metadata", DataType.JSON)
        # Who may read the document (datasets/tenancy/permissions.py): compared inside every search
        # (expressions.py), so its cost does not follow the number of restricted documents.
        schema.add_field(READERS_FIELD, DataType.ARRAY, element_type=DataType.VARCHAR,
                         max_capacity=MAX_READERS, max_length=MAX_PRINCIPAL_CHARS * 4)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                     input_field_names=["search_text"],
                                     output_field_names=["sparse_vector"]))
        index = client.prepare_index_params()
        index.add_index("vector", index_type="IVF_FLAT", metric_type="L2",
                        params={"nlist": DENSE_LISTS})
        index.add_index("sparse_vector", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        for field in ("tenant_id", "dataset_id", "doc_id", "activated", *TEXT_FIELDS,
                      DATE_FIELD):
            index.add_index(field, index_type="INVERTED")
        call("create_collection", lambda c: c.create_collection(
            name, schema=schema, properties={_PARTITIONS_PROPERTY: str(TENANT_PARTITIONS)},
            timeout=timeout))
        # sync=False: pymilvus would poll index state with an RPC Milvus Lite lacks
        # (AllocTimestamp), retrying for seconds per index.
        call("create_index", lambda c: c.create_index(name, index, sync=False, timeout=timeout))
        self.load(name)

    def layout(self, name: str) -> Layout:
        """How `name` was built: collections built before a field was added lack it (the
        writer leaves it out, a filter on it asks for a rebuild), those built before tenants
        had partitions are searched whole."""
        return collection_layout(self.connection, name)

    def names(self) -> list[str]:
        return list(self.connection.call(
            "list_collections", lambda c: c.list_collections(timeout=self.connection.timeout)))

    def alias_target(self) -> str | None:
        """The collection the alias points at; None when there is none, or on a server
        without aliases (Milvus 2.5's engine as the milvus-lite 2.5.1 wheel serves it:
        lookups read the index version, so only outside tools miss the alias there)."""
        connection = self.connection
        if not connection.aliases:
            return None
        try:
            # Ask before describing: describing a missing alias is an error pymilvus logs.
            aliases = connection.call("list_aliases", lambda c: c.list_aliases(
                timeout=connection.timeout)).get("aliases", [])
        except VectorStoreLacks:
            logger.info("this Milvus has no aliases: %s is not pointed", self.alias)
            connection.aliases = False
            return None
        if self.alias not in aliases:
            return None
        return str(connection.call("describe_alias", lambda c: c.describe_alias(
            self.alias, timeout=connection.timeout))["collection_name"])

    def point_alias(self, collection: str) -> None:
        """Point the alias (for outside tools; lookups read the index version) at `collection`,
        where the server has aliases."""
        timeout = self.connection.timeout
        target = self.alias_target()
        if not self.connection.aliases:
            return
        if target is None:
            self.connection.call("create_alias", lambda c: c.create_alias(
                collection, self.alias, timeout=timeout))
        else:
            self.connection.call("alter_alias", lambda c: c.alter_alias(
                collection, self.alias, timeout=timeout))

    def drop(self, name: str) -> None:
        # Milvus Lite drops the target when given an alias name: only real names, and
        # never the one the alias points at.
        if name == self.alias or name == self.alias_target():
            raise ValueError(f"refusing to drop {name!r}: it is the alias or what it serves")
        self.connection.call("drop_collection", lambda c: c.drop_collection(
            name, timeout=self.connection.timeout))
        self.connection.forget(name)

    def load(self, name: str) -> None:
        """Collections come back unloaded after a Milvus Lite restart; searches need them."""
        self.connection.call("load_collection", lambda c: c.load_collection(
            name, timeout=self.connection.timeout))

    def count(self, name: str) -> int:
        rows = self.connection.call("count", lambda c: c.query(
            name, filter="", output_fields=["count(*)"], timeout=self.connection.timeout),
            collection=name)
        return int(rows[0]["count(*)"])


def collection_layout(connection: MilvusConnection, name: str) -> Layout:
    """How `name` was built, asked once per connection (it never changes under a name while
    the collection exists; creating or dropping it forgets the answer)."""
    layout = connection.layouts.get(name)
    if layout is None:
        described = connection.call("describe_collection", lambda c: c.describe_collection(
            name, timeout=connection.timeout))
        properties = described.get("properties") or {}
        layout = connection.layouts[name] = Layout(
            fields=frozenset(str(f["name"]) for f in described["fields"]),
            tenant_partitions=int(properties.get(_PARTITIONS_PROPERTY, 0) or 0))
    return layout


def partition_exists(connection: MilvusConnection, collection: str, partition: str, *,
                     ask: bool = False) -> bool:
    """Whether `partition` of `collection` exists. A yes is kept (partitions are dropped only
    with their collection, and a collection's name is not used again); a no, or `ask`, asks
    Milvus again: another process (the worker) may have written the tenant's first rows."""
    known = connection.partitions.get(collection)
    if ask or known is None or partition not in known:
        known = connection.partitions[collection] = frozenset(connection.call(
            "list_partitions", lambda c: c.list_partitions(collection,
                                                           timeout=connection.timeout),
            collection=collection))
    return partition in known


def has_partitions(connection: MilvusConnection, collection: str) -> bool:
    """Whether the server has partitions at all: Milvus 2.5's engine as the milvus-lite 2.5.1
    wheel serves it has none (UNIMPLEMENTED), nor keeps a collection's properties, so every
    collection there reads as built before tenants had partitions and is searched whole."""
    try:
        partition_exists(connection, collection, "_default", ask=True)
    except VectorStoreLacks:
        return False
    return True


def tenant_partitions(connection: MilvusConnection, collection: str,
                      tenant_id: int) -> list[str] | None:
    """The partitions a search of the tenant's rows names: None on a collection built before
    tenants had partitions (search it whole), [] when the tenant has no row in it yet."""
    partition = collection_layout(connection, collection).partition(tenant_id)
    if partition is None:
        return None
    return [partition] if partition_exists(connection, collection, partition) else []
