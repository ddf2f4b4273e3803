"""Retention of the audit: `manage.py prune_tool_invocations --days N [--batch-size 1000]`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.canonical import canonical_prune
from audit.services import raw_queries_erase, tool_invocations_prune


class Command(BaseCommand):
    help = ("Delete tool invocation audit rows older than N days, in batches, expired "
            "canonical invocations (the evidence guard's records), and raw query text past "
            "its tenant's retention (at most KB_AUDIT_RAW_QUERY_RETENTION_DAYS).")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--days", type=int, required=True,
                            help="keep this many days of audit (at least 1)")
        parser.add_argument("--batch-size", type=int, default=1000,
                            help="rows deleted per transaction (default 1000)")

    def handle(self, *args: Any, days: int, batch_size: int, **options: Any) -> None:
        # --days 0 would empty the table: far more likely a typo than a retention policy.
        if days < 1:
            raise CommandError("--days must be at least 1")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        deleted = tool_invocations_prune(older_than_days=days, batch_size=batch_size)
        self.stdout.write(f"Deleted {deleted} tool invocation(s) older than {days} day(s).")
        expired = canonical_prune()
        self.stdout.write(f"Deleted {expired} expired canonical invocation(s) and replay(s).")
        erased = raw_queries_erase(batch_size=batch_size)
        self.stdout.write(f"Erased the raw query of {erased} call(s) past their tenant's "
                          "retention.")
