"""Redis canonical invocation (seed 000 §2): the full LookupResult under its tool call id.

The evidence guard reads it back: only evidence an agent really received as READY in this
invocation (or session) counts. Keys carry the tenant, so one tenant never reads another's.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError
from redis.exceptions import RedisError

from kbplatform.errors import ServiceUnavailable
from retrieval.types import EvidenceStatus, LookupResult

logger = logging.getLogger(__name__)

SESSION_LIMIT = 500  # tool calls remembered per session


P = ParamSpec("P")
R = TypeVar("R")


def _store_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """A down Redis (or DB cache) is a failed backend: 503, never a 500, and never evidence
    handed out that the guard could not confirm afterwards."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (RedisError, DatabaseError) as exc:
            logger.warning("canonical store: %s failed: %r", fn.__name__, exc)
            raise ServiceUnavailable("the canonical invocation store is unavailable") from exc

    return wrapper


def _key(tenant_id: int, kind: str, ident: str) -> str:
    return f"kb:{kind}:{tenant_id}:{ident}"


def canonical_record(result: LookupResult) -> dict[str, Any]:
    record = asdict(result)
    record["ready_document_ids"] = (
        [item.chunk.evidence_key for item in result.pack.items]
        if result.evidence_status == EvidenceStatus.READY else [])
    return record


@_store_errors
def canonical_store(*, tenant_id: int, result: LookupResult) -> None:
    ttl = settings.KB_CANONICAL_TTL_SECONDS
    record = canonical_record(result)
    cache.set(_key(tenant_id, "canonical", result.tool_call_id),
              json.dumps(record, ensure_ascii=False, default=str), ttl)
    if result.session_id:
        _session_append(tenant_id, result.session_id, ttl, {
            "tool_call_id": result.tool_call_id, "ready": record["ready_document_ids"]})


def _session_append(tenant_id: int, session_id: str, ttl: int, entry: dict[str, Any]) -> None:
    """Give the call its own slot of the session, without a read-modify-write of a list.

    Agents make parallel tool calls: a shared list read and written back by each of them
    loses calls. The slot number comes from an atomic counter (INCR on Redis) and is claimed
    with `add`, which is atomic on every cache (the DB cache's incr is not). The slot keeps
    what this call made READY, so a tool call id reused by another session (runs often
    number their calls) never lends that session's evidence to this one.
    """
    counter = _key(tenant_id, "session-n", session_id)
    for _ in range(32):
        cache.add(counter, 0, ttl)
        try:
            slot = cache.incr(counter)
        except ValueError:  # the counter expired between add and incr
            continue
        if cache.add(_slot_key(tenant_id, session_id, slot), entry, ttl):
            cache.touch(counter, ttl)
            return
    logger.error("canonical: no free slot for call %r of session %r",
                 entry["tool_call_id"], session_id)


def _slot_key(tenant_id: int, session_id: str, slot: int) -> str:
    return _key(tenant_id, "session-call", f"{session_id}:{slot}")


def _session_entries(tenant_id: int, session_id: str) -> list[dict[str, Any]]:
    last = int(cache.get(_key(tenant_id, "session-n", session_id)) or 0)
    keys = [_slot_key(tenant_id, session_id, n)
            for n in range(max(1, last - SESSION_LIMIT + 1), last + 1)]
    found = cache.get_many(keys)
    return [found[k] for k in keys if isinstance(found.get(k), dict)]


@_store_errors
def canonical_get(*, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None:
    raw = cache.get(_key(tenant_id, "canonical", tool_call_id))
    return json.loads(raw) if raw else None


@_store_errors
def session_tool_calls(*, tenant_id: int, session_id: str) -> list[str]:
    calls = (entry["tool_call_id"] for entry in _session_entries(tenant_id, session_id))
    return list(dict.fromkeys(calls))


@_store_errors
def ready_evidence(*, tenant_id: int, document_ids: Iterable[str], tool_call_id: str = "",
                   session_id: str = "") -> dict[str, bool]:
    """For each asked document id: was it READY evidence of the invocation or session?"""
    ready: set[str] = set()
    if tool_call_id:
        record = canonical_get(tenant_id=tenant_id, tool_call_id=tool_call_id)
        ready.update(record["ready_document_ids"] if record else ())
    else:
        for entry in _session_entries(tenant_id, session_id):
            ready.update(entry["ready"])
    return {document_id: document_id in ready for document_id in document_ids}
