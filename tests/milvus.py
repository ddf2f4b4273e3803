"""What the tests read from Milvus directly: the serving collection's rows, counts, the alias."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from retrieval import milvus
from retrieval.index_versions import active_version
from retrieval.milvus.connection import get_connection


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
