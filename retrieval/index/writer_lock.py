"""One Milvus writer at a time, across processes: Milvus Lite loses acknowledged rows otherwise.

Every write to Milvus runs inside `milvus_writer(...)`, whoever writes: the indexing worker,
an in-process (eager) task, a command. A lock inside one process cannot serialise processes,
so the lock lives where every process of an installation meets: the database. On MariaDB/MySQL
it is a named lock (GET_LOCK) held by this thread's connection; on SQLite, a file lock beside
the database file. The server or the OS releases it when its holder dies.

With KB_MILVUS_SINGLE_WRITER=false (a Milvus server, where indexing scales out over workers)
the lock is taken per document instead: different documents are written in parallel, and one
document still has one writer at a time.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

_held = threading.local()  # name → depth: the lock is reentrant within a thread
POLL_SECONDS = 0.05


class WriterBusy(Exception):
    """The lock was not free within the timeout: transient, the task retries."""


def lock_name(what: str) -> str:
    # Named locks are server-wide: the database name keeps two installations apart.
    where = f"{connection.settings_dict['NAME']}|{settings.MILVUS_URI}|{what}"
    return "kb-" + hashlib.sha256(where.encode()).hexdigest()[:40]


@contextmanager
def milvus_writer(scope: str = "all", *, timeout: float | None = None) -> Iterator[None]:
    """Write to Milvus: `scope` is "all", or "doc:<id>" (used when writers scale out)."""
    with process_lock("milvus:" + ("all" if settings.KB_MILVUS_SINGLE_WRITER else scope),
                      timeout=settings.KB_WRITER_LOCK_TIMEOUT_SECONDS if timeout is None
                      else timeout):
        yield


@contextmanager
def process_lock(what: str, *, timeout: float) -> Iterator[None]:
    """An exclusive lock across the installation's processes, reentrant within a thread;
    WriterBusy when it is not free within `timeout` seconds."""
    name = lock_name(what)
    depth: dict[str, int] = getattr(_held, "depth", None) or {}
    _held.depth = depth
    if depth.get(name):
        depth[name] += 1
        try:
            yield
        finally:
            depth[name] -= 1
        return
    release = _acquire(name, timeout)
    depth[name] = 1
    try:
        yield
    finally:
        depth.pop(name, None)
        release()


def _acquire(name: str, wait: float) -> Callable[[], None]:
    if connection.vendor == "mysql":
        return _acquire_named(name, wait)
    return _acquire_file(name, wait)


def _acquire_named(name: str, wait: float) -> Callable[[], None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT GET_LOCK(%s, %s)", [name, max(0, int(wait))])
        (got,) = cursor.fetchone()
    if got != 1:
        raise WriterBusy(f"another process has held the lock for over {wait:.0f} s")
    held_by = connection.connection  # the lock belongs to this session

    def release() -> None:
        if connection.connection is held_by:
            with connection.cursor() as cursor:
                cursor.execute("SELECT RELEASE_LOCK(%s)", [name])

    return release


def _lock_file(name: str) -> Path:
    database = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite" and os.path.isabs(database):
        folder = Path(database).parent  # shared by every process using this database
    else:  # an in-memory database lives in one process: any shared folder will do
        folder = Path(settings.VAR_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f".{name}.lock"


def _acquire_file(name: str, wait: float) -> Callable[[], None]:
    handle = _lock_file(name).open("a+b")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise WriterBusy(
                    f"another process has held the lock for over {wait:.0f} s") from None
            time.sleep(POLL_SECONDS)

    def release() -> None:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()

    return release
