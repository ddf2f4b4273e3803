"""Setup and clean-up: the load test's tenants, datasets, keys and documents."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.db.models import F

from datasets.documents.services import tenant_get_or_create
from datasets.models import ApiKey, Dataset, Document, Job, Tenant
from datasets.tenancy.keys import api_key_create
from evaluation.benchmarks import synthetic_text
from evaluation.loadtest import LoadTestError
from evaluation.loadtest.client import LOOKUP, Answer, Http
from evaluation.loadtest.ledger import Ledger, Owner, ToolKey

TENANTS = ("load-a", "load-b")
DATASETS = ("one", "two")
# No vowels, no s or y: neither jieba nor the stemmer changes them, so BM25 matches them whole.
MARKER_LETTERS = "bcdfghjkmnpqrtvwxz"


@dataclass
class Fleet:
    """What setup made: the agents' keys, the mutator's admin keys and the datasets."""

    tool_keys: list[ToolKey]
    admin_keys: dict[int, str]  # tenant → admin key
    datasets: list[Owner]


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


def purge() -> None:
    """Remove the load test's tenants and all they own: a re-run starts clean. Their chunks
    only ever lived in the load test's own Milvus, which is thrown away."""
    tenants = Tenant.objects.filter(slug__in=TENANTS)
    Dataset.objects.filter(tenant__in=tenants).delete()  # documents, chunks, jobs, configs
    tenants.delete()  # keys and audit rows


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
