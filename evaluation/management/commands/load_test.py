import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluation.loadtest import LoadTestError
from evaluation.loadtest.deployment import sigterm_as_interrupt
from evaluation.loadtest.run import load_test


class Command(BaseCommand):
    help = ("A bounded load test on 127.0.0.1: starts Milvus (2.5's engine), one indexing worker "
            "and gunicorn on free ports (on this DATABASE_URL and REDIS_URL), runs N agents "
            "looking up while documents are uploaded, toggled and deleted, and checks every "
            "answer. Fails on any out-of-scope or switched-off evidence and any 5xx.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agents", type=int, default=16, help="concurrent agents (16)")
        parser.add_argument("--seconds", type=float, default=120, help="run length (120)")
        parser.add_argument("--documents", type=int, default=40,
                            help="documents indexed before the run, kept around during it (40)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        agents, seconds, documents = options["agents"], options["seconds"], options["documents"]
        if agents < 1 or seconds < 1 or documents < 4:
            raise CommandError("--agents and --seconds must be at least 1, --documents at "
                               "least 4 (one per dataset)")
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
        latency, errors, leaks = row["latency_ms"], row["errors"], row["leaks"]
        answers = "  ".join(f"{k} {v}" for k, v in row["answers"].items())
        self.stdout.write(f"{row['agents']} agents x {row['seconds']:g} s, {row['documents']} "
                          f"documents, {row['web']}, {row['embedder']} embedder "
                          f"(setup {row['setup_s']} s)")
        self.stdout.write(f"  lookups    {row['lookups']} ({row['throughput_per_s']}/s)  "
                          f"{answers}  evidence checked {row['evidence_checked']}")
        self.stdout.write(f"  latency    p50 {latency['p50']} ms  p95 {latency['p95']} ms  "
                          f"max {latency['max']} ms")
        self.stdout.write(f"  errors     5xx {errors['http_5xx']} (UNAVAILABLE "
                          f"{errors['unavailable']})  4xx {errors['http_4xx']}  transport "
                          f"{errors['transport']}  probes {row['probes']} (not refused "
                          f"{errors['probe_not_refused']})")
        self.stdout.write(f"  leaks      out of scope {leaks['out_of_scope']}  deactivated "
                          f"{leaks['deactivated']}  deleted {leaks['deleted']}  (lookups that "
                          f"asked for a switched-off document: {row['asked_for_off']})")
        for example in row["leak_examples"]:
            self.stdout.write(f"             {example}")
        mutations = "  ".join(f"{k} {v}" for k, v in row["mutations"].items())
        jobs = "  ".join(f"{k} {v}" for k, v in row["indexing_jobs"].items())
        self.stdout.write(f"  mutations  {mutations}")
        self.stdout.write(f"  indexing   jobs {jobs or 'none'}  unsynced after drain "
                          f"{row['pending_after_drain']}")
