"""Enqueue background work by task name, so a lower floor never imports the task's module.

The task runs after the surrounding transaction commits (a worker must never read a row that
is not committed yet). A broker that cannot take the message does not undo the committed
change: the change is marked as due (Document.revision) and the recovery applies it: a
worker's, or with tasks in-process (the embedded default), the web process's own.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.db import connections, transaction

from kbplatform.celery import app

logger = logging.getLogger(__name__)


_loading = threading.Lock()


def send(name: str, *args: Any) -> None:
    """Enqueue now (or, in eager mode, run now)."""
    if name not in app.tasks:
        # Task modules load lazily (autodiscovery); a web process has not needed them yet,
        # and a task Celery does not know is sent to the broker even in eager mode. One
        # thread loads them: another, finding them half loaded, sent its task nowhere.
        with _loading:
            app.loader.import_default_modules()
    app.signature(name, args=args).delay()


def enqueue_on_commit(name: str, *args: Any) -> None:
    def fire() -> None:
        try:
            send(name, *args)
        except Exception:
            logger.exception("could not enqueue %s%r; the worker's recovery will apply it",
                             name, args)

    transaction.on_commit(fire)


# What the periodic loop sends each round: the recovery, the sources' syncs that are due (a
# source's interval is kept to within one round), and the audit's erasure of raw query text
# past its tenant's retention (at most KB_AUDIT_RAW_QUERY_RETENTION_DAYS).
PERIODIC_TASKS = ("retrieval.tasks.recover_task", "datasets.tasks.sources_sync_due_task",
                  "audit.tasks.raw_queries_erase_task")


def recover_periodically(stop: threading.Event) -> threading.Thread:
    """The recovery (retrieval/index/recovery.py), the due source syncs (datasets/sources/)
    and the audit's raw-query retention (PERIODIC_TASKS) now, then every
    KB_RECOVERY_INTERVAL_SECONDS until `stop` is set, from a thread of its own. A worker sends
    them to its queue; with tasks in-process they run in that thread, so that what an outage
    left undone (a deletion whose Milvus rows stayed, an upload that gave up) is applied, and
    sources follow their schedule, without a worker or an operator."""

    def loop() -> None:
        while True:
            for name in PERIODIC_TASKS:
                try:
                    send(name)
                except Exception:
                    logger.exception("could not run %s", name)
                finally:
                    connections.close_all()  # this thread's own, if it ran in-process
            if stop.wait(settings.KB_RECOVERY_INTERVAL_SECONDS):
                return

    thread = threading.Thread(target=loop, name="kb-recovery", daemon=True)
    thread.start()
    return thread
