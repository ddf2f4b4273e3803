"""`manage.py check --deploy`: Milvus answers, and what the serving index was built with."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError

from retrieval import milvus
from retrieval.index_versions import active_version, spec_difference


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
    difference = spec_difference(version)
    return [Warning(difference, id="kbplatform.W008")] if difference else []
