"""Redis canonical invocation (seed 000 §2): the full LookupResult under its tool call id.

The evidence guard reads it back: only evidence an agent really received as READY in this
invocation (or session) counts. Keys carry the tenant, so one tenant never reads another's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.cache import cache

from retrieval.types import EvidenceStatus, LookupResult

SESSION_LIMIT = 500  # tool calls remembered per session


def _key(tenant_id: int, kind: str, ident: str) -> str:
    return f"kb:{kind}:{tenant_id}:{ident}"


def canonical_record(result: LookupResult) -> dict[str, Any]:
    record = asdict(result)
    record["ready_document_ids"] = (
        [item.chunk.evidence_key for item in result.pack.items]
        if result.evidence_status == EvidenceStatus.READY else [])
    return record


def canonical_store(*, tenant_id: int, result: LookupResult) -> None:
    ttl = settings.KB_CANONICAL_TTL_SECONDS
    cache.set(_key(tenant_id, "canonical", result.tool_call_id),
              json.dumps(canonical_record(result), ensure_ascii=False, default=str), ttl)
    if result.session_id:
        session_key = _key(tenant_id, "session", result.session_id)
        calls = [c for c in cache.get(session_key, []) if c != result.tool_call_id]
        cache.set(session_key, [*calls, result.tool_call_id][-SESSION_LIMIT:], ttl)


def canonical_get(*, tenant_id: int, tool_call_id: str) -> dict[str, Any] | None:
    raw = cache.get(_key(tenant_id, "canonical", tool_call_id))
    return json.loads(raw) if raw else None


def session_tool_calls(*, tenant_id: int, session_id: str) -> list[str]:
    return list(cache.get(_key(tenant_id, "session", session_id), []))


def ready_evidence(*, tenant_id: int, document_ids: Iterable[str], tool_call_id: str = "",
                   session_id: str = "") -> dict[str, bool]:
    """For each asked document id: was it READY evidence of the invocation or session?"""
    calls = [tool_call_id] if tool_call_id else session_tool_calls(tenant_id=tenant_id,
                                                                   session_id=session_id)
    ready: set[str] = set()
    for call in calls:
        record = canonical_get(tenant_id=tenant_id, tool_call_id=call)
        if record:
            ready.update(record["ready_document_ids"])
    return {document_id: document_id in ready for document_id in document_ids}
