"""What the tests read from Milvus directly: the serving collection's rows, counts, the alias;
and the Milvus Lite 3.x server of the tests marked lite3."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from kbplatform.processes import ROOT, MilvusServer, ServiceError
from retrieval.index import milvus
from retrieval.index.milvus.connection import get_connection
from retrieval.index.versions import active_version


class MilvusProbe:
    alias = settings.MILVUS_COLLECTION

    @property
    def serving(self) -> str:
        version = active_version()
        assert version is not None, "nothing serves yet"
        return version.collection_name

    def client(self) -> Any:
        return get_connection().client()

    def collections(self) -> list[str]:
        return milvus.collections().names()

    def alias_target(self) -> str | None:
        return milvus.collections().alias_target()

    def serves(self, collection: str) -> bool:
        """Whether `collection` serves: the index version names it, and the alias points at it
        on a Milvus that has aliases (Milvus 2.5's engine as milvus-lite 2.5.1 serves it has
        none)."""
        target = self.alias_target()
        return self.serving == collection and (target == collection
                                               or not get_connection().aliases)

    def count(self, collection: str | None = None) -> int:
        return milvus.collections().count(collection or self.serving)

    def rows(self, doc_id: int, *fields: str,
             collection: str | None = None) -> list[dict[str, Any]]:
        name = collection or self.serving
        # Through the connection: it loads a collection a restarted server has released.
        found = get_connection().call("query", lambda c: c.query(
            name, filter=f"doc_id == {int(doc_id)}", output_fields=["id", *fields]),
            collection=name)
        return sorted(found, key=lambda row: row["id"])

    def chunk_ids(self, doc_id: int, collection: str | None = None) -> list[str]:
        return [str(row["id"]) for row in self.rows(doc_id, collection=collection)]


def collection_before_filter_fields(name: str, dimension: int) -> None:
    """A collection with the schema of before the metadata filter fields (domain, ...)."""
    from retrieval.index.milvus.imports import DataType, Function, FunctionType

    client = get_connection().client()
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    for field, kind, extra in (("id", DataType.VARCHAR, {"is_primary": True, "max_length": 128}),
                              ("tenant_id", DataType.INT64, {}),
                              ("dataset_id", DataType.INT64, {}), ("doc_id", DataType.INT64, {}),
                              ("activated", DataType.BOOL, {}),
                              ("category", DataType.VARCHAR, {"max_length": 100}),
                              ("content", DataType.VARCHAR, {"max_length": 1000}),
                              ("search_text", DataType.VARCHAR, {
                                  "max_length": 1000, "enable_analyzer": True,
                                  "analyzer_params": {"tokenizer": "jieba"}}),
                              ("sparse_vector", DataType.SPARSE_FLOAT_VECTOR, {}),
                              ("vector", DataType.FLOAT_VECTOR, {"dim": dimension}),
                              ("metadata", DataType.JSON, {})):
        schema.add_field(field, kind, **extra)
    schema.add_function(Function(name="bm25", function_type=FunctionType.BM25,
                                 input_field_names=["search_text"],
                                 output_field_names=["sparse_vector"]))
    index = client.prepare_index_params()
    index.add_index("vector", index_type="IVF_FLAT", metric_type="L2")
    index.add_index("sparse_vector", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=schema, index_params=index)


class Lite3Server(MilvusServer):
    """`milvus-lite server` of Milvus Lite 3.x (written in Python), with one worker thread,
    from the folder scripts/milvus-lite3.sh installs it into (KB_TEST_MILVUS_LITE3): its
    package has the import name of the platform's milvus-lite 2.5.1, so it is kept apart."""

    name = "milvus-lite 3.x"
    stop_signal = signal.SIGINT  # its only clean stop

    def argv(self) -> list[str]:
        home = Path(os.environ.get("KB_TEST_MILVUS_LITE3", ROOT / ".milvus-lite3"))
        if not (home / "milvus_lite").is_dir():
            raise ServiceError(f"Milvus Lite 3.x is not in {home}: bash scripts/milvus-lite3.sh")
        self.env["PYTHONPATH"] = str(home)
        return [sys.executable, "-c", "from milvus_lite.cmdline import main; main()", "server",
                "--data-dir", str(self.data), "--host", self.host, "--port", str(self.port),
                "--max-workers", "1"]
