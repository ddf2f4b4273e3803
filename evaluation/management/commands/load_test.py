import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluation.benchmarks import sigterm_as_interrupt
from evaluation.loadtest import LoadTestError
from evaluation.loadtest.run import load_test

# Each agent is a thread of this process making calls back to back.
MAX_AGENTS = 256


class Command(BaseCommand):
    # What it runs is its own deployment (a Milvus, a broker, a worker and a web server of its
    # own, wired by deployment.py), not this process's MILVUS_URI and broker, which `check`
    # is about (E005 would refuse a MariaDB run beside a Milvus Lite file).
    requires_system_checks: list[str] = []
    help = ("A bounded load test on 127.0.0.1: starts Milvus (2.5's engine), one indexing worker "
            "and gunicorn on free ports (on this DATABASE_URL: SQLite runs the demo's stack, "
            "MariaDB production's), runs N agents looking up, answering and checking what "
            "they cite while documents are uploaded, toggled and deleted, for each N in turn, "
            "and checks every answer. Fails on any out-of-scope or switched-off evidence and "
            "any 5xx.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agents", default="16",
                            help="concurrent agents, or counts run in turn: 1,4,16,64 (16)")
        parser.add_argument("--seconds", type=float, default=120,
                            help="run length of each agent count (120)")
        parser.add_argument("--documents", type=int, default=40,
                            help="documents indexed before the run, kept around during it (40)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        seconds, documents = options["seconds"], options["documents"]
        try:
            agents = [int(n) for n in str(options["agents"]).split(",")]
        except ValueError:
            agents = []
        if not agents or min(agents) < 1 or max(agents) > MAX_AGENTS or seconds < 1 \
                or documents < 4:
            raise CommandError(f"--agents takes counts from 1 to {MAX_AGENTS} (16, or "
                               "1,4,16,64), --seconds at least 1, --documents at least 4 (one "
                               "per dataset)")
        try:
            with sigterm_as_interrupt():
                report = load_test(agents=agents, seconds=seconds, documents=documents,
                                   progress=lambda line: self.stderr.write(f"[load] {line}"))
        except LoadTestError as exc:
            raise CommandError(str(exc)) from exc
        except KeyboardInterrupt:
            raise CommandError("interrupted: the services were stopped and the load test's "
                               "tenants removed") from None
        row = report.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(row))
        else:
            self.write_text(row)
        failures = report.failures()
        if failures:
            raise CommandError("; ".join(failures) + (f" (logs: {row['logs']})"
                                                       if row["logs"] else ""))

    def write_text(self, row: dict[str, Any]) -> None:
        errors, leaks = row["errors"], row["leaks"]
        answers = "  ".join(f"{k} {v}" for k, v in row["answers"].items())
        self.stdout.write(f"{row['stack']}; {row['documents']} documents, {row['embedder']} "
                          f"embedder, {row['cores']} cores (setup {row['setup_s']} s)")
        self.stdout.write(f"{'agents':>6} {'tool':<17} {'calls':>6} {'per s':>6} "
                          f"{'p50 ms':>7} {'p95':>7} {'p99':>7} {'max':>7} {'CPU %':>6}")
        for phase in row["phases"]:
            for number, (tool, t) in enumerate(phase["tools"].items()):
                cpu = phase["cpu_busy_percent"] if number == 0 else ""
                self.stdout.write(
                    f"{phase['agents'] if number == 0 else '':>6} {tool:<17} {t['calls']:>6} "
                    f"{t['per_s']:>6} {t['p50']:>7} {t['p95']:>7} {t['p99']:>7} "
                    f"{t['max']:>7} {cpu if cpu is not None else '-':>6}")
        self.stdout.write(f"  answers    {answers}  evidence checked {row['evidence_checked']}")
        self.stdout.write(f"  errors     5xx {errors['http_5xx']} (UNAVAILABLE "
                          f"{errors['unavailable']})  4xx {errors['http_4xx']}  transport "
                          f"{errors['transport']}  probes {row['probes']} (not refused "
                          f"{errors['probe_not_refused']})")
        self.stdout.write(f"  leaks      out of scope {leaks['out_of_scope']}  deactivated "
                          f"{leaks['deactivated']}  deleted {leaks['deleted']}  (calls that "
                          f"asked for a switched-off document: {row['asked_for_off']})")
        for example in row["leak_examples"]:
            self.stdout.write(f"             {example}")
        mutations = "  ".join(f"{k} {v}" for k, v in row["mutations"].items())
        jobs = "  ".join(f"{k} {v}" for k, v in row["indexing_jobs"].items())
        self.stdout.write(f"  mutations  {mutations}")
        self.stdout.write(f"  indexing   jobs {jobs or 'none'}  unsynced after drain "
                          f"{row['pending_after_drain']}")
