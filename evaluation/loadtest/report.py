"""The load test's numbers and its verdict."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from datasets.models import Job
from evaluation.benchmarks import Timing
from evaluation.loadtest.deployment import WEB_THREADS
from evaluation.loadtest.ledger import Findings, Observation


@dataclass
class LoadReport:
    agents: int
    seconds: float
    documents: int
    embedder: str
    setup_seconds: float
    elapsed: float
    observations: list[Observation]
    findings: Findings
    mutations: Counter[str]
    jobs: Counter[str]
    pending_after_drain: int
    crashes: list[str] = field(default_factory=list)
    logs: str = ""

    def as_dict(self) -> dict[str, Any]:
        lookups = [o for o in self.observations if not o.probe]
        answered = [o for o in lookups if o.status]
        latencies = [(o.received - o.sent) * 1000 for o in answered]
        timing = Timing.of(latencies)
        statuses = Counter(o.evidence_status for o in lookups if o.status in (200, 503))
        probes = [o for o in self.observations if o.probe]
        errors = {
            "http_5xx": sum(1 for o in lookups if o.status >= 500),
            "unavailable": sum(1 for o in lookups if o.status == 503
                               and o.evidence_status == "UNAVAILABLE"),
            "http_4xx": sum(1 for o in lookups if 400 <= o.status < 500),
            "transport": len(lookups) - len(answered),
            "probe_not_refused": sum(1 for o in probes if o.status != 400),
        }
        return {
            "agents": self.agents, "seconds": self.seconds, "documents": self.documents,
            "web": f"gunicorn 1 worker x {WEB_THREADS} threads", "embedder": self.embedder,
            "setup_s": round(self.setup_seconds, 1), "lookups": len(lookups),
            "throughput_per_s": round(len(lookups) / self.elapsed, 1) if self.elapsed else 0,
            "latency_ms": {"p50": timing.p50, "p95": timing.p95,
                           "max": round(max(latencies, default=0.0), 1)},
            "answers": dict(sorted(statuses.items())),
            "evidence_checked": sum(len(o.doc_ids) for o in lookups),
            "asked_for_off": self.findings.asked_for_off,
            "probes": len(probes), "errors": errors,
            "leaks": {"out_of_scope": len(self.findings.out_of_scope),
                      "deactivated": len(self.findings.deactivated),
                      "deleted": len(self.findings.deleted)},
            "leak_examples": (self.findings.out_of_scope + self.findings.deactivated
                              + self.findings.deleted)[:10],
            "mutations": dict(sorted(self.mutations.items())),
            "indexing_jobs": dict(sorted(self.jobs.items())),
            "pending_after_drain": self.pending_after_drain, "crashes": self.crashes,
            "logs": self.logs,
        }

    def failures(self) -> list[str]:
        report = self.as_dict()
        problems = [f"{n} {kind} leak(s)" for kind, n in report["leaks"].items() if n]
        problems += [f"{n} lookup(s) with {kind}" for kind, n in report["errors"].items()
                     if n and kind != "unavailable"]
        problems += [f"mutator: {n} x {what}" for what, n in self.mutations.items()
                     if "failed" in what or what in ("http_5xx", "transport")]
        if self.jobs.get(Job.Status.FAILED):
            problems.append(f"{self.jobs[Job.Status.FAILED]} indexing job(s) failed")
        if self.pending_after_drain:
            problems.append(f"{self.pending_after_drain} document(s) never synced")
        return problems + [f"load test thread crashed: {crash}" for crash in self.crashes]
