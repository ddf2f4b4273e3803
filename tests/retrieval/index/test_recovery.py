"""The embedded default repairs itself (issue 24): in-process mode (no worker) left the rows of
a document deleted during a Milvus outage in Milvus until someone ran `reconcile_index
--repair`. Its web process runs the recovery a worker would run (kbplatform/tasks.py), so the
deletion is applied once Milvus is back; meanwhile lookups never serve the document."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kbplatform.processes import ROOT
from kbplatform.tasks import recover_periodically
from retrieval.index.milvus import reset_connection
from retrieval.index.reconcile import reconcile
from retrieval.index.versions import serving_index
from tests.conftest import database_url, wait_until
from tests.datasets.builders import found_doc_ids, runbook

pytestmark = pytest.mark.django_db(transaction=True)

# Opens the Milvus Lite file through the platform's connection (which takes the file's lock
# first) and keeps it (a file opens in one process at a time) until its stdin closes, then
# closes it, which stops its engine and frees the file.
HOLD_FILE = ("import sys\nfrom retrieval.index.milvus.connection import MilvusConnection\n"
             "connection = MilvusConnection(uri=sys.argv[1])\nconnection.client()\n"
             "print('held', flush=True)\nsys.stdin.read()\nconnection.close()\n")


@pytest.fixture
def outage(milvus_server: Any, settings: Any) -> Iterator[tuple[Callable[[], None],
                                                                Callable[[], None]]]:
    """(begin, end) of a Milvus outage: the embedded file held by another process, or the
    services' Milvus server stopped."""
    holder: list[subprocess.Popen[str]] = []

    def begin() -> None:
        if milvus_server is not None:
            milvus_server.stop()
            return
        deadline = time.monotonic() + 60
        while True:
            reset_connection()  # this process lets the file go, another takes it
            process = subprocess.Popen([sys.executable, "-c", HOLD_FILE, settings.MILVUS_URI],
                                       cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True)
            assert process.stdout is not None
            if process.stdout.readline().strip() == "held":
                holder.append(process)
                return
            # The in-process recovery (a pass a second) opened the file again in between.
            process.wait(timeout=60)
            assert time.monotonic() < deadline, "no other process could take the Milvus file"

    def end() -> None:
        if milvus_server is not None:
            if milvus_server.process is None:
                milvus_server.start()
            return
        for process in holder:
            if process.poll() is None:
                assert process.stdin is not None
                process.stdin.close()
                process.wait(timeout=60)
        holder.clear()

    yield begin, end
    end()


@pytest.fixture
def in_process_recovery(settings: Any) -> Iterator[None]:
    """The web process's recovery, as kbplatform/wsgi.py starts it, every second."""
    settings.KB_RECOVERY_INTERVAL_SECONDS = 1
    settings.KB_RECOVERY_GRACE_SECONDS = 0
    stop = threading.Event()
    thread = recover_periodically(stop)
    yield
    stop.set()
    thread.join(timeout=120)


def test_a_deletion_during_an_outage_is_applied_without_an_operator(
        kb, store, ingest, eager_tasks, outage, in_process_recovery, monkeypatch) -> None:
    begin, end = outage
    redis, kafka = (ingest(kb.dataset, f"{t}.md", runbook(t)) for t in ("redis", "kafka"))
    monkeypatch.setattr("retrieval.tasks.time.sleep", lambda seconds: None)  # quick give-up

    begin()
    deleted = kb.admin.delete(f"/api/documents/{kafka.doc_key}")
    lookup = kb.tool.post("/api/tools/lookup_knowledge", {"query": "kafka dashboard restart"},
                          format="json")
    assert deleted.status_code == 204
    assert lookup.status_code == 503 and lookup.json()["evidence_status"] == "UNAVAILABLE"
    end()

    wait_until(lambda: store.chunk_ids(kafka.doc_id) == [], timeout=60,
               what="the deletion applied once Milvus is back, without reconcile_index")
    assert len(store.chunk_ids(redis.doc_id)) == 2
    answer = kb.tool.post("/api/tools/lookup_knowledge", {"query": "kafka dashboard restart"},
                          format="json").json()
    assert kafka.doc_key not in found_doc_ids(answer)
    report = reconcile(version=serving_index().version)
    assert report.clean, report.summary()


@pytest.mark.embedded
@pytest.mark.parametrize(("eager", "recovering"), [("true", True), ("false", False)])
def test_the_web_process_recovers_by_itself_when_no_worker_does(tmp_path, eager: str,
                                                                recovering: bool) -> None:
    threads = ("import threading, kbplatform.wsgi\n"
               "print(sorted(t.name for t in threading.enumerate()))")
    env = {k: v for k, v in os.environ.items() if k != "KB_RECOVERY_IN_PROCESS"}
    done = subprocess.run([sys.executable, "-c", threads], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={**env, "DATABASE_URL": database_url(), "KB_VAR_DIR": str(tmp_path),
                               "CELERY_TASK_ALWAYS_EAGER": eager})
    assert done.returncode == 0, done.stderr
    assert ("'kb-recovery'" in done.stdout.splitlines()[-1]) is recovering
