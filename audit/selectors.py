"""Reads of the audit."""

from __future__ import annotations

from audit.models import ToolInvocation

TRACE_LIMIT = 1000  # a session longer than this shows its latest calls


def session_trace(*, tenant_id: int, session_id: str) -> list[ToolInvocation]:
    """The tenant's invocations of one session, oldest first; [] for another tenant's session."""
    latest = (ToolInvocation.objects.filter(tenant_id=tenant_id, session_id=session_id)
              .order_by("-created_at", "-id")[:TRACE_LIMIT])
    return list(reversed(latest))
