"""Enqueue background work by task name, so a lower floor never imports the task's module.

The task runs after the surrounding transaction commits (a worker must never read a row that
is not committed yet). A broker that cannot take the message does not undo the committed
change: the change is marked as due (Document.revision) and the worker's recovery applies it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from kbplatform.celery import app

logger = logging.getLogger(__name__)


def send(name: str, *args: Any) -> None:
    """Enqueue now (or, in eager mode, run now)."""
    if name not in app.tasks:
        # Task modules load lazily (autodiscovery); a web process has not needed them yet,
        # and a task Celery does not know is sent to the broker even in eager mode.
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
