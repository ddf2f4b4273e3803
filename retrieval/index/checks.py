"""`manage.py check --deploy`: Milvus answers, what the serving index was built with, and the
keys the RagConfigs' chat models name."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError

from kbplatform.processes import served_uri
from retrieval.index import milvus
from retrieval.index.milvus.collections import has_partitions
from retrieval.index.milvus.connection import is_local
from retrieval.index.milvus.expressions import DATE_FIELD, READERS_FIELD, TEXT_FIELDS
from retrieval.index.versions import active_version, spec_difference

FILTER_FIELDS = frozenset((*TEXT_FIELDS, DATE_FIELD))
# How many chunks the embedded default (a Milvus Lite file on one machine) was measured usable
# at (docs/operations.md, "How far the embedded default goes"); past it W020 says to move up.
EMBEDDED_CHUNKS = 1_000_000


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
    collections = milvus.collections()
    try:
        layout = collections.layout(version.collection_name)
        # A server without partitions searches every collection whole: nothing to rebuild.
        before_partitions = not layout.tenant_partitions and has_partitions(
            collections.connection, version.collection_name)
    except milvus.VectorStoreUnavailable as exc:
        return [*found, Error(f"cannot describe the serving collection: {exc}",
                              id="kbplatform.E007")]
    missing = FILTER_FIELDS - layout.fields
    if missing:
        found.append(Warning(
            f"the serving index {version.collection_name} was built before chunks carried "
            f"{', '.join(sorted(missing))}: lookups whose RagConfig.metadata_filters or "
            "whose call's filters use them answer UNAVAILABLE until a rebuild",
            id="kbplatform.W011",
            hint="python manage.py rebuild_hybrid_knowledge --confirm REBUILD"))
    if _embedded():
        chunks = collections.count(version.collection_name)
        if chunks > EMBEDDED_CHUNKS:
            found.append(Warning(
                f"the serving index holds {chunks:,} chunks in the embedded default's Milvus "
                f"Lite file, past the {EMBEDDED_CHUNKS:,} it was measured usable at "
                "(docs/operations.md, \"How far the embedded default goes\")",
                id="kbplatform.W020",
                hint="move to a Milvus server: set MILVUS_URI to it (and MILVUS_TOKEN), then "
                     "python manage.py rebuild_hybrid_knowledge --confirm REBUILD"))
    if before_partitions:
        found.append(Warning(
            f"the serving index {version.collection_name} was built before tenants had "
            "partitions: every lookup filters every tenant's rows, so its cost grows with "
            "theirs; a rebuild puts each tenant's rows in its own partition",
            id="kbplatform.W015",
            hint="python manage.py rebuild_hybrid_knowledge --confirm REBUILD"))
    if READERS_FIELD not in layout.fields:
        found.append(Warning(
            f"the serving index {version.collection_name} was built before chunks named "
            "their documents' readers: every lookup leaves out the documents restricted to "
            "others by their ids, a cost that grows with their number; a rebuild writes the "
            "readers into the rows",
            id="kbplatform.W021",
            hint="python manage.py rebuild_hybrid_knowledge --confirm REBUILD"))
    return found


def _embedded() -> bool:
    """Whether Milvus is the embedded default's file: opened here, or served by the demo or
    `serve_milvus` (which publish it)."""
    uri = settings.MILVUS_URI
    return is_local(uri) or uri == served_uri(settings.VAR_DIR / "milvus.db")


@register(Tags.database, deploy=True)
def check_chat_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from retrieval.ragconfig.models import RagConfig

    try:
        named = list(RagConfig.objects.exclude(chat_api_key_env="").select_related(
            "tenant", "dataset"))
    except DatabaseError:  # not migrated yet: check_services says what matters then
        return []
    unset = sorted(f"{config.scope_label} ({config.chat_api_key_env})" for config in named
                   if config.chat_api_key_env not in os.environ)
    if not unset:
        return []
    return [Warning(f"RagConfigs name chat-model keys this process does not have: "
                    f"{', '.join(unset)}; their LLM stages fail (then the fallback, or "
                    "UNAVAILABLE)", id="kbplatform.W012",
                    hint="set the variables in the environment of the web and worker "
                         "processes")]
