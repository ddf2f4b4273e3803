"""Index versions: the model, dimension, splitter and collection change together (seed 003 §1).

The active version is what serves: lookups embed with its embedder and search its collection,
and indexing writes into it with its splitter settings, whatever the settings say now. The
settings describe what the next rebuild builds. A retired version keeps its collection for a
rollback until an operator drops it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from datasets.documents.services import configured_chunking
from datasets.ingestion.pipeline import Chunking
from retrieval.analysis import VERSION as ANALYSIS_VERSION
from retrieval.index.embedders import Embedder, embedder_named, get_embedder
from retrieval.index.milvus.collections import MilvusCollections
from retrieval.index.models import IndexVersion
from retrieval.index.writer_lock import milvus_writer

SPLITTER = f"markdown-heading-v1/{ANALYSIS_VERSION}"


class IndexNotReady(Exception):
    """No version serves yet (nothing was ever indexed), or the asked one cannot serve."""


@dataclass(frozen=True)
class ServingIndex:
    """What one lookup or one indexing step uses, read together from one version row."""

    version: IndexVersion

    @property
    def collection(self) -> str:
        return self.version.collection_name

    @property
    def embedder(self) -> Embedder:
        return embedder_named(self.version.embedder)

    @property
    def chunking(self) -> Chunking:
        return self.version.chunking


def wanted_spec(embedder: Embedder) -> dict[str, object]:
    chunking = configured_chunking()
    return {"embedder": embedder.name, "dimension": embedder.dimension,
            "chunk_size": chunking.size, "chunk_overlap": chunking.overlap,
            "whole_document_chars": chunking.whole_document, "splitter": SPLITTER}


def spec_difference(version: IndexVersion) -> str:
    """"" when the version is what the settings ask for, else what differs (for checks)."""
    spec = wanted_spec(get_embedder())
    if all(getattr(version, key) == value for key, value in spec.items()):
        return ""
    return (f"the serving index {version.collection_name} was built with {version.embedder} "
            f"({version.dimension}d, chunks {_chunks(version.chunking)}, {version.splitter}) "
            f"but the configuration asks for {spec['embedder']} ({spec['dimension']}d, chunks "
            f"{_chunks(configured_chunking())}, {spec['splitter']}); it keeps serving until "
            "`python manage.py rebuild_hybrid_knowledge --confirm REBUILD`")


def _chunks(chunking: Chunking) -> str:
    whole = f", whole up to {chunking.whole_document}" if chunking.whole_document else ""
    return f"{chunking.size}/{chunking.overlap}{whole}"


def index_version_create(*, collections: MilvusCollections, embedder: Embedder,
                         status: str = IndexVersion.Status.BUILDING) -> IndexVersion:
    """A new collection `{alias}_v{n}` for the configured embedder and splitter."""
    spec = wanted_spec(embedder)
    with transaction.atomic():
        version = IndexVersion.objects.create(collection_name=f"pending-{timezone.now():%s%f}",
                                              status=status, **spec)
        version.collection_name = f"{collections.alias}_v{version.pk}"
        version.save(update_fields=["collection_name"])
    try:
        with milvus_writer():
            collections.create(version.collection_name, embedder.dimension)
    except Exception as exc:
        IndexVersion.objects.filter(pk=version.pk).update(
            status=IndexVersion.Status.FAILED,
            error=f"the collection could not be created: {type(exc).__name__}: {exc}"[:2000])
        raise
    return version


def index_version_activate(*, version: IndexVersion, collections: MilvusCollections) -> None:
    """Serve `version`; the one serving before is retired (kept for a rollback)."""
    with milvus_writer():
        collections.load(version.collection_name)
        with transaction.atomic():
            IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).exclude(
                pk=version.pk).update(status=IndexVersion.Status.RETIRED)
            IndexVersion.objects.filter(pk=version.pk).update(
                status=IndexVersion.Status.ACTIVE, activated_at=timezone.now(), error="")
        version.refresh_from_db()
        collections.point_alias(version.collection_name)


def active_version() -> IndexVersion | None:
    return IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).first()


def serving_index(*, collections: MilvusCollections | None = None) -> ServingIndex:
    """The active index; the first write on an empty installation creates it (`collections`
    given), a read never does (IndexNotReady: nothing was indexed yet)."""
    version = active_version()
    if version is None and collections is not None:
        with milvus_writer():  # two first uploads at once must not create two versions
            version = active_version()
            if version is None:
                version = index_version_create(collections=collections,
                                               embedder=get_embedder())
                index_version_activate(version=version, collections=collections)
    if version is None:
        raise IndexNotReady("nothing has been indexed yet")
    return ServingIndex(version)


@dataclass(frozen=True)
class ActiveIndex:
    """The active version as a lookup's one read of its revisions names it
    (lookup/revisions.py)."""

    pk: int
    collection: str
    # As the statement returns it: a row that takes the id and the collection's name of one
    # rolled back (SQLite's sequence is undone with it, as between tests) is another version.
    created_at: Any


# The last version a lookup served from, in this process. What a ServingIndex reads of it
# (collection, embedder, chunking) never changes once the version exists, and the key names
# the row (its id, its collection's name and when it was made), so a row made since under a
# gone one's id and name is read anew, never served with the other's embedder.
_serving: tuple[ActiveIndex, ServingIndex] | None = None
_serving_lock = threading.Lock()


def serving_index_of(active: ActiveIndex) -> ServingIndex:
    """The serving index `active` names, its row read once per process."""
    global _serving
    with _serving_lock:
        if _serving is not None and _serving[0] == active:
            return _serving[1]
    version = IndexVersion.objects.filter(pk=active.pk,
                                          collection_name=active.collection).first()
    if version is None:  # its row deleted since the revisions were read (bench_lookup's)
        raise IndexNotReady(f"index version {active.collection} no longer serves")
    serving = ServingIndex(version)
    with _serving_lock:
        _serving = (active, serving)
    return serving


def index_versions() -> QuerySet[IndexVersion]:
    return IndexVersion.objects.order_by("-created_at")
