"""The embedded default's SQLite file under concurrent clients: writes wait their turn behind
lookups (which commit audit rows) and other writers, and fail only when the database is really
unavailable (a lock held longer than the timeout: tests/kbplatform/test_errors.py)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections

from datasets.models import Document
from tests.conftest import wait_until
from tests.datasets.builders import api_client, runbook, upload

# SQLite's own locking; the services' MariaDB lock is in tests/retrieval/test_faults.py.
pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]

SECONDS = 90  # every loop stops at this deadline, whatever it has done by then


def _in_thread(work: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def lookups(kb: Any) -> Iterator[Callable[[int], list[int]]]:
    """`lookups(n)` starts n threads looking up (each writes an audit row) until the test
    ends; the statuses they got."""
    stop = threading.Event()
    statuses: list[int] = []
    threads: list[threading.Thread] = []

    def start(n: int) -> list[int]:
        for i in range(n):
            def loop(i: int = i) -> None:
                client = api_client(kb.tool_secret)
                deadline = time.monotonic() + SECONDS
                while not stop.is_set() and time.monotonic() < deadline:
                    statuses.append(client.post(
                        "/api/tools/lookup_knowledge",
                        {"query": f"redis dashboard {i}", "session_id": f"s{i}"},
                        format="json").status_code)
            threads.append(_in_thread(loop))
        return statuses

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=60)


@pytest.fixture
def kb(kb: Any, make_key: Any) -> Any:
    _, kb.tool_secret = make_key(role="tool")
    _, kb.admin_secret = make_key(role="admin")
    return kb


def test_flips_under_a_lookup_thread_all_succeed(kb, store, ingest, lookups) -> None:
    """Issue 24: with one lookup thread running, 2 of 20 flips answered 503 "database is
    locked" (a deferred transaction read, then could not upgrade to write)."""
    redis = ingest(kb.dataset, "redis.md", runbook("redis"))
    looked = lookups(1)
    wait_until(lambda: len(looked) >= 3, timeout=60, what="the lookups under way",
               interval=0.05)

    flips = []
    for n in range(20):
        flips.append(kb.admin.patch(f"/api/documents/{redis.doc_key}",
                                    {"activated": n % 2 == 1}, format="json"))
    assert [r.status_code for r in flips if r.status_code != 200] == [], \
        [r.content for r in flips if r.status_code != 200][:3]
    assert Document.objects.get(pk=redis.pk).activated is True
    assert looked and set(looked) == {200}


def test_uploads_toggles_and_deletions_of_eight_clients_all_succeed(kb, store, ingest,
                                                                    lookups) -> None:
    """Issue 24: under 16 clients, 76 of ~1,500 uploads / toggles / deletions were refused."""
    documents = [ingest(kb.dataset, f"base{n}.md", runbook(f"base{n}")) for n in range(4)]
    looked = lookups(2)
    outcomes: Counter[tuple[str, int]] = Counter()
    refused: list[bytes] = []
    deadline = time.monotonic() + SECONDS

    def client_loop(n: int) -> None:
        client, rng = api_client(kb.admin_secret), random.Random(n)
        for op in range(25):
            if time.monotonic() > deadline:
                return
            if op % 8 == 3:  # a new document, then (half the time) its deletion
                response = upload(client, kb.dataset.pk, f"c{n}-{op}.md",
                                  runbook(f"client{n} op{op}", sections=1))
                kind = "upload"
                if response.status_code == 202 and rng.random() < 0.5:
                    outcomes[kind, response.status_code] += 1
                    key = response.json()["document"]["document_id"]
                    response, kind = client.delete(f"/api/documents/{key}"), "delete"
            else:
                target = rng.choice(documents)
                response, kind = client.patch(f"/api/documents/{target.doc_key}",
                                              {"activated": rng.random() < 0.5},
                                              format="json"), "toggle"
            outcomes[kind, response.status_code] += 1
            if response.status_code >= 500:
                refused.append(response.content)

    threads = [_in_thread(lambda n=n: client_loop(n)) for n in range(6)]
    for thread in threads:
        thread.join(timeout=SECONDS + 60)

    assert not refused, (dict(outcomes), refused[:3])
    assert sum(outcomes.values()) >= 150, dict(outcomes)  # the bound was not what ended it
    assert set(looked) == {200}
    connection.close()
