"""The Milvus store, split by concern: connection and errors, collections and the alias,
writes (the write port), search arms (the search port), filter expressions. These helpers
hand out the process's parts."""

from __future__ import annotations

from django.conf import settings

from retrieval.index.milvus.arms import MilvusSearch
from retrieval.index.milvus.collections import MilvusCollections
from retrieval.index.milvus.connection import (
    VectorStoreRejected,
    VectorStoreUnavailable,
    get_connection,
    reset_connection,
)
from retrieval.index.milvus.writer import ChunkRow, KnowledgeWritePort, MilvusWriter
from retrieval.types import KnowledgeSearchPort

__all__ = ["ChunkRow", "KnowledgeWritePort", "MilvusCollections", "MilvusSearch", "MilvusWriter",
           "VectorStoreRejected", "VectorStoreUnavailable", "collections", "reset_connection",
           "searcher", "writer"]


def collections() -> MilvusCollections:
    return MilvusCollections(get_connection(), alias=settings.MILVUS_COLLECTION)


def writer() -> KnowledgeWritePort:
    return MilvusWriter(get_connection())


def searcher(collection: str) -> KnowledgeSearchPort:
    return MilvusSearch(get_connection(), collection)
