"""The audit's periodic task: raw query text past its tenant's retention is erased
(kbplatform/tasks.py sends it with the recovery, every KB_RECOVERY_INTERVAL_SECONDS)."""

from __future__ import annotations

from celery import shared_task

from audit.services import raw_queries_erase


@shared_task
def raw_queries_erase_task() -> None:
    raw_queries_erase()
