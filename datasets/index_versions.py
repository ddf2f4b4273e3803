"""Index versions: the model, dimension, splitter and collection change together (seed 003 §1)."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets.models import IndexVersion
from retrieval.analysis import VERSION as ANALYSIS_VERSION
from retrieval.embedders import Embedder, get_embedder
from retrieval.store import MilvusHybridKnowledgeStore, get_store


class IndexMismatch(Exception):
    """The configured embedder or splitter differs from the serving index: rebuild first."""


SPLITTER = f"markdown-heading-v1/{ANALYSIS_VERSION}"


def wanted_spec(embedder: Embedder) -> dict[str, object]:
    return {"embedder": embedder.name, "dimension": embedder.dimension,
            "chunk_size": settings.KB_CHUNK_SIZE, "chunk_overlap": settings.KB_CHUNK_OVERLAP,
            "splitter": SPLITTER}


def matches(version: IndexVersion, spec: dict[str, object]) -> bool:
    return all(getattr(version, key) == value for key, value in spec.items())


def index_version_create(*, store: MilvusHybridKnowledgeStore, embedder: Embedder,
                         status: str = IndexVersion.Status.BUILDING) -> IndexVersion:
    """A new collection `{alias}_v{n}` for the configured embedder and splitter."""
    spec = wanted_spec(embedder)
    with transaction.atomic():
        version = IndexVersion.objects.create(collection_name=f"pending-{timezone.now():%s%f}",
                                              status=status, **spec)
        version.collection_name = f"{store.alias}_v{version.pk}"
        version.save(update_fields=["collection_name"])
    store.create_collection(version.collection_name, embedder.dimension)
    return version


def index_version_activate(*, version: IndexVersion, store: MilvusHybridKnowledgeStore) -> None:
    store.load(version.collection_name)
    store.point_alias(version.collection_name)
    with transaction.atomic():
        IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).exclude(
            pk=version.pk).update(status=IndexVersion.Status.RETIRED)
        version.status = IndexVersion.Status.ACTIVE
        version.activated_at = timezone.now()
        version.save(update_fields=["status", "activated_at"])


def active_index_version(*, create: bool = True) -> IndexVersion:
    """The serving index; the first call on an empty installation creates it."""
    version = IndexVersion.objects.filter(status=IndexVersion.Status.ACTIVE).first()
    embedder = get_embedder()
    store = get_store()
    if version is None:
        if not create:
            raise IndexMismatch("there is no active index yet: import a document first")
        version = index_version_create(store=store, embedder=embedder)
        index_version_activate(version=version, store=store)
        return version
    spec = wanted_spec(embedder)
    if not matches(version, spec):
        raise IndexMismatch(
            f"the serving index {version.collection_name} was built with {version.embedder} "
            f"({version.dimension}d, chunks {version.chunk_size}/{version.chunk_overlap}, "
            f"{version.splitter}) but the configuration asks for {spec['embedder']} "
            f"({spec['dimension']}d, chunks {spec['chunk_size']}/{spec['chunk_overlap']}, "
            f"{spec['splitter']}): run "
            "`python manage.py rebuild_hybrid_knowledge --confirm REBUILD`"
        )
    return version
