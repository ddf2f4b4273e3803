"""`manage.py bench_admin_pages [--rows 100000] [--rounds 5] [--keep] [--json]`."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from evaluation import admin_bench
from kbplatform.progress import ProgressBar

TARGET_MS = 300.0


class Command(BaseCommand):
    help = ("Time the admin's pages over a large audit: adds a tenant of its own with N "
            "audited calls (default 100,000), requests each page in this process, prints "
            "p50/max and queries per page, then removes what it added (unless --keep). "
            "It writes to the configured database: run it on a copy or a fresh one.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--rows", type=int, default=100_000,
                            help="audited calls of the bench tenant (default 100000)")
        parser.add_argument("--rounds", type=int, default=5,
                            help="requests per page after a warm-up (default 5)")
        parser.add_argument("--keep", action="store_true",
                            help="keep the bench tenant's rows for the next run")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, rows: int, rounds: int, keep: bool, **options: Any) -> None:
        if rows < 1 or rounds < 1:
            raise CommandError("--rows and --rounds must be at least 1")
        bar = ProgressBar(self.stderr.write, tty=self.stderr.isatty(), total=rows,
                          unit="calls")
        try:
            tenant = admin_bench.seed(rows, progress=lambda done, _: bar.update(done))
            timings = admin_bench.measure(tenant, rounds=rounds)
        finally:
            if not keep:
                admin_bench.cleanup()
        if options["json"]:
            self.stdout.write(json.dumps({"rows": rows, "rounds": rounds, "target_ms": TARGET_MS,
                                          "pages": [asdict(t) for t in timings]}))
            return
        self.stdout.write(f"{rows} audited calls, {rounds} requests per page "
                          f"(p50 / max, server side):")
        for t in timings:
            mark = "" if t.max_ms < TARGET_MS else f"  over {TARGET_MS:.0f} ms"
            self.stdout.write(f"  {t.page:<32} {t.p50_ms:>7.1f} / {t.max_ms:>7.1f} ms  "
                              f"{t.queries:>3} queries{mark}")
