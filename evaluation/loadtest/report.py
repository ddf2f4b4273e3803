"""The load test's numbers and its verdict."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets.models import Job
from evaluation.benchmarks import percentile
from evaluation.loadtest.ledger import Findings, Observation

PROC_STAT = Path("/proc/stat")


class CpuClock:
    """The whole machine's CPU from now on (Linux's /proc/stat): how busy all its cores
    were, in per cent of them; None where there is no /proc/stat."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            first = PROC_STAT.read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        # user nice system idle iowait irq softirq steal (guest time is inside user and
        # nice): idle, waiting for a disk and taken by a hypervisor count as not busy.
        ticks = [int(value) for value in first[1:9]]
        idle = ticks[3] + sum(ticks[4:5]) + sum(ticks[7:8])
        return sum(ticks), idle

    def busy_percent(self) -> float | None:
        end = self._read()
        if self.start is None or end is None or end[0] == self.start[0]:
            return None
        total, idle = end[0] - self.start[0], end[1] - self.start[1]
        return round(100 * (total - idle) / total, 1)


@dataclass(frozen=True)
class Phase:
    """One agent count of the run."""

    agents: int
    elapsed: float
    cpu_busy_percent: float | None


def errors_of(calls: list[Observation]) -> dict[str, int]:
    """Errors by kind; a probe's 400 is its right answer, counted apart."""
    answered = [o for o in calls if not o.probe]
    probes = [o for o in calls if o.probe]
    return {
        "http_5xx": sum(1 for o in answered if o.status >= 500),
        "unavailable": sum(1 for o in answered if o.status == 503
                           and o.evidence_status == "UNAVAILABLE"),
        "http_4xx": sum(1 for o in answered if 400 <= o.status < 500),
        "transport": sum(1 for o in answered if not o.status),
        "probe_not_refused": sum(1 for o in probes if o.status != 400),
    }


def latency_of(calls: list[Observation], elapsed: float) -> dict[str, Any]:
    """Calls, throughput and latency of the answered ones (probes excluded)."""
    samples = [(o.received - o.sent) * 1000 for o in calls if o.status and not o.probe]
    figures = {f"p{q}": round(percentile(samples, q / 100), 1) for q in (50, 95, 99)}
    return {"calls": len(calls), "per_s": round(len(calls) / elapsed, 1) if elapsed else 0,
            **figures, "max": round(max(samples, default=0.0), 1)}


@dataclass
class LoadReport:
    stack: str
    documents: int
    embedder: str
    setup_seconds: float
    phases: list[Phase]
    observations: list[Observation]
    findings: Findings
    mutations: Counter[str]
    jobs: Counter[str]
    pending_after_drain: int
    crashes: list[str] = field(default_factory=list)
    logs: str = ""

    def as_dict(self) -> dict[str, Any]:
        lookups = [o for o in self.observations if o.tool == "lookup_knowledge"]
        with_evidence = [o for o in self.observations if o.tool != "evidence_guard"
                         and not o.probe]
        statuses = Counter(o.evidence_status for o in with_evidence if o.status in (200, 503))
        phases = []
        for number, phase in enumerate(self.phases):
            calls = [o for o in self.observations if o.phase == number]
            tools = sorted({o.tool for o in calls})
            phases.append({
                "agents": phase.agents, "seconds": round(phase.elapsed, 1),
                "cpu_busy_percent": phase.cpu_busy_percent,
                "tools": {tool: latency_of([o for o in calls if o.tool == tool],
                                           phase.elapsed) for tool in tools},
                "errors": errors_of(calls)})
        return {
            "stack": self.stack, "agents": [p.agents for p in self.phases],
            "cores": os.cpu_count(), "documents": self.documents, "embedder": self.embedder,
            "setup_s": round(self.setup_seconds, 1), "phases": phases,
            "lookups": len([o for o in lookups if not o.probe]),
            "answers": dict(sorted(statuses.items())),
            "evidence_checked": sum(len(o.doc_ids) for o in with_evidence),
            "asked_for_off": self.findings.asked_for_off,
            "probes": sum(1 for o in lookups if o.probe),
            "errors": errors_of(self.observations),
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
        problems += [f"{n} call(s) with {kind}" for kind, n in report["errors"].items()
                     if n and kind != "unavailable"]
        problems += [f"mutator: {n} x {what}" for what, n in self.mutations.items()
                     if "failed" in what or what in ("http_5xx", "transport")]
        if self.jobs.get(Job.Status.FAILED):
            problems.append(f"{self.jobs[Job.Status.FAILED]} indexing job(s) failed")
        if self.pending_after_drain:
            problems.append(f"{self.pending_after_drain} document(s) never synced")
        return problems + [f"load test thread crashed: {crash}" for crash in self.crashes]
