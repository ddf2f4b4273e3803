"""`manage.py check --deploy`: Milvus answers, and what the serving index was built with."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError

from retrieval import milvus
from retrieval.index_versions import active_version, spec_difference
from retrieval.milvus.expressions import DATE_FIELD, TEXT_FIELDS

FILTER_FIELDS = frozenset((*TEXT_FIELDS, DATE_FIELD))


@register(Tags.database, deploy=True)
def check_services(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        milvus.collections().names()
    except milvus.VectorStoreUnavailable as exc:
        return [Error(f"Milvus at {settings.MILVUS_URI} does not answer: {exc}",
                      id="kbplatform.E007")]
    try:
        version = active_version()
    except DatabaseError as exc:  # the database may not be migrated yet
        return [Error(f"cannot read the index version: {exc}", id="kbplatform.E009")]
    if version is None:
        return []
    found: list[CheckMessage] = []
    difference = spec_difference(version)
    if difference:
        found.append(Warning(difference, id="kbplatform.W008"))
    try:
        missing = FILTER_FIELDS - milvus.collections().fields(version.collection_name)
    except milvus.VectorStoreUnavailable as exc:
        return [*found, Error(f"cannot describe the serving collection: {exc}",
                              id="kbplatform.E007")]
    if missing:
        found.append(Warning(
            f"the serving index {version.collection_name} was built before chunks carried "
            f"{', '.join(sorted(missing))}: lookups whose RagConfig.metadata_filters use them "
            "answer UNAVAILABLE until a rebuild", id="kbplatform.W011",
            hint="python manage.py rebuild_hybrid_knowledge --confirm REBUILD"))
    return found
