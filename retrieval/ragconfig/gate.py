"""The port of the regression gate on config changes: which configs a gate covers, and how it
checks a held change. The gate itself measures question sets, which is evaluation's (the floor
above); evaluation registers its gate when Django starts (evaluation/apps.py), so this floor
holds a change back without importing the floor that judges it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datasets.models import Job
    from retrieval.ragconfig.models import RagConfigDraft


class ConfigGate(Protocol):
    def covers(self, *, tenant_id: int, dataset_id: int | None) -> bool:
        """Whether a change of the config of (tenant, dataset) must pass the gate first."""

    def check(self, draft: RagConfigDraft) -> Job:
        """Queue the check of `draft` as a job, once the current transaction commits; the
        check ends with ragconfig/drafts.py `rag_config_draft_decide`."""


_gate: list[ConfigGate] = []


def gate_register(gate: ConfigGate) -> None:
    """The gate every config change asks (one; a second registration replaces the first)."""
    _gate[:] = [gate]


def registered_gate() -> ConfigGate | None:
    return _gate[0] if _gate else None
