"""The L0 index, kept in sync with the documents in every web and worker process.

Each process caches one L0Index per (tenant, datasets) with a fingerprint of the documents
(count and last change). A lookup reads the fingerprint (one small query) and rebuilds the
index when another process changed a document: no invalidation messages to lose.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from django.db.models import Count, Max, QuerySet

from datasets.models import Document
from retrieval.transform import L0Document, L0Index

_cache: dict[tuple[int, tuple[int, ...]], tuple[tuple[object, ...], L0Index]] = {}
_lock = threading.Lock()


def _documents(tenant_id: int, dataset_ids: Sequence[int]) -> QuerySet[Document]:
    return Document.objects.filter(dataset__tenant_id=tenant_id, dataset_id__in=dataset_ids)


def l0_index_for(*, tenant_id: int, dataset_ids: Sequence[int]) -> L0Index:
    key = (tenant_id, tuple(sorted(dataset_ids)))
    stats = _documents(tenant_id, key[1]).aggregate(n=Count("pk"), changed=Max("updated_at"))
    fingerprint = (stats["n"], stats["changed"])
    with _lock:
        cached = _cache.get(key)
        if cached and cached[0] == fingerprint:
            return cached[1]
    rows = (_documents(tenant_id, key[1]).filter(deleted=False, activated=True)
            .values_list("doc_id", "title", "domain", "keywords", "category"))
    index = L0Index(L0Document(doc_id=str(doc_id), title=title, domain=domain,
                               keywords=tuple(keywords or ()), category=category)
                    for doc_id, title, domain, keywords, category in rows)
    with _lock:
        _cache[key] = (fingerprint, index)
    return index
