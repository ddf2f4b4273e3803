"""Replay: exactly the evidence a past call handed out, byte for byte, for as long as its
canonical record is kept (audit/canonical.py keeps it beside the record), whatever the
documents and the index became since.

Scoped like the guard: a call of another tenant, or of datasets the key may not read, is
the same 404 as one that never was; a piece whose document may no longer be served (deleted,
switched off, out of the key's datasets, restricted to others than the person the replay is
for) is withheld and counted, never replayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from audit.canonical import replayed
from datasets.documents.selectors import document_of, served_revisions
from datasets.tenancy.permissions import Access
from kbplatform.errors import NotFound

# What a piece kept before evidence said how current it is reads as: nothing known.
KEPT_BEFORE: dict[str, Any] = {"updated_at": None, "reviewed_at": None, "valid_until": None,
                               "owner": "", "stale": False}


@dataclass(frozen=True)
class Replayed:
    """The `EvidenceReplay` contract."""

    tool_call_id: str
    served_at: str  # ISO 8601
    evidence_status: str
    config_version: int | None
    index_version: int | None  # the index version the call searched
    # Each piece as served, with `revision` (the content hash of the document version it was
    # read from) and `current` (the document is still at that version).
    evidence: tuple[dict[str, Any], ...]
    withheld: int  # pieces whose document may no longer be served to this key

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "evidence": list(self.evidence)}


def replay(*, tenant_id: int, readable: Sequence[int], access: Access,
           tool_call_id: str) -> Replayed:
    """The call's replay; NotFound when this key may not see it (unknown, expired, another
    tenant's, or of datasets outside the key), in the same words."""
    row = replayed(tenant_id=tenant_id, tool_call_id=tool_call_id)
    items = list(row.evidence) if row else []
    datasets = {*(row.dataset_ids if row else ()), *(item["dataset_id"] for item in items)}
    if row is None or not datasets & set(readable):
        raise NotFound(f"no call {tool_call_id!r} this key may replay")
    ids = {item["document_id"] for item in items} | {
        copy["document_id"] for item in items for copy in item["also_in"]}
    docs = {evidence_id: document_of(evidence_id) for evidence_id in ids}
    live = served_revisions(tenant_id=tenant_id, dataset_ids=readable,
                            doc_ids={d for d in docs.values() if d is not None}, access=access)
    # Neither a piece nor a copy it names (another dataset's, maybe) this key may not read.
    shown = [{**KEPT_BEFORE, **{k: v for k, v in item.items() if k != "dataset_id"},
              "also_in": [c for c in item["also_in"] if docs[c["document_id"]] in live],
              "current": live[doc] == item["revision"]}
             for item in items if (doc := docs[item["document_id"]]) in live]
    return Replayed(tool_call_id=row.tool_call_id, served_at=row.created_at.isoformat(),
                    evidence_status=row.evidence_status, config_version=row.config_version,
                    index_version=row.index_version, evidence=tuple(shown),
                    withheld=len(items) - len(shown))
