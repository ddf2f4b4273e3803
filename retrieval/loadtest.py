"""A bounded load test on 127.0.0.1 (`manage.py load_test`, docs/reliability.md "Load test").

What a deployment runs is started on free ports — a Milvus Lite server, one indexing worker,
gunicorn with threads, and a Redis of its own as the Celery broker — pointed at this
process's database and cache. N agents then look up while one mutator uploads, deactivates,
reactivates and deletes documents through the HTTP API, and every answer is checked: no
evidence of another tenant or of a dataset outside the key's scope, none of a document that
was switched off for the whole time of the request.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection
from django.db.models import F

from datasets.auth import api_key_create
from datasets.models import ApiKey, Dataset, Document, Job, Tenant
from datasets.services import tenant_get_or_create
from retrieval.benchmarks import Timing, synthetic_text
from retrieval.index_versions import active_version
from retrieval.milvus.collections import MilvusCollections
from retrieval.milvus.connection import MilvusConnection

TENANTS = ("load-a", "load-b")
DATASETS = ("one", "two")
WEB_THREADS = 8
LOOKUP = "/api/tools/lookup_knowledge"
# No vowels, no s or y: neither jieba nor the stemmer changes them, so BM25 matches them whole.
MARKER_LETTERS = "bcdfghjkmnpqrtvwxz"
FOREVER = float("inf")

Progress = Callable[[str], None]


class LoadTestError(Exception):
    """The load test could not run (a service did not start, setup failed)."""


# --- the processes -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    stop_signal: int = signal.SIGTERM
    process: subprocess.Popen[bytes] | None = None

    def start(self, ready: Callable[[], bool], timeout: float = 120.0) -> None:
        with self.log.open("ab") as out:
            # A session of its own: a Ctrl-C reaches this command only, which then stops the
            # services in order (web, worker, Milvus last, with SIGINT).
            self.process = subprocess.Popen(self.argv, cwd=settings.BASE_DIR, env=self.env,
                                            stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None:
                raise LoadTestError(f"{self.name} exited with {self.process.returncode}; "
                                    f"its log: {self.log}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise LoadTestError(f"{self.name} did not start in {timeout:.0f} s; "
                                    f"its log: {self.log}\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(self.stop_signal)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def database_url() -> str:
    """This process's database (in the test suite: the test database) as a DATABASE_URL."""
    if connection.vendor != "mysql":
        raise LoadTestError("the load test needs DATABASE_URL=mysql://...: its web server and "
                            "worker are separate processes, which SQLite serialises")
    db = connection.settings_dict
    user, password = quote(str(db["USER"] or ""), safe=""), quote(str(db["PASSWORD"] or ""),
                                                                    safe="")
    return (f"mysql://{user}:{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 3306}/"
            f"{db['NAME']}")


def serve_active_version(uri: str) -> None:
    """The new Milvus is empty. When the database already serves an index version, give it
    that version's collection (empty) so that uploads are indexed as in production; without
    one, the first upload creates it. Nothing else writes yet: the worker is not started."""
    version = active_version()
    if version is None:
        return
    store = MilvusCollections(MilvusConnection(uri=uri, timeout=settings.MILVUS_TIMEOUT_SECONDS),
                              alias=settings.MILVUS_COLLECTION)
    try:
        store.create(version.collection_name, version.dimension)
        store.point_alias(version.collection_name)
    finally:
        store.connection.close()


@contextmanager
def platform(workdir: Path, progress: Progress) -> Iterator[int]:
    """Broker, Milvus, worker and web on free ports of 127.0.0.1; the web port. Stopped in
    reverse order when the block ends, however it ends."""
    binary = Path(sys.executable).parent / "milvus-lite"
    redis_server = shutil.which("redis-server")
    if not binary.exists() or redis_server is None:
        raise LoadTestError("the load test needs milvus-lite (in the virtualenv) and "
                            "redis-server on PATH")
    broker_port, milvus_port, web_port = free_port(), free_port(), free_port()
    # A broker of its own: a worker already on the shared broker's `indexing` queue (the test
    # suite's, a deployment's) would take these tasks and write them into its own Milvus.
    broker = f"redis://127.0.0.1:{broker_port}/0"
    milvus_uri = f"http://127.0.0.1:{milvus_port}"
    env = {**os.environ, "DATABASE_URL": database_url(), "MILVUS_URI": milvus_uri,
           "MILVUS_TOKEN": "", "CELERY_BROKER_URL": broker, "CELERY_TASK_ALWAYS_EAGER": "false",
           "REDIS_URL": settings.REDIS_URL or f"redis://127.0.0.1:{broker_port}/1",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    with ExitStack() as stack:
        progress(f"starting redis (broker) :{broker_port}, milvus-lite :{milvus_port}, "
                 f"celery worker, gunicorn :{web_port} — logs in {workdir}")
        redis = Service("redis-server", [redis_server, "--bind", "127.0.0.1", "--port",
                                         str(broker_port), "--save", "", "--appendonly", "no",
                                         "--dir", str(workdir)], env, workdir / "redis.log")
        stack.callback(redis.stop)
        redis.start(lambda: port_open(broker_port))
        milvus = Service("milvus-lite", [str(binary), "server", "--data-dir",
                                         str(workdir / "milvus"), "--host", "127.0.0.1",
                                         "--port", str(milvus_port), "--max-workers", "1"],
                         env, workdir / "milvus.log", stop_signal=signal.SIGINT)
        stack.callback(milvus.stop)
        milvus.start(lambda: port_open(milvus_port))
        serve_active_version(milvus_uri)
        worker_log = workdir / "worker.log"
        worker = Service("celery worker", [
            sys.executable, "-m", "celery", "-A", "kbplatform", "worker", "--pool", "solo",
            "--concurrency", "1", "--queues", "indexing,celery", "--without-gossip",
            "--without-mingle", "--hostname", f"loadtest-{os.getpid()}@%h",
            "--loglevel", "INFO"], env, worker_log)
        stack.callback(worker.stop)
        worker.start(lambda: "ready." in worker_log.read_text(errors="replace"))
        web = Service("gunicorn", [
            sys.executable, "-m", "gunicorn", "kbplatform.wsgi:application", "--bind",
            f"127.0.0.1:{web_port}", "--workers", "1", "--threads", str(WEB_THREADS),
            "--timeout", "120", "--graceful-timeout", "10"], env, workdir / "web.log")
        stack.callback(web.stop)
        web.start(lambda: port_open(web_port))
        yield web_port


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) stops the services like Ctrl-C instead of orphaning
    them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --- HTTP ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    status: int  # 0: no HTTP answer (refused, reset, timed out)
    body: Any
    sent: float  # time.monotonic() before connecting
    received: float  # after the whole body was read


class Http:
    """One connection per request, as a fleet of short-lived agent calls makes them."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port = port
        self.timeout = timeout

    def call(self, method: str, path: str, key: str, *, body: Any = None,
             upload: tuple[str, bytes] | None = None, timeout: float | None = None) -> Answer:
        headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
        payload: bytes | None = None
        if upload is not None:
            boundary = uuid.uuid4().hex
            name, raw = upload
            payload = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                       f'filename="{name}"\r\nContent-Type: text/markdown\r\n\r\n').encode() \
                + raw + f"\r\n--{boundary}--\r\n".encode()
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        elif body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        client = http.client.HTTPConnection("127.0.0.1", self.port,
                                            timeout=timeout or self.timeout)
        sent = time.monotonic()
        try:
            client.request(method, path, body=payload, headers=headers)
            response = client.getresponse()
            raw_body, status = response.read(), response.status
        except (OSError, http.client.HTTPException):
            return Answer(0, None, sent, time.monotonic())
        finally:
            client.close()
        received = time.monotonic()
        try:
            parsed = json.loads(raw_body) if raw_body else None
        except ValueError:
            parsed = None
        return Answer(status, parsed, sent, received)


# --- what the checks know: owners and switched-off intervals ----------------------------------

@dataclass(frozen=True)
class Owner:
    tenant: int
    dataset: int


@dataclass(frozen=True)
class ToolKey:
    label: str
    secret: str
    tenant: int
    datasets: tuple[int, ...]  # what it may read


class Ledger:
    """Each document's owner and marker words, and the intervals in which it was switched
    off: from the moment the answer to the deactivation or deletion arrived to the moment
    the reactivation was sent (or forever)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owners: dict[str, Owner] = {}
        self.markers: dict[str, tuple[str, ...]] = {}
        self.off: dict[str, list[list[float]]] = {}
        self.deleted: dict[str, float] = {}  # when the deletion's answer arrived

    def add(self, doc_id: str, owner: Owner, markers: tuple[str, ...]) -> None:
        with self._lock:
            self.owners[doc_id] = owner
            self.markers[doc_id] = markers

    def switched_off(self, doc_id: str, *, at: float, deleted: bool) -> None:
        with self._lock:
            intervals = self.off.setdefault(doc_id, [])
            if deleted:
                self.deleted[doc_id] = at
            if not intervals or intervals[-1][1] != FOREVER:
                intervals.append([at, FOREVER])

    def switched_on(self, doc_id: str, *, at: float) -> None:
        with self._lock:
            intervals = self.off.get(doc_id)
            if intervals and intervals[-1][1] == FOREVER:
                intervals[-1][1] = at

    def served_while_off(self, doc_id: str, sent: float, received: float) -> str:
        """"deleted" or "deactivated" when the document was off from before `sent` to after
        `received`; "" otherwise (a switch during the request may go either way)."""
        for start, end in self.off.get(doc_id, ()):
            if start <= sent and received <= end:
                return "deleted" if self.deleted.get(doc_id, FOREVER) <= sent else "deactivated"
        return ""

    def states(self) -> tuple[list[str], list[str]]:
        """(on, off): live documents that are activated, and deactivated ones."""
        with self._lock:
            live = [d for d in self.owners if d not in self.deleted]
            off = {d for d in live if self.off.get(d) and self.off[d][-1][1] == FOREVER}
            return [d for d in live if d not in off], sorted(off)

    def pick(self, rng: random.Random, count: int) -> list[tuple[str, str]]:
        """(document, one of its marker words): half served documents, half deactivated or
        deleted ones — the queries ask for exactly what must not be served."""
        with self._lock:
            off = [d for d in self.off if self.off[d][-1][1] == FOREVER]
            on = list(self.markers.keys() - set(off))
            picked = [rng.choice(off if off and (not on or rng.random() < 0.5) else on)
                      for _ in range(count)]
            return [(d, rng.choice(self.markers[d])) for d in picked]


def marker(rng: random.Random) -> str:
    return "".join(rng.choice(MARKER_LETTERS) for _ in range(8))


def runbook(rng: random.Random, markers: tuple[str, ...]) -> bytes:
    """A small runbook in the shared ops vocabulary, with its own marker words."""
    first, second = markers
    parts = [f"---\ntitle: Runbook {first}\ndomain: load\ncategory: load\n"
             f"keywords: [{first}, {second}]\n---\n# Runbook {first}\n"]
    for step in range(3):
        parts.append(f"\n## Step {step + 1} {markers[step % 2]}\n\n{synthetic_text(rng, 50)} "
                     f"{first} {synthetic_text(rng, 20)} {second}。\n")
    return "".join(parts).encode("utf-8")


# --- setup and clean-up ------------------------------------------------------------------------

def purge() -> None:
    """Remove the load test's tenants and all they own: a re-run starts clean. Their chunks
    only ever lived in the load test's own Milvus, which is thrown away."""
    tenants = Tenant.objects.filter(slug__in=TENANTS)
    Dataset.objects.filter(tenant__in=tenants).delete()  # documents, chunks, jobs, configs
    tenants.delete()  # keys and audit rows


@dataclass
class Fleet:
    """What setup made: the agents' keys, the mutator's admin keys and the datasets."""

    tool_keys: list[ToolKey]
    admin_keys: dict[int, str]  # tenant → admin key
    datasets: list[Owner]


def expect(answer: Answer, status: int, what: str) -> dict[str, Any]:
    if answer.status != status or not isinstance(answer.body, dict):
        raise LoadTestError(f"{what}: HTTP {answer.status or 'no answer'} {answer.body!r:.300}")
    return answer.body


def upload(http: Http, key: str, owner: Owner, name: str, rng: random.Random,
           ledger: Ledger) -> tuple[Answer, int | None]:
    """Upload a new runbook; recorded in the ledger once its id is known. (answer, job id)"""
    markers = (marker(rng), marker(rng))
    answer = http.call("POST", f"/api/datasets/{owner.dataset}/documents", key,
                       upload=(name, runbook(rng, markers)))
    if answer.status == 202 and isinstance(answer.body, dict):
        ledger.add(answer.body["document"]["document_id"], owner, markers)
        return answer, int(answer.body["job"]["id"])
    return answer, None


def wait_for_jobs(http: Http, key_of: dict[int, str], timeout: float) -> None:
    """Follow every job with GET /api/jobs/{id}, as an uploader does; fail on a failed one."""
    deadline = time.monotonic() + timeout
    for job, key in key_of.items():
        while True:
            body = expect(http.call("GET", f"/api/jobs/{job}", key), 200, f"job {job}")
            if body["status"] == Job.Status.SUCCEEDED:
                break
            if body["status"] == Job.Status.FAILED:
                raise LoadTestError(f"indexing job {job} failed: {body['error']}")
            if time.monotonic() > deadline:
                raise LoadTestError(f"indexing job {job} still {body['status']} after "
                                    f"{timeout:.0f} s")
            time.sleep(0.2)


def setup(http: Http, documents: int, rng: random.Random, ledger: Ledger) -> Fleet:
    """Two tenants with two datasets each, keys of every kind, `documents` indexed."""
    fleet = Fleet(tool_keys=[], admin_keys={}, datasets=[])
    for slug in TENANTS:
        tenant = tenant_get_or_create(slug=slug)
        _, admin = api_key_create(tenant=tenant, role=ApiKey.Role.ADMIN, name="load mutator")
        fleet.admin_keys[tenant.pk] = admin
        created = []
        for name in DATASETS:
            # The first call also waits for gunicorn's worker to boot.
            body = expect(http.call("POST", "/api/datasets", admin, body={"name": name},
                                    timeout=180), 201, f"creating dataset {slug}/{name}")
            created.append(Dataset.objects.get(pk=body["id"]))
        fleet.datasets += [Owner(tenant.pk, d.pk) for d in created]
        _, unscoped = api_key_create(tenant=tenant, name="load agent")
        fleet.tool_keys.append(ToolKey(f"{slug}/*", unscoped, tenant.pk,
                                       tuple(d.pk for d in created)))
        for dataset in created:
            _, scoped = api_key_create(tenant=tenant, name="load agent", datasets=[dataset])
            fleet.tool_keys.append(ToolKey(f"{slug}/{dataset.name}", scoped, tenant.pk,
                                           (dataset.pk,)))
    jobs: dict[int, str] = {}
    for number in range(documents):
        owner = fleet.datasets[number % len(fleet.datasets)]
        key = fleet.admin_keys[owner.tenant]
        answer, job = upload(http, key, owner, f"setup-{number}.md", rng, ledger)
        if job is None:
            raise LoadTestError(f"uploading setup-{number}.md: HTTP "
                                f"{answer.status or 'no answer'} {answer.body!r:.300}")
        jobs[job] = key
    wait_for_jobs(http, jobs, timeout=600 + 10 * documents)
    return fleet


def warm_up(http: Http, fleet: Fleet, burst: int) -> None:
    """Untimed: the first lookup loads the embedder, and a first concurrent burst (every web
    thread's first lookup) takes seconds on a cold process — not the steady state measured."""
    keys = [fleet.tool_keys[n % len(fleet.tool_keys)] for n in range(burst)]
    expect(http.call("POST", LOOKUP, keys[0].secret, body={"query": "warm up"}, timeout=180),
           200, "the first lookup")
    with ThreadPoolExecutor(burst) as pool:
        answers = list(pool.map(lambda key: http.call("POST", LOOKUP, key.secret, body={
            "query": f"warm up {synthetic_text(random.Random(), 4)}"}), keys))
    for key, answer in zip(keys, answers, strict=True):
        expect(answer, 200, f"warm-up lookup with {key.label}")


def drain(timeout: float) -> int:
    """Wait for the worker to apply every change of the load test's documents (so that
    nothing is half-written when Milvus stops); how many are still pending."""
    pending = Document.objects.filter(dataset__tenant__slug__in=TENANTS).exclude(
        synced_revision=F("revision"))
    deadline = time.monotonic() + timeout
    while pending.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    return pending.count()


# --- the run -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    key: ToolKey
    requested: tuple[int, ...]
    probe: bool  # asked for a dataset outside the key's scope: must be refused (400)
    status: int
    evidence_status: str
    doc_ids: tuple[str, ...]
    sent: float
    received: float
    asked: tuple[str, ...] = ()  # the documents whose marker words the query carried


def observe(key: ToolKey, requested: tuple[int, ...], probe: bool, answer: Answer,
            asked: tuple[str, ...] = ()) -> Observation:
    body = answer.body if isinstance(answer.body, dict) else {}
    evidence = body.get("evidence") or []
    return Observation(key=key, requested=requested, probe=probe, status=answer.status,
                       asked=asked,
                       evidence_status=str(body.get("evidence_status", "")),
                       doc_ids=tuple(str(item["document_id"]).split("#chunk-", 1)[0]
                                     for item in evidence),
                       sent=answer.sent, received=answer.received)


def agent(number: int, http: Http, fleet: Fleet, ledger: Ledger, stop: threading.Event,
          out: list[Observation]) -> None:
    """Lookups back to back with one key: queries in the shared vocabulary with the marker
    words of documents of every tenant and dataset, sometimes narrowed, sometimes probing a
    dataset outside the key's scope."""
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
        answer = http.call("POST", LOOKUP, key.secret, body=body)
        out.append(observe(key, requested, probe, answer, tuple(d for d, _ in picked)))


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


@dataclass
class Findings:
    out_of_scope: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Lookups whose query named a document that was off for the whole request: the chances
    # a leak had to show.
    asked_for_off: int = 0


def check(observations: list[Observation], ledger: Ledger) -> Findings:
    """Every answer against what the key may read and what was off during the request."""
    found = Findings()
    for seen in observations:
        if seen.probe:
            if seen.status == 200:
                found.out_of_scope.append(f"{seen.key.label} was answered for datasets "
                                          f"{list(seen.requested)} outside its scope")
            continue
        allowed = set(seen.requested or seen.key.datasets) & set(seen.key.datasets)
        if seen.status and any(ledger.served_while_off(d, seen.sent, seen.received)
                               for d in seen.asked):
            found.asked_for_off += 1
        for doc in seen.doc_ids:
            owner = ledger.owners.get(doc)
            if owner is None or owner.tenant != seen.key.tenant or owner.dataset not in allowed:
                where = f"tenant {owner.tenant} dataset {owner.dataset}" if owner else "unknown"
                found.out_of_scope.append(f"{seen.key.label} (datasets {sorted(allowed)}) got "
                                          f"document {doc} of {where}")
                continue
            state = ledger.served_while_off(doc, seen.sent, seen.received)
            if state:
                getattr(found, state).append(f"{seen.key.label} got {state} document {doc}")
    return found


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


def load_test(*, agents: int, seconds: float, documents: int,
              progress: Progress = lambda _: None) -> LoadReport:
    """Start the platform, set up, run, check, stop everything and remove the data."""
    workdir = Path(tempfile.mkdtemp(prefix="kb-loadtest-"))
    purge()
    keep_logs = True
    try:
        with platform(workdir, progress) as port:
            http = Http(port)
            ledger = Ledger()
            started = time.monotonic()
            fleet = setup(http, documents, random.Random(time.time_ns()), ledger)
            warm_up(http, fleet, max(agents, WEB_THREADS))
            setup_seconds = time.monotonic() - started
            progress(f"setup done in {setup_seconds:.1f} s; {agents} agents for {seconds:g} s")
            stop = threading.Event()
            observations: list[list[Observation]] = [[] for _ in range(agents)]
            mutations: Counter[str] = Counter()
            jobs: list[int] = []
            crashes: list[str] = []

            def guarded(target: Callable[..., None], *args: Any) -> threading.Thread:
                def run() -> None:
                    try:
                        target(*args)
                    except Exception as exc:  # a bug of the load test: it must fail the run
                        crashes.append(f"{target.__name__}: {exc!r}")

                return threading.Thread(target=run, daemon=True)

            threads = [guarded(agent, n, http, fleet, ledger, stop, observations[n])
                       for n in range(agents)]
            threads.append(guarded(mutator, http, fleet, ledger, stop, documents, mutations,
                                   jobs))
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
            pending = drain(timeout=300)
            job_states = Counter(Job.objects.filter(pk__in=jobs).values_list("status", flat=True))
            progress("checking the answers, stopping the services")
        everything = [o for per_agent in observations for o in per_agent]
        report = LoadReport(agents=agents, seconds=seconds, documents=documents,
                            embedder=settings.KB_EMBEDDER, setup_seconds=setup_seconds,
                            elapsed=elapsed, observations=everything,
                            findings=check(everything, ledger), mutations=mutations,
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
