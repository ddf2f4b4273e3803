"""The run: agents looking up while a mutator switches documents, then the checks."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from datasets.documents.evidence import EvidenceKey
from datasets.models import Job
from evaluation.benchmarks import synthetic_text
from evaluation.loadtest.client import ANSWER, GUARD, LOOKUP, TOOL_OF, Answer, Http
from evaluation.loadtest.deployment import Progress, deployment, described_stack
from evaluation.loadtest.fleet import Fleet, drain, purge, setup, upload, warm_up
from evaluation.loadtest.ledger import Ledger, Observation, ToolKey, check
from evaluation.loadtest.report import CpuClock, LoadReport, Phase


def observe(key: ToolKey, requested: tuple[int, ...], probe: bool, answer: Answer, path: str,
            phase: int, asked: tuple[str, ...] = ()) -> Observation:
    body = answer.body if isinstance(answer.body, dict) else {}
    # What the answer vouches for: the evidence served, or the ids the guard confirmed.
    served = [str(item["document_id"]) for item in body.get("evidence") or []] \
        + [str(key) for key in body.get("ready") or []]
    return Observation(key=key, requested=requested, probe=probe, status=answer.status,
                       asked=asked, tool=TOOL_OF[path], phase=phase,
                       evidence_status=str(body.get("evidence_status", "")),
                       doc_ids=tuple(_doc_of(document_id) for document_id in served),
                       sent=answer.sent, received=answer.received)


def _doc_of(document_id: str) -> str:
    # A malformed id stays whole: the check reports it as a document of no one.
    key = EvidenceKey.parse(document_id)
    return key.doc_id if key else document_id


def agent(number: int, phase: int, http: Http, fleet: Fleet, ledger: Ledger,
          stop: threading.Event, out: list[Observation]) -> None:
    """Calls back to back with one key, as an agent makes them: a lookup (or, one time in
    five, an answer built on one) whose query carries the shared vocabulary and the marker
    words of documents of every tenant and dataset, sometimes narrowed, sometimes probing a
    dataset outside the key's scope; half the calls with evidence are followed by the
    guard's check of the ids the agent would cite."""
    rng = random.Random(f"{number}-{time.time_ns()}")
    key = fleet.tool_keys[number % len(fleet.tool_keys)]
    foreign = [o.dataset for o in fleet.datasets if o.dataset not in key.datasets]
    while not stop.is_set():
        picked = ledger.pick(rng, rng.randint(1, 3))
        query = " ".join([synthetic_text(rng, 4), *(word for _, word in picked)])
        roll, probe = rng.random(), False
        requested: tuple[int, ...] = ()
        if roll < 0.05:
            requested, probe = (rng.choice(foreign),), True
        elif roll < 0.5:
            requested = tuple(sorted(rng.sample(key.datasets, rng.randint(1, len(key.datasets)))))
        body: dict[str, Any] = {"query": query, "session_id": f"load-agent-{number}"}
        if requested:
            body["dataset_ids"] = list(requested)
        path = ANSWER if not probe and rng.random() < 0.2 else LOOKUP
        answer = http.call("POST", path, key.secret, body=body)
        out.append(observe(key, requested, probe, answer, path, phase,
                           tuple(d for d, _ in picked)))
        served = answer.body.get("evidence") if isinstance(answer.body, dict) else None
        if served and not stop.is_set() and rng.random() < 0.5:
            cited = {"tool_call_id": answer.body["tool_call_id"],
                     "document_ids": [item["document_id"] for item in served]}
            out.append(observe(key, (), False, http.call("POST", GUARD, key.secret,
                                                         body=cited), GUARD, phase))


def mutator(http: Http, fleet: Fleet, ledger: Ledger, stop: threading.Event, documents: int,
            done: Counter[str], jobs: list[int]) -> None:
    """Uploads, deactivations, reactivations and deletions, one at a time, keeping around
    `documents` live documents, at most half of them deactivated."""
    rng = random.Random(time.time_ns())
    number = 0
    while not stop.is_set():
        on, off = ledger.states()
        live = len(on) + len(off)
        # At most half the live documents deactivated: most lookups still find evidence.
        weights = {"upload": 3 if live < documents else 1,
                   "deactivate": 3 if len(on) > len(off) else 0,
                   "reactivate": 3 if off else 0, "delete": 1 if live > documents // 2 else 0}
        op = rng.choices(list(weights), weights=list(weights.values()))[0]
        if op == "upload":
            owner = rng.choice(fleet.datasets)
            number += 1
            answer, job = upload(http, fleet.admin_keys[owner.tenant], owner,
                                 f"run-{number}.md", rng, ledger)
            ok = job is not None
            if job is not None:
                jobs.append(job)
        else:
            candidates = {"deactivate": on, "reactivate": off, "delete": on + off}[op]
            doc = rng.choice(candidates)
            key = fleet.admin_keys[ledger.owners[doc].tenant]
            if op == "delete":
                answer = http.call("DELETE", f"/api/documents/{doc}", key)
                ok = answer.status == 204
                if ok:
                    ledger.switched_off(doc, at=answer.received, deleted=True)
            elif op == "deactivate":
                answer = http.call("PATCH", f"/api/documents/{doc}", key,
                                   body={"activated": False})
                ok = answer.status == 200
                if ok:
                    ledger.switched_off(doc, at=answer.received, deleted=False)
            else:
                # The interval ends when the request leaves, whatever its answer: a failed
                # reactivation must not turn later hits into false leaks (it fails the run).
                ledger.switched_on(doc, at=time.monotonic())
                answer = http.call("PATCH", f"/api/documents/{doc}", key,
                                   body={"activated": True})
                ok = answer.status == 200
        done[op if ok else f"{op} failed (HTTP {answer.status or 'none'})"] += 1
        if answer.status >= 500 or answer.status == 0:
            done["http_5xx" if answer.status else "transport"] += 1
        stop.wait(0.2)


def load_test(*, agents: Sequence[int], seconds: float, documents: int,
              progress: Progress = lambda _: None) -> LoadReport:
    """Start the platform, set up, run each agent count for `seconds` in turn (one mutator
    throughout), check, stop everything and remove the data."""
    workdir = Path(tempfile.mkdtemp(prefix="kb-loadtest-"))
    purge()
    keep_logs = True
    try:
        with deployment(workdir, progress) as port:
            http = Http(port)
            ledger = Ledger()
            started = time.monotonic()
            fleet = setup(http, documents, random.Random(time.time_ns()), ledger)
            web_threads = settings.KB_WEB_WORKERS * settings.KB_WEB_THREADS
            warm_up(http, fleet, max(*agents, web_threads))
            setup_seconds = time.monotonic() - started
            observations: list[Observation] = []
            phases: list[Phase] = []
            mutations: Counter[str] = Counter()
            jobs: list[int] = []
            crashes: list[str] = []
            finished = threading.Event()

            def guarded(target: Callable[..., None], *args: Any) -> threading.Thread:
                def run() -> None:
                    try:
                        target(*args)
                    except Exception as exc:  # a bug of the load test: it must fail the run
                        crashes.append(f"{target.__name__}: {exc!r}")

                return threading.Thread(target=run, daemon=True)

            changes = guarded(mutator, http, fleet, ledger, finished, documents, mutations,
                              jobs)
            changes.start()
            try:
                for phase, count in enumerate(agents):
                    progress(f"{count} agent(s) for {seconds:g} s")
                    phases.append(run_phase(phase, count, seconds, http, fleet, ledger,
                                            observations, guarded))
            finally:
                finished.set()
                changes.join(timeout=90)  # a request in flight ends within its timeout
            pending = drain(timeout=300)
            job_states = Counter(Job.objects.filter(pk__in=jobs).values_list("status", flat=True))
            progress("checking the answers, stopping the services")
        report = LoadReport(stack=described_stack(), documents=documents,
                            embedder=settings.KB_EMBEDDER, setup_seconds=setup_seconds,
                            phases=phases, observations=observations,
                            findings=check(observations, ledger), mutations=mutations,
                            jobs=job_states, pending_after_drain=pending, crashes=crashes)
        keep_logs = bool(report.failures())
        if keep_logs:
            report.logs = str(workdir)
        return report
    finally:
        purge()
        shutil.rmtree(workdir / "milvus", ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)


def run_phase(phase: int, agents: int, seconds: float, http: Http, fleet: Fleet,
              ledger: Ledger, observations: list[Observation],
              guarded: Callable[..., threading.Thread]) -> Phase:
    """`agents` agents for `seconds`; the machine's CPU while they ran."""
    stop = threading.Event()
    per_agent: list[list[Observation]] = [[] for _ in range(agents)]
    threads = [guarded(agent, n, phase, http, fleet, ledger, stop, per_agent[n])
               for n in range(agents)]
    cpu = CpuClock()
    began = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        stop.wait(seconds)
    finally:
        stop.set()
        deadline = time.monotonic() + 90  # a request in flight ends within its timeout
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    elapsed = time.monotonic() - began
    busy = cpu.busy_percent()
    for made in per_agent:
        observations.extend(made)
    return Phase(agents=agents, elapsed=elapsed, cpu_busy_percent=busy)
