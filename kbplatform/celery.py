import os
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kbplatform.settings")

app = Celery("kbplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_stop = threading.Event()


@worker_ready.connect
def _recover_periodically(**_: Any) -> None:
    """A started worker picks up what a dead one left (retrieval/index/recovery.py), then keeps
    looking: a change whose message was lost is applied within one interval."""
    from kbplatform.tasks import recover_periodically

    recover_periodically(_stop)


@worker_shutdown.connect
def _stop_recovery(**_: Any) -> None:
    _stop.set()
