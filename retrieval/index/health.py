"""Can this process serve lookups now? The database, the cache and Milvus, each asked once
with its own timeout. For load balancers, the demo's landing page and operators; the answer
names the parts only, never an address or an error text (it needs no key)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.cache import cache
from django.db import connection

from retrieval.index import milvus

logger = logging.getLogger(__name__)


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _cache() -> None:
    cache.set("kb:health", 1, 10)
    if cache.get("kb:health") != 1:
        raise RuntimeError("the cache did not keep a value")


CHECKS: dict[str, Callable[[], object]] = {
    "database": _database, "cache": _cache, "milvus": lambda: milvus.collections().names()}


def health_checks() -> dict[str, bool]:
    """{part: answers}; a failure is logged with its cause for the operators."""
    results = {}
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as exc:  # any failure of a part is "unavailable", whatever its type
            logger.warning("health: %s does not answer: %s: %s", name, type(exc).__name__, exc)
            results[name] = False
        else:
            results[name] = True
    return results
