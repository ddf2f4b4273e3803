"""Can this process serve lookups now? The database, the cache and Milvus, each asked once
with its own timeout. For load balancers, the demo's landing page and operators; the answer
names the parts only, never an address or an error text (it needs no key).

Beside them, how far the local model is and whether crossed-language questions are bridged:
a lookup never needs the model (without it, it goes on untranslated), so neither its state nor
its absence makes the answer a 503."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from kbplatform import outbound
from kbplatform.local_model import published
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


# off: this process uses no local model; building, assembling, loading: the demo prepares it;
# ready: it answers; busy: it took the connection but answers another request (one at a time);
# down: it does not answer; failed: the demo could not start it (the detail says which step).
LOCAL_MODEL_STATES = ("off", "building", "assembling", "loading", "ready", "busy", "down",
                      "failed")
# Whether a question in one language can find documents in the other: through the deployment's
# chat model, through the local model, or not (a tenant's own chat model bridges its lookups).
CROSSED_LANGUAGES = ("chat_model", "local_model", "not_bridged")
PROBE_SECONDS = 1.0


@dataclass(frozen=True)
class LocalModelHealth:
    state: str
    detail: str


def local_model_health() -> LocalModelHealth:
    """The local model of KB_LOCAL_MODEL_URL, asked once (through the outbound policy) and,
    when it does not answer, as the demo that prepares it says."""
    url = settings.KB_LOCAL_MODEL_URL
    if not url:
        return LocalModelHealth("off", "KB_LOCAL_MODEL=false" if not settings.KB_LOCAL_MODEL
                                else "no server runs it for this process "
                                     "(KB_LOCAL_MODEL_URL is empty)")
    try:
        with outbound.deadline(PROBE_SECONDS):
            answer = outbound.client().get(f"{url.rstrip('/')}/models", timeout=PROBE_SECONDS)
    except httpx2.ReadTimeout:
        return LocalModelHealth("busy", "it answers another request")
    except httpx2.HTTPError as exc:
        logger.warning("health: the local model does not answer: %s: %s",
                       type(exc).__name__, exc)
        status = published(settings.VAR_DIR)
        if status is not None and status.url == url and status.state != "ready":
            return LocalModelHealth(status.state, status.detail)
        return LocalModelHealth("down", "it does not answer")
    if answer.status_code != 200:
        return LocalModelHealth("down", f"it answers HTTP {answer.status_code}")
    return LocalModelHealth("ready", "it answers")


def crossed_languages(local_model: LocalModelHealth) -> str:
    if settings.KB_CHAT_BASE_URL:
        return "chat_model"
    return "local_model" if local_model.state in ("ready", "busy") else "not_bridged"
