"""One Milvus writer at a time across processes (a lock inside one process cannot serialise
several): the lock every writer takes, on MariaDB and on the embedded SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from retrieval.index.writer_lock import WriterBusy, milvus_writer, process_lock
from tests.conftest import BOTH_RUNTIMES, ROOT, database_url

HOLDER = """
import json, os, sys, time
import django
django.setup()
from retrieval.index.writer_lock import milvus_writer
spans = []
for _ in range(4):
    with milvus_writer(timeout=60):
        start = time.time()
        time.sleep(0.15)
        spans.append((start, time.time()))
    time.sleep(0.01)
print(json.dumps(spans))
"""


@BOTH_RUNTIMES
@pytest.mark.django_db(transaction=True)
def test_writers_in_different_processes_never_overlap(runtime: str, tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": database_url(), "MILVUS_URI": settings.MILVUS_URI,
           "KB_VAR_DIR": str(settings.VAR_DIR), "DJANGO_SETTINGS_MODULE": "kbplatform.settings"}
    processes = [subprocess.Popen([sys.executable, "-c", HOLDER], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]
    spans = sorted(span for p in processes for span in json.loads(p.communicate(timeout=120)[0]))

    assert len(spans) == 12
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, "two processes held the writer lock at once"


@BOTH_RUNTIMES
@pytest.mark.django_db(transaction=True)
def test_the_lock_is_reentrant_in_a_thread_and_busy_for_another_process(runtime: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url(), "MILVUS_URI": settings.MILVUS_URI,
           "KB_VAR_DIR": str(settings.VAR_DIR), "DJANGO_SETTINGS_MODULE": "kbplatform.settings"}
    probe = ("import django; django.setup()\n"
             "from retrieval.index.writer_lock import WriterBusy, milvus_writer\n"
             "try:\n    with milvus_writer(timeout=0.5): print('free')\n"
             "except WriterBusy: print('busy')\n")
    with milvus_writer(), milvus_writer():  # nested: the same holder
        held = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
    released = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
    assert held.stdout.strip() == "busy", held.stderr
    assert released.stdout.strip() == "free", released.stderr


@pytest.mark.django_db(transaction=True)
def test_a_busy_lock_gives_up_after_its_timeout() -> None:
    started = time.monotonic()
    with process_lock("index-operation", timeout=0):
        # Another thread is another holder (its own database session or file handle).
        import threading

        outcome: list[str] = []

        def other() -> None:
            try:
                with process_lock("index-operation", timeout=1):
                    outcome.append("got it")
            except WriterBusy:
                outcome.append("busy")
            finally:
                connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert outcome == ["busy"]
    assert time.monotonic() - started < 10
