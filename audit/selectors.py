"""Reads of the audit."""

from __future__ import annotations

from collections.abc import Collection

from audit.models import ToolInvocation

TRACE_LIMIT = 1000  # a session longer than this shows its latest calls


def session_trace(*, tenant_id: int, session_id: str,
                  dataset_ids: Collection[int] | None = None,
                  api_key_id: int | None = None) -> list[ToolInvocation]:
    """The tenant's invocations of one session, oldest first; [] for another tenant's session.

    With `dataset_ids` (a dataset-scoped key) only calls that searched within those datasets,
    or that the key `api_key_id` made itself, are shown.
    """
    latest = (ToolInvocation.objects.filter(tenant_id=tenant_id, session_id=session_id)
              .order_by("-created_at", "-id")[:TRACE_LIMIT])
    rows = list(reversed(latest))
    if dataset_ids is None:
        return rows
    allowed = set(dataset_ids)
    return [row for row in rows if row.api_key_id == api_key_id
            or set(_searched(row)) <= allowed and _searched(row)]


def _searched(row: ToolInvocation) -> list[int]:
    details = (row.details or {}).get("retrievalDetails") or {}
    return [int(d) for d in (details.get("filters") or {}).get("datasets") or []]
